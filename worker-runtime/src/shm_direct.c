/* shm_direct: the collectives whose buffers are, on every rank of the node,
 * in memory the ranks share (shm_mem.c: the reducer's buckets, ddp_alloc):
 * each rank reads its peers' buffers where they are, with no copy into the
 * staging slots and none through the kernel. The agreement on it
 * (ddpi_shm_zc_begin, or ddpi_shm_zc_decide in a staged broadcast's first
 * step) was the start: every rank is in the call, its buffer ready. The
 * last step of each keeps every rank in until no peer reads its buffer any
 * more: a buffer changes only once its owner's call has returned. */
#include <string.h>

#include "shm.h"

/* A slice of every rank's buffer, summed into mine through a block in L1
 * and copied out of it: the slice's lines were last read by the peers, and
 * the sum's stores in place had to take each back from their caches first,
 * where memcpy's string copy writes whole lines. A Firecracker guest on AMD
 * EPYC (Zen 5, 2026-12-06), 2 ranks, float32, medians of 5 interleaved runs:
 * 256 KiB 27.3 us against 32.8 in place, 1 MiB 84.5 against 123.6, 4 MiB 298
 * against 436, 16 MiB 1.44 ms against 1.79, 64 MiB a tie. */
#define BLOCK_BYTES 8192 /* above glibc's string-copy threshold (2 KiB) */

static void reduce_slice(char *const *peer, int n, int me, size_t from, size_t m, enum ddp_dtype dt,
			 enum ddp_op op, int avg_div)
{
	_Alignas(64) char block[BLOCK_BYTES];
	const void *src[DDPI_SHM_MAX_LOCAL];
	size_t es = ddp_dtype_size(dt), per = BLOCK_BYTES / es;

	for (size_t at = from; at < from + m; at += per) {
		size_t k = from + m - at < per ? from + m - at : per;
		for (int q = 0; q < n; q++)
			src[q] = peer[q] + at * es;
		ddpi_reduce(dt, op, block, src, n, k, avg_div);
		memcpy(peer[me] + at * es, block, k * es);
	}
}

/* all_reduce: my slice of
 * each chunk straight from every rank's buffer into mine, then the others'
 * slices out of their owners' buffers. Chunk j's slice q is read by its
 * owner q only, and then overwritten by the others only once q has said it
 * reduced chunk j (its counter: base + j + 1); nobody leaves before every
 * rank has copied out (the last step), so a buffer changes only once its
 * owner's call has returned. No copy in, but each rank reads the others'
 * buffers: since the staged sums stopped storing into lines the peers had
 * read (shm_coll.c), staging private copies of the same memory was faster
 * at 2 ranks up to 16 MiB (AMD EPYC guest, 2026-12-06, medians of 5
 * interleaved runs: 256 KiB 19.5 us against 30.1 direct, 1 MiB 75 against
 * 89, 16 MiB 1.48 ms against 1.77), slower at 64 MiB (8.8 against 7.0); at
 * 4 ranks on 2 cores the direct path led from 1 MiB (16 MiB 4.4 against
 * 5.7, 64 MiB 17 against 25) and tied at 256 KiB. It stays on from 256 KiB
 * (DDPI_ZC_REDUCE_MIN_BYTES): a bucket's size among more ranks than 2 is
 * where it pays. zc_begin's second step was the start (every rank in). */
int ddpi_shm_all_reduce_direct(struct ddpi_shm *s, char *const *peer, size_t count,
			       enum ddp_dtype dt, enum ddp_op op, int avg_div, int64_t deadline)
{
	size_t es = ddp_dtype_size(dt), per = s->slot_bytes / es;
	size_t nchunks = (count + per - 1) / per;
	uint32_t base = s->seq;
	int rc;

	for (size_t j = 0; j <= nchunks; j++) {
		if (j < nchunks) {
			size_t off = j * per, m = count - off < per ? count - off : per, lo, hi;
			ddpi_shm_slice_bounds(m, s->lws, s->me, es, &lo, &hi);
			reduce_slice(peer, s->lws, s->me, off + lo, hi - lo, dt, op, avg_div);
			ddpi_shm_publish(s);
		}
		if (j == 0)
			continue;
		/* The chunk before, whose slices its owners have had a step for. */
		size_t off = (j - 1) * per, m = count - off < per ? count - off : per;
		for (int k = 1; k < s->lws; k++) {
			int q = (s->me + k) % s->lws; /* spread the readers over the owners */
			size_t lo, hi;
			if ((rc = ddpi_shm_wait(s, q, base + (uint32_t)j, deadline,
						ddpi_shm_what(s, "all_reduce"))) < 0)
				return rc;
			ddpi_shm_slice_bounds(m, s->lws, q, es, &lo, &hi);
			memcpy(peer[s->me] + (off + lo) * es, peer[q] + (off + lo) * es,
			       (hi - lo) * es);
		}
	}
	return ddpi_shm_wait_all(s, ddpi_shm_publish(s), deadline, ddpi_shm_what(s, "all_reduce"));
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
		if (dst != peer[q])
			ddpi_copy(dst, peer[q], bytes, stream);
	}
	return ddpi_shm_wait_all(s, ddpi_shm_publish(s), deadline, ddpi_shm_what(s, "all_gather"));
}

/* broadcast: each reader copies the root's buffer, but for one slice that
 * the root writes into it meanwhile (the reader k ranks after it gets slice
 * k of n), so that the root's core copies too: every rank copies (n - 1) / n
 * of the message (as the single copy does, shm_cma.c). */
int ddpi_shm_broadcast_direct(struct ddpi_shm *s, char *const *peer, size_t bytes, int root,
			      int stream, int64_t deadline)
{
	int n = s->lws;
	size_t lo, hi;

	if (s->me == root) {
		for (int k = 1; k < n; k++) {
			ddpi_shm_bcast_slice(bytes, n, k, &lo, &hi);
			ddpi_copy(peer[(root + k) % n] + lo, peer[root] + lo, hi - lo, stream);
		}
	} else {
		ddpi_shm_bcast_slice(bytes, n, (s->me - root + n) % n, &lo, &hi);
		ddpi_copy(peer[s->me], peer[root], lo, stream);
		ddpi_copy(peer[s->me] + hi, peer[root] + hi, bytes - hi, stream);
	}
	return ddpi_shm_wait_all(s, ddpi_shm_publish(s), deadline, ddpi_shm_what(s, "broadcast"));
}
