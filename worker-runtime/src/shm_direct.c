/* shm_direct: the collectives whose buffers are, on every rank of the node,
 * in memory the ranks share (shm_mem.c: the reducer's buckets, ddp_alloc):
 * each rank reads its peers' buffers where they are, with no copy into the
 * staging slots and none through the kernel. The agreement on it
 * (ddpi_shm_zc_begin, or ddpi_shm_zc_decide in a staged broadcast's first
 * step) was the start: every rank is in the call, its buffer ready. The
 * last step of each keeps every rank in until no peer reads its buffer any
 * more: a buffer changes only once its owner's call has returned. */
#include <signal.h>
#include <string.h>

#include "shm.h"

/* Summed through a block in L1 and copied out of it with memcpy: the
 * slice's lines were last read or written by the peers, and stores in
 * place had to take each back from their caches first, where memcpy's
 * string copy writes whole lines (AMD EPYC guest, 2026-12-06). */
#define BLOCK_BYTES 8192 /* above glibc's string-copy threshold (2 KiB) */
/* A broadcast's piece of the root's buffer, read into the cache once and
 * written into every reader's: within L2 (1 MiB here) for all the copies.
 * 16, 64 and 256 KiB measured alike within the noise (2026-12-06). */
#define BCAST_BLOCK_BYTES (64 * 1024)

/* Test hook (DDP_TEST_ZC_STOP): the rank stops itself at its nth copy, or
 * at the last step after its copies. */
static void test_stop(struct ddpi_shm *s)
{
	if (s->zc_test_stop_nth > 0 && --s->zc_test_stop_nth == 0)
		raise(SIGSTOP);
}

/* Whether this rank may copy into a buffer, its peers' or from them, now:
 * not once a rank gave up on the collective (it timed out or failed,
 * returned at once and may reuse its buffer), which a rank that was
 * descheduled meanwhile must not write into, nor take as its input, when it
 * resumes. At most the copy under way (a block) can still land, as in the
 * single copy's transfers (shm_cma.c). */
static int may_write(struct ddpi_shm *s)
{
	test_stop(s);
	return !ddpi_shm_aborted(s);
}

/* The step that ends a direct collective: every rank wrote all it had to
 * (its publish comes after its writes), or one gave up, maybe after the
 * others' last publish, while this rank still wrote: what it wrote, and
 * what it read from a buffer its owner may have reused, is not the result. */
static int finish(struct ddpi_shm *s, int64_t deadline, const char *what)
{
	test_stop(s);
	int rc = ddpi_shm_wait_all(s, ddpi_shm_publish(s), deadline, what);

	return rc == 0 && ddpi_shm_aborted(s) ? ddpi_shm_abort_error(s, what) : rc;
}

/* all_reduce: each rank sums its slice of every rank's buffer and writes
 * the sum into every rank's buffer, its own and its peers'; then it waits
 * until every rank has done the same. No rank reads or writes another's
 * slice, so there is nothing to wait for in between: one step at the end.
 * Each byte is read once from every buffer and written once into every
 * buffer, where the staged and the former direct pipelines also copied the
 * finished slices from their owners (reading every buffer about twice) and
 * waited for each chunk's owners in turn. AMD EPYC guest, 2026-12-06, float32,
 * interleaved runs against that pipeline: 2 ranks 256 KiB 10 us against 28, 1
 * MiB 29 against 90, 16 MiB 0.56 ms against 1.26, 64 MiB 3.3 against 5.4; 4
 * ranks on 2 cores 1 MiB 104 us against 220, 16 MiB 2.4 ms against 3.4, 64
 * MiB 8.5-11 against 14.5. Every rank's result is the same block, copied:
 * bit-identical everywhere. zc_begin's second step was the start (every
 * rank in, its buffer ready); a buffer changes only once its owner's call
 * has returned, which it does once every rank's writes are done. */
int ddpi_shm_all_reduce_direct(struct ddpi_shm *s, char *const *peer, size_t count,
			       enum ddp_dtype dt, enum ddp_op op, int avg_div, int64_t deadline)
{
	_Alignas(64) char block[BLOCK_BYTES];
	const void *src[DDPI_SHM_MAX_LOCAL];
	size_t es = ddp_dtype_size(dt), per = BLOCK_BYTES / es, lo, hi;
	int n = s->lws;

	ddpi_shm_slice_bounds(count, n, s->me, es, &lo, &hi);
	for (size_t at = lo; at < hi; at += per) {
		size_t k = hi - at < per ? hi - at : per;
		for (int q = 0; q < n; q++)
			src[q] = peer[q] + at * es;
		ddpi_reduce(dt, op, block, src, n, k, avg_div);
		for (int q = 0; q < n; q++) {
			if (!may_write(s))
				return ddpi_shm_abort_error(s, ddpi_shm_what(s, "all_reduce"));
			memcpy(peer[(s->me + q) % n] + at * es, block, k * es);
		}
	}
	return finish(s, deadline, ddpi_shm_what(s, "all_reduce"));
}

/* all_gather: every part straight from its owner's send buffer into recv
 * (my own from mine, unless send is my part of recv). Every rank goes
 * through the owners in the same order, so that the ranks read the same send
 * buffer at about the same time: what one fetches from memory the others
 * find in the shared L3, and each send buffer is read from memory about
 * once, as through the slots, with no copy into them. Measured here (64 MiB
 * of result, streamed): 2 ranks 5.8-6.1 ms against 7.0-8.0 through the slots
 * and 7.2-8.6 with each rank starting at a different owner; 4 ranks (on 2
 * cores) 10.6-11.4 against 12.6-13.5; 16 MiB (not streamed) 1.13 against
 * 1.28-1.40. stream: the parts are streamed into recv (copy.c). */
int ddpi_shm_all_gather_direct(struct ddpi_shm *s, char *const *peer, void *recv, size_t bytes,
			       const int *pos, int stream, int64_t deadline)
{
	for (int q = 0; q < s->lws; q++) {
		char *dst = (char *)recv + (size_t)pos[q] * bytes;
		if (dst == peer[q])
			continue;
		if (!may_write(s))
			return ddpi_shm_abort_error(s, ddpi_shm_what(s, "all_gather"));
		ddpi_copy(dst, peer[q], bytes, stream);
	}
	return finish(s, deadline, ddpi_shm_what(s, "all_gather"));
}

/* broadcast, from 1 MiB: each rank, the root too, reads its slice of the
 * root's buffer and writes it into every reader's buffer, a block at a time
 * (the block comes from memory once, then from the cache), with one wait at
 * the end, as the all_reduce does: the root's buffer is read once in all,
 * where each reader copying all of it but one slice read it n - 1 times. 4
 * ranks on 2 cores, interleaved runs (2026-12-06), medians of 5: 1 MiB 67 us
 * against 101, 2 MiB 105 against 118, 4 MiB 198 against 224, 8 MiB 406
 * against 680, 16 MiB 1.0-1.5 ms against 1.8-2.3, 64 MiB 5.6-8.1 against
 * 10.6-23; 2 ranks (one reader: the same copies) alike within the noise.
 * Below 1 MiB, where every rank's turn on a core costs more than the copies
 * (32 KiB: 46 us against 32), each reader copies the root's buffer but for
 * one slice that the root writes into it meanwhile (the reader k ranks
 * after it gets slice k of n), so that the root's core copies too. */
#define BCAST_SLICES_MIN_BYTES (1024 * 1024)

int ddpi_shm_broadcast_direct(struct ddpi_shm *s, char *const *peer, size_t bytes, int root,
			      int stream, int64_t deadline)
{
	const char *what = ddpi_shm_what(s, "broadcast");
	int n = s->lws;
	size_t lo, hi;

	if (bytes < BCAST_SLICES_MIN_BYTES) {
		if (!may_write(s))
			return ddpi_shm_abort_error(s, what);
		if (s->me == root) {
			for (int k = 1; k < n; k++) {
				ddpi_shm_bcast_slice(bytes, n, k, &lo, &hi);
				ddpi_copy(peer[(root + k) % n] + lo, peer[root] + lo, hi - lo,
					  stream);
			}
		} else {
			ddpi_shm_bcast_slice(bytes, n, (s->me - root + n) % n, &lo, &hi);
			ddpi_copy(peer[s->me], peer[root], lo, stream);
			ddpi_copy(peer[s->me] + hi, peer[root] + hi, bytes - hi, stream);
		}
		return finish(s, deadline, what);
	}
	ddpi_shm_slice_bounds(bytes, n, s->me, 1, &lo, &hi);
	for (size_t at = lo; at < hi; at += BCAST_BLOCK_BYTES) {
		size_t k = hi - at < BCAST_BLOCK_BYTES ? hi - at : BCAST_BLOCK_BYTES;
		for (int j = 0; j < n; j++) {
			int q = (s->me + j) % n;
			if (q == root)
				continue;
			if (!may_write(s))
				return ddpi_shm_abort_error(s, what);
			ddpi_copy(peer[q] + at, peer[root] + at, k, stream);
		}
	}
	return finish(s, deadline, what);
}
