/* shm_coll: collectives among the ranks of one node through the shared segment.
 *
 * all_reduce, large messages (DeepSpeed's shm all-reduce, pipelined): the
 * buffer goes through in chunks that fit a staging slot. For each chunk every
 * rank copies in the parts the others reduce, reduces its own 1/N slice from
 * every rank's copy (its own part straight from its buffer) into its buffer
 * and copies it into its slot, then copies the other slices out of their
 * owners' slots. The three phases of consecutive chunks overlap (all_reduce_large),
 * so a chunk costs one synchronization, in three slots per rank. Slots are
 * small enough to stay in cache, so memory traffic stays close to the bound:
 * each input read once, each output written once.
 *
 * all_reduce, small messages: copy in, one wait, every rank reduces everything
 * (in rank order, so all get the same bits). One synchronization instead of
 * three is what makes 4 KiB fast.
 *
 * Above SMALL_BYTES, with DDP_SHM_CMA=1 and where the kernel lets the ranks
 * read and write each other's memory (shm_cma.c), an all_reduce goes without
 * the slots: each rank reads its slice of the peers' buffers, sums it into
 * its own and writes it into theirs, with no wait in between.
 *
 * all_gather and broadcast: through the slots, or, large and where the kernel
 * lets the ranks read each other's memory, in one copy (shm_cma.c).
 *
 * An all_reduce of 256 KiB or more, an all_gather or a broadcast of 32 KiB
 * or more, whose buffers are memory the ranks share (shm_mem.c) reads (an
 * all_reduce also writes) the peers' buffers in place instead (shm_direct.c). */
#include <string.h>

#include "shm.h"

#define SMALL_BYTES (32 * 1024)
#define SLICE_ALIGN 64 /* bytes: slices start on cache lines */
#define BCAST_SPLIT 4  /* broadcast chunks per slot */
/* all_gather chunks per slot, unless streamed: a quarter slot of each rank
 * stays in a 1 MiB L2 with the copies around it. A Firecracker guest on AMD
 * EPYC (Zen 5, 1 MiB of L2 a core; 2026-12-05), medians of 5 interleaved
 * runs, results of 1, 8, 16 MiB: 2 ranks 59 us, 0.52 ms, 1.41 ms against
 * 80 us, 0.91, 1.91 in whole slots; 4 ranks (8 and 16 MiB) 1.15 and 3.78
 * ms against 2.08 and 4.49. Streamed (64 MiB of result) whole slots stay
 * ahead: 2 ranks 8.6 ms against 9.3, 4 ranks 16.2 against 18.8. */
#define GATHER_SPLIT	  4
#define HUGE_STREAM_BYTES (64u << 20) /* results streamed on huge pages, each */

/* Whether results of each bytes per rank, written by writers ranks at once,
 * are streamed (copy.c): they share the L3, so all of them count, but a
 * rank's own result must outgrow its L2 too (the caller reads it next). */
static int streamed(size_t each, int writers)
{
	return DDPI_HAVE_STREAM && each >= DDPI_STREAM_MIN_EACH &&
	       each >= DDPI_STREAM_MIN_BYTES / (size_t)writers;
}

void ddpi_shm_slice_bounds(size_t m, int n, int q, size_t es, size_t *lo, size_t *hi)
{
	size_t align = SLICE_ALIGN / es;
	size_t per = (m + (size_t)n - 1) / (size_t)n;

	per = (per + align - 1) / align * align;
	*lo = (size_t)q * per < m ? (size_t)q * per : m;
	*hi = (size_t)(q + 1) * per < m ? (size_t)(q + 1) * per : m;
}

int ddpi_shm_check_all(struct ddpi_shm *s, const char *what)
{
	for (int q = 0; q < s->lws; q++) {
		int rc;
		if (q != s->me && (rc = ddpi_shm_check(s, q, what)) < 0)
			return rc;
	}
	return 0;
}

static int all_reduce_small(struct ddpi_shm *s, void *buf, size_t count, enum ddp_dtype dt,
			    enum ddp_op op, int avg_div, int64_t deadline)
{
	const void *src[DDPI_SHM_MAX_LOCAL];
	size_t bytes = count * ddp_dtype_size(dt);
	uint32_t in;
	int slot, rc;

	if ((rc = ddpi_shm_acquire_slot(s, deadline, ddpi_shm_what(s, "all_reduce"), &slot)) < 0)
		return rc;
	memcpy(ddpi_shm_slot(s, s->me, slot), buf, bytes);
	in = ddpi_shm_publish(s);
	if ((rc = ddpi_shm_wait_all(s, in, deadline, ddpi_shm_what(s, "all_reduce"))) < 0 ||
	    (rc = ddpi_shm_check_all(s, ddpi_shm_what(s, "all_reduce"))) < 0)
		return rc;
	for (int q = 0; q < s->lws; q++)
		src[q] = q == s->me ? buf : ddpi_shm_slot(s, q, slot);
	ddpi_reduce(dt, op, buf, src, s->lws, count, avg_div);
	ddpi_shm_release_slot(s, slot);
	return 0;
}

/* The large all_reduce's chunk j: its elements and where it is staged. */
struct chunk {
	char *buf; /* the caller's buffer at the chunk */
	size_t m;  /* elements */
	int slot;
};

static void chunk_at(struct chunk *c, char *buf, size_t count, size_t per, size_t es, size_t j)
{
	size_t off = j * per;

	c->buf = buf + off * es;
	c->m = count - off < per ? count - off : per;
}

/* Copy in everything except my own slice, which only I read. */
static void copy_in(struct ddpi_shm *s, const struct chunk *c, size_t es)
{
	char *mine = ddpi_shm_slot(s, s->me, c->slot);
	size_t lo, hi;

	ddpi_shm_slice_bounds(c->m, s->lws, s->me, es, &lo, &hi);
	memcpy(mine, c->buf, lo * es);
	memcpy(mine + hi * es, c->buf + hi * es, (c->m - hi) * es);
}

/* My slice from every rank's copy (mine straight from my buffer), into my
 * buffer, then copied into my slot (where the others fetch it). Not both in
 * one pass: the slot's lines were last read by the others, and the sum's
 * stores had to take each back from their caches first, where memcpy's
 * string copy writes whole lines. A Firecracker guest on AMD EPYC (Zen 5,
 * 2026-12-06), 2 ranks, float32, medians of 5 interleaved runs: 256 KiB
 * 17.0 us against 39.9 in one pass, 1 MiB 68.6 against 131.6, 16 MiB 1.22
 * ms against 2.30, 64 MiB 7.3 against 10.8; each block's copy right after
 * its sum (in L1) with vector stores gained nothing, with `rep movsb` less
 * (1 MiB 81 us). */
static void reduce_slice(struct ddpi_shm *s, const struct chunk *c, enum ddp_dtype dt,
			 enum ddp_op op, int avg_div)
{
	const void *src[DDPI_SHM_MAX_LOCAL];
	size_t es = ddp_dtype_size(dt), lo, hi;
	int me = s->me;

	ddpi_shm_slice_bounds(c->m, s->lws, me, es, &lo, &hi);
	for (int q = 0; q < s->lws; q++)
		src[q] = (q == me ? c->buf : ddpi_shm_slot(s, q, c->slot)) + lo * es;
	ddpi_reduce(dt, op, c->buf + lo * es, src, s->lws, hi - lo, avg_div);
	memcpy(ddpi_shm_slot(s, me, c->slot) + lo * es, c->buf + lo * es, (hi - lo) * es);
}

/* The other slices, reduced, out of their owners' slots. */
static void copy_out(struct ddpi_shm *s, const struct chunk *c, size_t es)
{
	for (int k = 1; k < s->lws; k++) {
		int q = (s->me + k) % s->lws; /* spread the readers over the owners */
		size_t lo, hi;
		ddpi_shm_slice_bounds(c->m, s->lws, q, es, &lo, &hi);
		memcpy(c->buf + lo * es, ddpi_shm_slot(s, q, c->slot) + lo * es, (hi - lo) * es);
	}
}

/* Large messages, pipelined so that each chunk costs one publish: step k
 * copies out the reduced chunk k-2, reduces my slice of chunk k-1 and copies
 * in chunk k, then publishes; before it, every peer has finished step k-1.
 * Chunk j's slot is read by the peers until they finish step j+2 (its copy
 * out): it is free again for chunk j+3, which needs three slots. */
static int all_reduce_large(struct ddpi_shm *s, void *buf, size_t count, enum ddp_dtype dt,
			    enum ddp_op op, int avg_div, int64_t deadline)
{
	size_t es = ddp_dtype_size(dt), per = s->slot_bytes / es;
	size_t nchunks = (count + per - 1) / per;
	struct chunk c[3];
	int rc;

	for (size_t k = 0; k < nchunks + 2; k++) {
		if (k > 0 &&
		    ((rc = ddpi_shm_wait_all(s, s->seq, deadline, ddpi_shm_what(s, "all_reduce"))) <
			     0 ||
		     (k == 1 && (rc = ddpi_shm_check_all(s, ddpi_shm_what(s, "all_reduce"))) < 0)))
			return rc;
		if (k >= 2)
			copy_out(s, &c[(k - 2) % 3], es);
		if (k >= 1 && k - 1 < nchunks)
			reduce_slice(s, &c[(k - 1) % 3], dt, op, avg_div);
		if (k < nchunks) {
			struct chunk *n = &c[k % 3];
			chunk_at(n, buf, count, per, es, k);
			if ((rc = ddpi_shm_acquire_slot(s, deadline, ddpi_shm_what(s, "all_reduce"),
							&n->slot)) < 0)
				return rc;
			copy_in(s, n, es);
			/* read by the peers until their step k+2: publish seq + 3 */
			ddpi_shm_hold_slot(s, n->slot, s->seq + 3);
		}
		/* The last step's publish would only say that this rank is done
		 * reading: its next publish, whatever it is, says that too. */
		if (k < nchunks + 1)
			ddpi_shm_publish(s);
	}
	return 0;
}

/* The single copy's read failed on some rank: the slices' parts each rank
 * left, staged (the same ranges in the same order on every rank). */
static int stage_left(struct ddpi_shm *s, void *buf, size_t count, enum ddp_dtype dt,
		      enum ddp_op op, int avg_div, int64_t deadline)
{
	size_t es = ddp_dtype_size(dt), lo, hi;
	int rc = 0;

	for (int q = 0; q < s->lws && rc == 0; q++) {
		ddpi_shm_cma_reduce_left(s, q, count, es, &lo, &hi);
		if (lo < hi)
			rc = all_reduce_large(s, (char *)buf + lo * es, hi - lo, dt, op, avg_div,
					      deadline);
	}
	return rc;
}

enum cma_kind { CMA_REDUCE, CMA_GATHER, CMA_BCAST };

/* Where the kernel copies slowly (cma_slow, shm_cma.c), the single copy's
 * window of sizes (bytes as the call counts them), by collective; {0, 0}:
 * none. Measured on such a machine (a Firecracker guest on AMD EPYC), 2
 * ranks, medians of 5-7 interleaved runs, single copy against staged: a
 * broadcast (2026-12-06) of 128 KiB 9.6 us against 6.7, 256 KiB 9.7 against
 * 11.6, 512 KiB 17.4 against 22.4, 2 MiB 64 against 73, 4 MiB 144 against
 * 149, 8 MiB 324 against 296 (2026-12-05: 16 MiB 1.2-1.6 ms against 0.9, 64
 * MiB 8.9 against 3.9; a broadcast's staged copies overlap: the root copies
 * a chunk in while the readers copy the one before out). An all_gather was
 * single-copied from 64 to 256 KiB each rank's part until its staged copies
 * went in quarter slots (GATHER_SPLIT); since, staged wins there too
 * (2026-12-06, results of 128 KiB 8.1 us against 10.4, 256 KiB 12.6 against
 * 14.5, 512 KiB 23.6 against 30.4; Open MPI's 256 KiB 11.0). */
static const size_t slow_window[][2] = {
	/* [CMA_REDUCE]: none, single_copy decides before */
	[CMA_GATHER] = {0, 0},
	[CMA_BCAST] = {256 << 10, 2 << 20},
};
/* cma_min and cma_slow are agreed and the sizes are compared: every rank
 * takes the same path (a rank with another size is caught at the start of
 * either). An all_reduce takes the single copy only where DDP_SHM_CMA=1
 * asks for it (cma_min 1): since its staged sums stopped storing into lines
 * the peers had read (reduce_slice), the pipeline beats it at every size,
 * also where the kernel's copy is timed fast. The same machine, 2 ranks,
 * float32, medians of 7 interleaved runs, staged against the single copy:
 * 64 KiB 7.1 us against 13.4, 256 KiB 22.7 against 26.0, 1 MiB 85.5
 * against 115, 4 MiB 0.34 ms against 0.50, 16 MiB 1.50 against 2.96, 64
 * MiB 8.2 against 16.4. */
static int single_copy(const struct ddpi_shm *s, size_t bytes, enum cma_kind kind)
{
	if (!s->cma_min || bytes < s->cma_min)
		return 0;
	if (kind == CMA_REDUCE)
		return s->cma_min == 1;
	return !s->cma_slow || (slow_window[kind][1] != 0 && bytes >= slow_window[kind][0] &&
				bytes <= slow_window[kind][1]);
}

int ddpi_shm_all_reduce(struct ddpi_shm *s, void *buf, size_t count, enum ddp_dtype dt,
			enum ddp_op op, int avg_div, int64_t deadline)
{
	size_t bytes = count * ddp_dtype_size(dt);
	struct ddpi_coll_desc d = {.kind = DDPI_ALL_REDUCE,
				   .dt = (uint32_t)dt,
				   .op = (uint32_t)op,
				   .root = -1,
				   .count = count};
	int rc = 0;

	if (s->lws == 1) {
		const void *src[1] = {buf};
		if (op == DDP_AVG && avg_div > 1)
			ddpi_reduce(dt, op, buf, src, 1, count, avg_div);
		return 0;
	}
	ddpi_shm_begin(s, &d);
	if (bytes <= SMALL_BYTES && bytes <= s->slot_bytes) {
		rc = all_reduce_small(s, buf, count, dt, op, avg_div, deadline);
	} else {
		char *peer[DDPI_SHM_MAX_LOCAL];
		int cma = single_copy(s, bytes, CMA_REDUCE), zc = bytes >= DDPI_ZC_REDUCE_MIN_BYTES;

		/* One step more to agree whether every buffer is shared (none
		 * is, the usual case: about a microsecond of a call that takes
		 * 30 or more); the single copy's declaration goes in it. */
		if (zc && cma)
			ddpi_shm_cma_declare(s, buf, bytes);
		rc = zc ? ddpi_shm_zc_begin(s, buf, bytes, deadline, ddpi_shm_what(s, "all_reduce"),
					    peer)
			: 0;
		if (rc == 1)
			rc = ddpi_shm_all_reduce_direct(s, peer, count, dt, op, avg_div, deadline);
		else if (rc == 0 && cma)
			rc = ddpi_shm_cma_all_reduce(s, buf, count, dt, op, avg_div, zc, deadline);
		else if (rc == 0)
			rc = all_reduce_large(s, buf, count, dt, op, avg_div, deadline);
		if (rc == 1)
			rc = stage_left(s, buf, count, dt, op, avg_div, deadline);
	}
	ddpi_shm_end(s);
	return rc;
}

/* Every rank has published for this collective: compare with each peer. */
int ddpi_shm_sync_all(struct ddpi_shm *s, int64_t deadline, const char *what)
{
	int rc = ddpi_shm_wait_all(s, ddpi_shm_publish(s), deadline, what);
	return rc < 0 ? rc : ddpi_shm_check_all(s, what);
}

/* Staged: through the root's slots. peer: the agreement on shared buffers
 * goes in the first chunk's step (each rank declared before it, 2: every
 * buffer is shared, the caller reads them in place with peer), which
 * saves a step of every rank (4 ranks on 2 cores, medians of 5: 64 KiB
 * 20.8 us against 26.1 with a step of its own, 256 KiB 32 against 50). A
 * root whose buffer is shared copies nothing until it knows that another's
 * is not. NULL: no agreement. */
static int broadcast_staged(struct ddpi_shm *s, void *buf, size_t bytes, int root, char **peer,
			    int64_t deadline)
{
	int rc = 0;

	if (bytes == 0)
		rc = ddpi_shm_sync_all(s, deadline, ddpi_shm_what(s, "broadcast"));
	/* Quarter slots: the root copies chunk k+1 in while the others copy
	 * chunk k out, so even a one-slot broadcast is a pipeline. */
	size_t step = s->slot_bytes / BCAST_SPLIT;
	int stream = streamed(bytes, s->lws - 1);
	for (size_t off = 0; off < bytes && rc == 0; off += step) {
		size_t m = bytes - off < step ? bytes - off : step;
		int held = peer && off == 0 && s->me == root && ddpi_shm_zc_declared(s, root);
		uint32_t in;
		int slot;

		if ((rc = ddpi_shm_acquire_slot(s, deadline, ddpi_shm_what(s, "broadcast"),
						&slot)) < 0)
			break;
		if (s->me == root && !held)
			memcpy(ddpi_shm_slot(s, root, slot), (char *)buf + off, m);
		in = ddpi_shm_publish(s);
		/* The first chunk waits for every rank, root included, and compares
		 * with each: a rank that wrongly believes it is the root (and so would
		 * wait for nobody) is caught on every rank, not left with its data. */
		if (off == 0 &&
		    ((rc = ddpi_shm_wait_all(s, in, deadline, ddpi_shm_what(s, "broadcast"))) < 0 ||
		     (rc = ddpi_shm_check_all(s, ddpi_shm_what(s, "broadcast"))) < 0))
			break;
		if (peer && off == 0) {
			rc = ddpi_shm_zc_decide(s, buf, deadline, ddpi_shm_what(s, "broadcast"),
						peer);
			if (rc != 0) {
				ddpi_shm_release_slot(s, slot);
				return rc == 1 ? 2 : rc;
			}
			/* Staged after all (the same answer on every rank): the root
			 * that held its chunk back copies it now, one step more. */
			held = ddpi_shm_zc_declared(s, root);
			if (held && s->me == root)
				memcpy(ddpi_shm_slot(s, root, slot), (char *)buf + off, m);
			if (held)
				in = ddpi_shm_publish(s);
		}
		if (s->me != root) {
			if ((rc = ddpi_shm_wait(s, root, in, deadline,
						ddpi_shm_what(s, "broadcast"))) < 0)
				break;
			ddpi_copy((char *)buf + off, ddpi_shm_slot(s, root, slot), m, stream);
		}
		ddpi_shm_release_slot(s, slot);
	}
	return rc;
}

int ddpi_shm_broadcast(struct ddpi_shm *s, void *buf, size_t bytes, int root, int64_t deadline)
{
	struct ddpi_coll_desc d = {.kind = DDPI_BROADCAST, .root = root, .count = bytes};
	char *peer[DDPI_SHM_MAX_LOCAL];
	int cma = single_copy(s, bytes, CMA_BCAST), rc = 1;

	if (s->lws == 1)
		return 0;
	ddpi_shm_begin(s, &d);
	if (bytes >= DDPI_ZC_MIN_BYTES && cma) {
		/* The single copy's declaration goes in the agreement's step. */
		ddpi_shm_cma_declare(s, buf, bytes);
		rc = ddpi_shm_zc_begin(s, buf, bytes, deadline, ddpi_shm_what(s, "broadcast"),
				       peer);
		if (rc == 1)
			rc = 2;
		else if (rc == 0)
			rc = ddpi_shm_cma_broadcast(s, buf, bytes, root, 1, deadline);
	} else if (bytes >= DDPI_ZC_MIN_BYTES) {
		ddpi_shm_zc_declare(s, buf, bytes);
		rc = broadcast_staged(s, buf, bytes, root, peer, deadline);
	} else if (cma) {
		rc = ddpi_shm_cma_broadcast(s, buf, bytes, root, 0, deadline);
	}
	if (rc == 2)
		rc = ddpi_shm_broadcast_direct(s, peer, bytes, root, streamed(bytes, s->lws - 1),
					       deadline);
	else if (rc == 1) /* staged from the start, or the single copy fell back */
		rc = broadcast_staged(s, buf, bytes, root, NULL, deadline);
	ddpi_shm_end(s);
	return rc;
}

/* Staged: every rank's part through its slots. own: where my own part goes,
 * streamed as it is copied in (only with stream), or NULL: the caller copies
 * it. stream: the parts are streamed into recv (copy.c). */
static int all_gather_staged(struct ddpi_shm *s, const void *send, void *recv, size_t bytes,
			     const int *pos, char *own, int stream, int64_t deadline)
{
	int rc = 0;

	if (bytes == 0)
		rc = ddpi_shm_sync_all(s, deadline, ddpi_shm_what(s, "all_gather"));
	size_t step = stream ? s->slot_bytes : s->slot_bytes / GATHER_SPLIT;
	for (size_t off = 0; off < bytes && rc == 0; off += step) {
		size_t m = bytes - off < step ? bytes - off : step;
		uint32_t in;
		int slot;

		if ((rc = ddpi_shm_acquire_slot(s, deadline, ddpi_shm_what(s, "all_gather"),
						&slot)) < 0)
			break;
		/* My own part in the same pass: send is read once. */
		ddpi_copy2(ddpi_shm_slot(s, s->me, slot), own ? own + off : NULL,
			   (const char *)send + off, m);
		in = ddpi_shm_publish(s);
		for (int k = 1; k < s->lws && rc == 0; k++) {
			int q = (s->me + k) % s->lws;
			if ((rc = ddpi_shm_wait(s, q, in, deadline,
						ddpi_shm_what(s, "all_gather"))) < 0 ||
			    (off == 0 &&
			     (rc = ddpi_shm_check(s, q, ddpi_shm_what(s, "all_gather"))) < 0))
				break;
			ddpi_copy((char *)recv + (size_t)pos[q] * bytes + off,
				  ddpi_shm_slot(s, q, slot), m, stream);
		}
		if (rc == 0)
			ddpi_shm_release_slot(s, slot);
	}
	return rc;
}

int ddpi_shm_all_gather(struct ddpi_shm *s, const void *send, void *recv, size_t bytes,
			const int *pos, int64_t deadline)
{
	struct ddpi_coll_desc d = {.kind = DDPI_ALL_GATHER, .root = -1, .count = bytes};
	char *my_dst = bytes ? (char *)recv + (size_t)pos[s->me] * bytes : recv;
	uintptr_t from = (uintptr_t)send, to = (uintptr_t)my_dst;
	/* Results too big for the caches, of buffers the ranks do not share, go
	 * through the slots, streamed, unless
	 * DDP_SHM_CMA=1 (cma_min 1) asks for the single copy at every size: the
	 * slots beat one copy through the kernel, which pins every page of the
	 * peer's buffer, on 4 KiB pages from 32 MiB of result at 2 ranks (64
	 * MiB: 9-10 ms against 13-15); on huge pages only from 64 MiB (32 MiB:
	 * 3.7 ms streamed, 3.1 ms the single copy; 64 MiB: 7.8 and 10.1 ms).
	 * My own part goes in the same pass, unless send overlaps it (in place;
	 * any other overlap breaks ddp_all_gather's contract). */
	size_t total = (size_t)s->lws * bytes;
	int stream = streamed(total, s->lws);
	int cma = single_copy(s, bytes, CMA_GATHER) &&
		  (!stream || s->cma_min == 1 || (s->cma_huge && total < HUGE_STREAM_BYTES));
	int apart = from + bytes <= to || to + bytes <= from;
	char *own = stream && apart ? my_dst : NULL;
	int rc = 1;

	if (s->lws == 1) {
		if (bytes && my_dst != send)
			memmove(my_dst, send, bytes);
		return 0;
	}
	ddpi_shm_begin(s, &d);
	/* Buffers the ranks share are read where they are (shm_direct.c). */
	if (bytes >= DDPI_ZC_MIN_BYTES) {
		char *peer[DDPI_SHM_MAX_LOCAL];

		/* The single copy's declaration goes in the same step. */
		if (cma)
			ddpi_shm_cma_declare(s, send, bytes);
		rc = ddpi_shm_zc_begin(s, (void *)send, bytes, deadline,
				       ddpi_shm_what(s, "all_gather"), peer);
		if (rc == 1)
			rc = ddpi_shm_all_gather_direct(s, peer, recv, bytes, pos, stream,
							deadline);
		else if (rc == 0 && cma)
			rc = ddpi_shm_cma_all_gather(s, send, recv, bytes, pos, 1, deadline);
		else if (rc == 0)
			rc = 1;
	} else if (cma) {
		rc = ddpi_shm_cma_all_gather(s, send, recv, bytes, pos, 0, deadline);
	}
	if (rc == 1) {
		rc = all_gather_staged(s, send, recv, bytes, pos, own, stream, deadline);
		/* send may alias my slot in recv: copy it last. */
		if (rc == 0 && !own && my_dst != send)
			memmove(my_dst, send, bytes);
	}
	ddpi_shm_end(s);
	return rc;
}

int ddpi_shm_agree(struct ddpi_shm *s, int64_t deadline, const char *what)
{
	struct ddpi_coll_desc d = {.kind = DDPI_BARRIER, .root = -1};
	int rc;

	if (s->lws == 1)
		return 0;
	ddpi_shm_begin(s, &d);
	rc = ddpi_shm_sync_all(s, deadline, what);
	ddpi_shm_end(s);
	return rc;
}

int ddpi_shm_barrier(struct ddpi_shm *s, int64_t deadline)
{
	return ddpi_shm_agree(s, deadline, ddpi_shm_what(s, "barrier"));
}
