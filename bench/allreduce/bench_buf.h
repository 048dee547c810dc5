/* bench_buf: the buffers every side of bench/allreduce times (libddp, Open
 * MPI, the floor), allocated alike. BENCH_HUGEPAGES=1 asks for transparent
 * huge pages (MADV_HUGEPAGE), as on a host whose THP setting is "always":
 * a copy between processes (process_vm_readv, both libraries' single copy)
 * pins every page of the peer's buffer, and measured here 64 MiB took 15 ms
 * over 4 KiB pages against 10.5 ms over 2 MiB ones (a plain memcpy: 10 ms).
 * Header-only: mpi_coll.c is built with mpicc, apart from the project. */
#ifndef BENCH_BUF_H
#define BENCH_BUF_H

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define BENCH_BUF_ALIGN ((size_t)2 << 20)

/* bytes (plus 64 of slack) of memory, NULL when there is none; free(). */
static inline void *bench_buf(size_t bytes)
{
	const char *e = getenv("BENCH_HUGEPAGES");
	size_t len = (bytes + 64 + BENCH_BUF_ALIGN - 1) / BENCH_BUF_ALIGN * BENCH_BUF_ALIGN;
	void *p;

	if (!e || strcmp(e, "1"))
		return malloc(bytes + 64);
	if (!(p = aligned_alloc(BENCH_BUF_ALIGN, len)))
		return NULL;
	madvise(p, len, MADV_HUGEPAGE); /* a hint: refused, the pages stay small */
	return p;
}

#endif
