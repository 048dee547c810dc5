/* shm_cma: large all_gather and broadcast in one copy, read straight from the
 * peers' buffers with process_vm_readv (Linux cross-memory attach), instead of
 * through the segment's slots (a copy in, then a copy out), as Open MPI's vader
 * does; and, where DDP_SHM_CMA=1 asks for it (the staged pipeline is faster,
 * shm_coll.c), large all_reduce of private buffers without the slots: each rank
 * reads its slice of every peer's buffer into a scratch chunk that stays in
 * its cache, sums the chunk into its own buffer, and writes the sum into
 * every peer's (process_vm_writev). No rank waits for another between the
 * start and the end, so a descheduled peer holds up only its own slice.
 *
 * A collective: every rank declares it (the usual descriptor, compared as on
 * the staged path, which starts the same way: a rank that took the other path
 * for another size is caught too) with its buffer's address and length,
 * publishes and waits for every peer; reads; records whether its reads failed
 * and publishes again; waits for every peer (no rank returns, and reuses its
 * buffer, while a peer may still read it) and looks at every rank's failure
 * flag. All see the same flags, so all fall back together. A flag is written
 * after the first wait of a collective, when every peer has finished reading
 * the flags of the previous one.
 *
 * Init: every rank reads a word of every peer's memory and writes it back
 * (a broadcast's root, and an all_reduce, write into the peers); the single
 * copy is on
 * only if all could (agreed through the segment). It is refused across pid
 * namespaces, by seccomp in some containers, and by Yama (ptrace_scope 1)
 * between processes that are not descendants of each other: ranks that share a
 * parent (ddprun's agent, ddp_spawn) name that parent as their ptracer, whose
 * descendants they all are, which is narrower than PR_SET_PTRACER_ANY. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include "shm.h"
#include "util.h"

/* Below, two cached copies beat a system call per peer. Measured at 2 ranks
 * (bench_allreduce, medians of 7, the single copy against the staged path):
 * all_gather of 16 KiB each 3.5 us against 4.3, 64 KiB 4.6-5.4 against 7.0,
 * 128 KiB 7.2-8.2 against 10.4-11.0; broadcast of 32 KiB 2.5-3.1 against
 * 3.4-3.5, 64 KiB 3.3-4.2 against 6.2-6.4; at 8 KiB the staged path is ahead
 * (all_gather 2.4 us against 2.2-3.4), at 16 KiB a broadcast ties. It was
 * 256 KiB, which left Open MPI (its single copy from a few KiB) 1.3-1.8x
 * ahead from 32 to 256 KiB of all_gather. */
#define CMA_MIN_BYTES (16 * 1024)
/* all_reduce: each peer's part of a chunk, read into the scratch at a time
 * (the scratch, one part per peer, stays within about 1 MiB: in the L2). */
#define CMA_REDUCE_CHUNK   (256 * 1024)
#define CMA_REDUCE_SCRATCH (1024 * 1024)
#define CMA_TEST_ENV	   "DDP_TEST_CMA_FAIL"
/* Where the kernel copies much slower than memcpy, the single copy pays
 * off only in a window of sizes (shm_coll.c has the windows and their
 * measurements): below, its system calls cost more than the staged path's
 * two cached copies and one wait; above, the staged path's copies in user
 * space beat the kernel's one. The limits above come from an Intel VM
 * (process_vm_readv of a peer's 32 MiB in about twice a streamed copy's
 * time; this 1 MiB ratio was not taken there), where the single copy led
 * from 16 KiB up to 64 MiB. A Firecracker guest on AMD EPYC (Zen 5;
 * 2026-12-05) takes 2.9-3.9x memcpy's time for 1 MiB through
 * process_vm_readv (2.8 us a call, 0.2 us a 4 KiB page it pins, against
 * memcpy's 0.05). Local rank 0 times it at init: its own memory through the
 * kernel (the same pinning and copy as a peer's) against memcpy, 1 MiB, the
 * best of three each (about a millisecond with faulting the buffer in);
 * slow: more than CMA_SLOW_RATIO times as long. */
#define CMA_CAL_BYTES	  (1024 * 1024)
#define CMA_SLOW_RATIO	  2.5
#define CMA_SLOW_TEST_ENV "DDP_TEST_CMA_SLOW" /* test hook: the verdict, 0 or 1 */
/* A transfer goes in pieces of this, the abort flag looked at before each
 * (a system call per MiB: a few percent of a microsecond per KiB). */
#define CMA_PIECE (1024 * 1024)

/* Test hook: DDP_TEST_CMA_FAIL=probe, read, write or stop, optionally
 * ":<rank>" for one global rank and then ":<n>": that rank's probe fails, or
 * its first (n-th) single-copy read, or write; stop: the rank stops itself
 * (SIGSTOP) before its n-th transfer of an all_reduce. */
static int test_hook(struct ddpi_shm *s, const struct ddp_env *env)
{
	const char *v = getenv(CMA_TEST_ENV), *colon;
	int what;

	if (!v)
		return 0;
	if (!strncmp(v, "probe", 5))
		what = 1;
	else if (!strncmp(v, "read", 4))
		what = 2;
	else if (!strncmp(v, "write", 5))
		what = 3;
	else if (!strncmp(v, "stop", 4))
		what = 4;
	else
		return 0;
	colon = strchr(v, ':');
	if (colon && atoi(colon + 1) != env->rank)
		return 0;
	colon = colon ? strchr(colon + 1, ':') : NULL;
	s->cma_test_nth = colon ? atoi(colon + 1) : 1;
	return what;
}

/* The test hook's failure for this transfer, once; or its stop. */
static int test_fails(struct ddpi_shm *s, int write)
{
	int what = s->cma_test_fail;

	if ((what != (write ? 3 : 2) && what != 4) || --s->cma_test_nth > 0)
		return 0;
	s->cma_test_fail = 0;
	if (what == 4)
		raise(SIGSTOP);
	return what != 4;
}

/* len bytes between local and remote in q's memory: read or written, in
 * pieces, each only while no local rank has given up on the collective
 * (-ECANCELED): a rank that timed out or failed returns at once and may
 * reuse its buffer, which a peer that was descheduled must not write into
 * when it resumes (at most the piece under way can still land). */
static int xfer(struct ddpi_shm *s, int q, int write, void *local, uint64_t remote, size_t len)
{
	pid_t pid = ddpi_shm_pid_of(s, q);

	while (len) {
		size_t piece = len < CMA_PIECE ? len : CMA_PIECE;
		struct iovec l = {local, piece}, r = {(void *)(uintptr_t)remote, piece};
		ssize_t n;
		if (ddpi_shm_aborted(s))
			return -ECANCELED;
		n = write ? process_vm_writev(pid, &l, 1, &r, 1, 0)
			  : process_vm_readv(pid, &l, 1, &r, 1, 0);
		if (n < 0 && errno == EINTR)
			continue;
		/* A peer that aborted (its reason in the segment) and exited
		 * since the look above fails the call with ESRCH: no fault of
		 * the single copy's, nothing to say about it (as for an abort
		 * seen before the call). */
		if (n <= 0)
			return ddpi_shm_aborted(s) ? -ECANCELED : n < 0 ? -errno : -EIO;
		local = (char *)local + n;
		remote += (uint64_t)n;
		len -= (size_t)n;
	}
	return 0;
}

static int sync_init(struct ddpi_shm *s, int64_t deadline)
{
	return ddpi_shm_wait_all(s, ddpi_shm_publish(s), deadline, "init");
}

/* Whether the kernel backs anonymous memory, and so the buffers the single
 * copy reads, with transparent huge pages by itself ("always"; "madvise"
 * only where a program asks). Pinning a 2 MiB page costs what pinning a
 * 4 KiB one does, so the single copy stays cheaper up to larger results. */
static int thp_always(void)
{
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "re");
	char line[128] = "";
	int yes;

	if (!f)
		return 0;
	yes = fgets(line, sizeof(line), f) && strstr(line, "[always]");
	fclose(f);
	return yes;
}

/* 1 where the kernel copies much slower than memcpy (CMA_SLOW_RATIO), 0
 * where not or where it cannot be timed; *ratio: its time over memcpy's (0:
 * the test hook decided). */
static int kernel_copy_slow(double *ratio)
{
	const char *v = getenv(CMA_SLOW_TEST_ENV);
	uint64_t best_k = UINT64_MAX, best_m = UINT64_MAX;
	char *a;

	*ratio = 0;
	if (v)
		return atoi(v) == 1;
	if (!(a = aligned_alloc(4096, 2 * CMA_CAL_BYTES)))
		return 0;
	memset(a, 1, 2 * CMA_CAL_BYTES); /* no page faults in the timing */
	for (int i = 0; i < 3; i++) {
		struct iovec l = {a + CMA_CAL_BYTES, CMA_CAL_BYTES}, r = {a, CMA_CAL_BYTES};
		uint64_t t0 = util_now_ns(), t1, t2;
		if (process_vm_readv(getpid(), &l, 1, &r, 1, 0) != CMA_CAL_BYTES) {
			best_k = 0;
			break;
		}
		t1 = util_now_ns();
		memcpy(a + CMA_CAL_BYTES, a, CMA_CAL_BYTES);
		/* The copy must happen, though nothing reads it. */
		__asm__ volatile("" : : "r"(a) : "memory");
		t2 = util_now_ns();
		best_k = t1 - t0 < best_k ? t1 - t0 : best_k;
		best_m = t2 - t1 < best_m ? t2 - t1 : best_m;
	}
	free(a);
	if (best_k == 0 || best_m == 0)
		return 0;
	*ratio = (double)best_k / (double)best_m;
	return *ratio > CMA_SLOW_RATIO;
}

/* 1 if this rank reads (and writes) every peer's probe word, else 0 (not wanted) or -errno. */
static int32_t probe(struct ddpi_shm *s, const struct ddp_env *env)
{
	if (env->shm_cma == 0)
		return 0;
	if (!s->liveness)
		return -ESRCH; /* another pid namespace: its pids are not ours */
	if (s->cma_test_fail == 1)
		return -EPERM;
	for (int q = 0; q < s->lws; q++) {
		const struct ddpi_cma_ctl *c = ddpi_shm_cma_ctl(s, q);
		uint64_t v = 0;
		int rc;
		if (q == s->me)
			continue;
		if ((rc = xfer(s, q, 0, &v, c->probe_addr, sizeof(v))) < 0)
			return rc;
		if (v != c->probe_val)
			return -ESRCH; /* not the process we meant */
		/* A broadcast's root and an all_reduce write too (a seccomp
		 * profile may allow only the reads): the same word back, which
		 * changes nothing. */
		if ((rc = xfer(s, q, 1, &v, c->probe_addr, sizeof(v))) < 0)
			return rc;
	}
	return 1;
}

int ddpi_shm_cma_init(struct ddpi_shm *s, const struct ddp_env *env, int64_t deadline)
{
	struct ddpi_cma_ctl *my = ddpi_shm_cma_ctl(s, s->me);
	int same_parent = 1, off = -1, rc;
	double ratio = 0;

	s->cma_min = 0;
	if (s->lws == 1)
		return 0;
	s->cma_test_fail = test_hook(s, env);
	s->cma_warn = env->shm_cma == 1 && !env->quiet;
	s->cma_probe = (util_now_ns() ^ ((uint64_t)getpid() << 32)) | 1;
	my->probe_addr = (uintptr_t)&s->cma_probe;
	my->probe_val = s->cma_probe;
	my->ppid = (int32_t)getppid();
	/* Local rank 0's threshold counts. With more local ranks than cores the
	 * staged pipeline wins (measured: 4 ranks on 2 cores, 64 MiB, 0.7x):
	 * its copies go through slots in cache, not from the peers' DRAM. */
	my->min_bytes = env->shm_cma == 1 ? 1 : s->oversubscribed ? 0 : CMA_MIN_BYTES;
	my->huge = s->me == 0 && thp_always(); /* local rank 0's counts */
	if ((rc = sync_init(s, deadline)) < 0)
		return rc;
	for (int q = 0; q < s->lws; q++)
		same_parent &= ddpi_shm_cma_ctl(s, q)->ppid == my->ppid;
	if (env->shm_cma != 0 && same_parent && my->ppid > 1 && util_yama_ptrace_scope() == 1)
		prctl(PR_SET_PTRACER, (unsigned long)my->ppid, 0, 0, 0);
	/* Every rank has named its ptracer before any reads. */
	if ((rc = sync_init(s, deadline)) < 0)
		return rc;
	my->ok = probe(s, env);
	/* Local rank 0's verdict counts. Timed only where the single copy may
	 * run (after the probe: no system call the probe would not make) at
	 * sizes that depend on it, and not where anonymous memory is on huge
	 * pages, cheap to pin, which the timing's buffer may not be. */
	my->slow = s->me == 0 && my->ok == 1 && my->min_bytes > 1 && !my->huge &&
		   kernel_copy_slow(&ratio);
	/* all_reduce's scratch, where it may take the single copy: only where
	 * DDP_SHM_CMA=1 asks (local rank 0's min_bytes 1, shm_coll.c). */
	if (my->ok == 1 && ddpi_shm_cma_ctl(s, 0)->min_bytes == 1) {
		size_t per = CMA_REDUCE_SCRATCH / (size_t)(s->lws - 1) & ~(size_t)4095;
		s->cma_chunk = per < 4096 ? 4096 : per > CMA_REDUCE_CHUNK ? CMA_REDUCE_CHUNK : per;
		s->cma_scratch = aligned_alloc(4096, s->cma_chunk * (size_t)(s->lws - 1));
		if (!s->cma_scratch)
			my->ok = -ENOMEM;
	}
	if ((rc = sync_init(s, deadline)) < 0)
		return rc;
	for (int q = 0; q < s->lws && off < 0; q++)
		if (ddpi_shm_cma_ctl(s, q)->ok != 1)
			off = q;
	if (off < 0) {
		s->cma_min = (size_t)ddpi_shm_cma_ctl(s, 0)->min_bytes;
		s->cma_slow = ddpi_shm_cma_ctl(s, 0)->slow;
		s->cma_huge = ddpi_shm_cma_ctl(s, 0)->huge;
		/* Said once, by the local rank 0 that timed it on rank 0's node. */
		if (s->cma_slow && s->me == 0 && ddpi_shm_local_of(s, 0) >= 0 && !env->quiet) {
			char why[64];
			if (ratio > 0)
				snprintf(why, sizeof(why), "%.1fx memcpy's time", ratio);
			else
				snprintf(why, sizeof(why), "%s=1", CMA_SLOW_TEST_ENV);
			fprintf(stderr,
				"[rank%d] libddp: the kernel's copy between processes is slow "
				"here (%s): the single copy between local ranks takes only a "
				"window of sizes (DDP_SHM_CMA in libddp(3))\n",
				env->rank, why);
		}
	} else if (s->cma_warn && s->me == 0) {
		int32_t why = ddpi_shm_cma_ctl(s, off)->ok;
		fprintf(stderr,
			"[rank%d] libddp: DDP_SHM_CMA=1: no single copy between local ranks (rank "
			"%d: %s): staging through shared memory\n",
			env->rank, ddpi_shm_rank_of(s, off),
			why ? strerror(-why) : "DDP_SHM_CMA=0");
	}
	return 0;
}

/* After this rank's reads: publish whether they failed, wait until no peer
 * reads from us any more, and see whether any rank's reads failed (1: move
 * the data the staged way; the single copy is off from now on). */
static int finish(struct ddpi_shm *s, int failed, int64_t deadline, const char *what)
{
	int rc, any = 0;

	ddpi_shm_cma_ctl(s, s->me)->failed = failed;
	if ((rc = ddpi_shm_wait_all(s, ddpi_shm_publish(s), deadline, what)) < 0)
		return rc;
	for (int q = 0; q < s->lws; q++)
		any |= ddpi_shm_cma_ctl(s, q)->failed != 0;
	if (!any)
		return 0;
	s->cma_min = 0;
	return 1;
}

/* Bytes [lo, hi) of q's published buffer (bytes long), read into or written
 * from local + lo; 1, said why, on failure. */
static int peer_copy(struct ddpi_shm *s, int q, int write, char *local, size_t lo, size_t hi,
		     size_t bytes, const char *what)
{
	const struct ddpi_cma_ctl *c = ddpi_shm_cma_ctl(s, q);
	int rc;

	if (lo == hi)
		return 0;
	if (c->len != bytes) /* the descriptors agree: cannot happen */
		rc = -EPROTO;
	else if (test_fails(s, write))
		rc = -EFAULT;
	else if ((rc = xfer(s, q, write, local + lo, c->addr + lo, hi - lo)) == 0)
		return 0;
	if (rc == -ECANCELED) /* a rank gave up: the wait in finish says who */
		return 1;
	fprintf(stderr,
		"[rank%d] libddp: %s: %s rank %d failed (%s): staging through shared memory "
		"from now on\n",
		ddpi_shm_rank_of(s, s->me), what,
		write ? "process_vm_writev to" : "process_vm_readv from", ddpi_shm_rank_of(s, q),
		strerror(-rc));
	return 1;
}

void ddpi_shm_cma_declare(struct ddpi_shm *s, const void *buf, size_t bytes)
{
	struct ddpi_cma_ctl *my = ddpi_shm_cma_ctl(s, s->me);

	my->addr = (uintptr_t)buf;
	my->len = bytes;
}

static int declare(struct ddpi_shm *s, const void *buf, size_t bytes, int declared,
		   int64_t deadline, const char *what)
{
	if (declared)
		return 0;
	ddpi_shm_cma_declare(s, buf, bytes);
	return ddpi_shm_sync_all(s, deadline, what);
}

/* A broadcast's slice k of n (whole pages): the root writes slice k into the
 * reader k ranks after it, which reads the rest, so that the root's core
 * copies too: every rank copies (n - 1) / n of the message. */
void ddpi_shm_bcast_slice(size_t bytes, int n, int k, size_t *lo, size_t *hi)
{
	size_t per = (bytes / (size_t)n + 4095) & ~(size_t)4095;

	*lo = (size_t)k * per < bytes ? (size_t)k * per : bytes;
	*hi = (size_t)(k + 1) * per < bytes ? (size_t)(k + 1) * per : bytes;
}

int ddpi_shm_cma_broadcast(struct ddpi_shm *s, void *buf, size_t bytes, int root, int declared,
			   int64_t deadline)
{
	int rc, failed = 0, n = s->lws;
	size_t lo, hi;

	if ((rc = declare(s, buf, bytes, declared, deadline, ddpi_shm_what(s, "broadcast"))) < 0)
		return rc;
	if (s->me == root) {
		for (int k = 1; k < n && !failed; k++) {
			ddpi_shm_bcast_slice(bytes, n, k, &lo, &hi);
			failed = peer_copy(s, (root + k) % n, 1, buf, lo, hi, bytes,
					   ddpi_shm_what(s, "broadcast"));
		}
	} else {
		ddpi_shm_bcast_slice(bytes, n, (s->me - root + n) % n, &lo, &hi);
		failed =
			peer_copy(s, root, 0, buf, 0, lo, bytes, ddpi_shm_what(s, "broadcast")) ||
			peer_copy(s, root, 0, buf, hi, bytes, bytes, ddpi_shm_what(s, "broadcast"));
	}
	return finish(s, failed, deadline, ddpi_shm_what(s, "broadcast"));
}

int ddpi_shm_cma_all_gather(struct ddpi_shm *s, const void *send, void *recv, size_t bytes,
			    const int *pos, int declared, int64_t deadline)
{
	char *my_dst = (char *)recv + (size_t)pos[s->me] * bytes;
	int rc, failed = 0;

	if ((rc = declare(s, send, bytes, declared, deadline, ddpi_shm_what(s, "all_gather"))) < 0)
		return rc;
	/* Start at the next rank: the peers' reads spread over the owners. */
	for (int k = 1; k < s->lws && !failed; k++) {
		int q = (s->me + k) % s->lws;
		failed = peer_copy(s, q, 0, (char *)recv + (size_t)pos[q] * bytes, 0, bytes, bytes,
				   ddpi_shm_what(s, "all_gather"));
	}
	/* My own part while the slower peers still read (send may alias it). */
	if (!failed && my_dst != send)
		memmove(my_dst, send, bytes);
	return finish(s, failed, deadline, ddpi_shm_what(s, "all_gather"));
}

/* My slice's chunk [off, off + m): every peer's part read into the scratch,
 * summed in rank order (every rank's slices come out of the same kernel, so
 * the ranks' results are bit-identical) into my buffer, then written into
 * every peer's. 0, or the failed transfer's -errno, with *wrote set when it
 * was a write (a read fails before anything of the chunk changed). */
static int reduce_chunk(struct ddpi_shm *s, char *buf, size_t off, size_t m, enum ddp_dtype dt,
			enum ddp_op op, int avg_div, int *peer, int *wrote)
{
	const void *src[DDPI_SHM_MAX_LOCAL];
	size_t es = ddp_dtype_size(dt), lo = off * es, len = m * es;
	int n = s->lws, rc = 0, q = s->me;

	*wrote = 0;
	for (int k = 1; k < n && rc == 0; k++) {
		q = (s->me + k) % n;
		src[q] = s->cma_scratch + (size_t)(q < s->me ? q : q - 1) * s->cma_chunk;
		if (test_fails(s, 0)) {
			/* Where it struck, for the tests that aim it. */
			fprintf(stderr, "[rank%d] libddp: %s: read fails at element %zu (%zu)\n",
				ddpi_shm_rank_of(s, s->me), CMA_TEST_ENV, off, m);
			rc = -EFAULT;
		} else {
			rc = xfer(s, q, 0, (void *)src[q], ddpi_shm_cma_ctl(s, q)->addr + lo, len);
		}
	}
	if (rc == 0) {
		src[s->me] = buf + lo;
		ddpi_reduce(dt, op, buf + lo, src, n, m, avg_div);
		*wrote = 1;
		for (int k = 1; k < n && rc == 0; k++) {
			q = (s->me + k) % n;
			rc = test_fails(s, 1) ? -EFAULT
					      : xfer(s, q, 1, buf + lo,
						     ddpi_shm_cma_ctl(s, q)->addr + lo, len);
		}
	}
	*peer = q;
	return rc;
}

void ddpi_shm_cma_reduce_left(const struct ddpi_shm *s, int q, size_t count, size_t es, size_t *lo,
			      size_t *hi)
{
	const struct ddpi_cma_ctl *c = ddpi_shm_cma_ctl(s, q);

	ddpi_shm_slice_bounds(count, s->lws, q, es, lo, hi);
	if (c->failed == 1)
		*lo = (size_t)c->resume;
	else
		*lo = *hi;
}

int ddpi_shm_cma_all_reduce(struct ddpi_shm *s, void *buf, size_t count, enum ddp_dtype dt,
			    enum ddp_op op, int avg_div, int declared, int64_t deadline)
{
	struct ddpi_cma_ctl *my = ddpi_shm_cma_ctl(s, s->me);
	size_t es = ddp_dtype_size(dt), per = s->cma_chunk / es, lo, hi, off;
	int rc, peer = s->me, wrote = 0, left = 0;

	if ((rc = declare(s, buf, count * es, declared, deadline, ddpi_shm_what(s, "all_reduce"))) <
	    0)
		return rc;
	ddpi_shm_slice_bounds(count, s->lws, s->me, es, &lo, &hi);
	for (off = lo; off < hi; off += per)
		if ((rc = reduce_chunk(s, buf, off, hi - off < per ? hi - off : per, dt, op,
				       avg_div, &peer, &wrote)) < 0)
			break;
	/* A failed read left the chunk, and the rest of my slice, as it was in
	 * every buffer: it is staged after (ddpi_shm_cma_reduce_left). A failed
	 * write cannot be undone: peers may hold the chunk's sum, others not. */
	my->failed = rc == 0 ? 0 : wrote ? 2 : 1;
	my->resume = off < hi ? off : hi;
	my->fail_peer = ddpi_shm_rank_of(s, peer);
	my->fail_err = -rc;
	if (rc < 0 && rc != -ECANCELED && !wrote)
		fprintf(stderr,
			"[rank%d] libddp: all_reduce: process_vm_readv from rank %d failed (%s): "
			"staging through shared memory from now on\n",
			ddpi_shm_rank_of(s, s->me), my->fail_peer, strerror(-rc));
	/* Nobody returns while a peer may still read or write its buffer. */
	if ((rc = ddpi_shm_wait_all(s, ddpi_shm_publish(s), deadline,
				    ddpi_shm_what(s, "all_reduce"))) < 0)
		return rc;
	for (int q = 0; q < s->lws; q++) {
		const struct ddpi_cma_ctl *c = ddpi_shm_cma_ctl(s, q);
		if (c->failed == 2) {
			s->cma_min = 0;
			ddpi_err(-EIO,
				 "all_reduce: rank %d's process_vm_writev to rank %d failed (%s): "
				 "the result is lost (some ranks' buffers hold part of it; "
				 "DDP_SHM_CMA=0 stages every call)",
				 ddpi_shm_rank_of(s, q), c->fail_peer, strerror(c->fail_err));
			return q == s->me
				       ? -EIO
				       : ddpi_caused_by(-EIO, "rank %d's process_vm_writev failed",
							ddpi_shm_rank_of(s, q));
		}
		left |= c->failed == 1;
	}
	if (!left)
		return 0;
	s->cma_min = 0;
	return 1;
}
