/* shm_coll: collectives among the ranks of one node through the shared segment.
 *
 * all_reduce, large messages (DeepSpeed's shm all-reduce, pipelined): the
 * buffer goes through in chunks that fit a staging slot. For each chunk every
 * rank copies in the parts the others reduce, reduces its own 1/N slice from
 * every rank's copy (its own part straight from its buffer) into both its
 * buffer and its slot, then copies the other slices out of their owners'
 * slots. Two slots per rank let chunk k+1 be copied in while peers still read
 * chunk k. Slots are small enough to stay in cache, so memory traffic stays
 * close to the bound: each input read once, each output written once.
 *
 * all_reduce, small messages: copy in, one wait, every rank reduces everything
 * (in rank order, so all get the same bits). One synchronization instead of
 * three is what makes 4 KiB fast. */
#include <string.h>

#include "shm.h"

#define SMALL_BYTES (32 * 1024)
#define SLICE_ALIGN 64 /* bytes: slices start on cache lines */

static void slice_bounds(size_t m, int n, int q, size_t es, size_t *lo, size_t *hi)
{
	size_t align = SLICE_ALIGN / es;
	size_t per = (m + (size_t)n - 1) / (size_t)n;

	per = (per + align - 1) / align * align;
	*lo = (size_t)q * per < m ? (size_t)q * per : m;
	*hi = (size_t)(q + 1) * per < m ? (size_t)(q + 1) * per : m;
}

static int check_all(struct ddpi_shm *s, const char *what)
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

	if ((rc = ddpi_shm_acquire_slot(s, deadline, "all_reduce", &slot)) < 0)
		return rc;
	memcpy(ddpi_shm_slot(s, s->me, slot), buf, bytes);
	in = ddpi_shm_publish(s);
	if ((rc = ddpi_shm_wait_all(s, in, deadline, "all_reduce")) < 0 ||
	    (rc = check_all(s, "all_reduce")) < 0)
		return rc;
	for (int q = 0; q < s->lws; q++)
		src[q] = q == s->me ? buf : ddpi_shm_slot(s, q, slot);
	ddpi_reduce(dt, op, buf, src, s->lws, count, avg_div);
	ddpi_shm_release_slot(s, slot);
	return 0;
}

static int all_reduce_chunk(struct ddpi_shm *s, char *buf, size_t m, enum ddp_dtype dt,
			    enum ddp_op op, int avg_div, int first, int64_t deadline)
{
	const void *src[DDPI_SHM_MAX_LOCAL];
	size_t es = ddp_dtype_size(dt), lo, hi;
	uint32_t copied, reduced;
	int slot, rc, me = s->me;
	char *mine;

	if ((rc = ddpi_shm_acquire_slot(s, deadline, "all_reduce", &slot)) < 0)
		return rc;
	mine = ddpi_shm_slot(s, me, slot);
	/* Copy in everything except my own slice, which only I read. */
	slice_bounds(m, s->lws, me, es, &lo, &hi);
	memcpy(mine, buf, lo * es);
	memcpy(mine + hi * es, buf + hi * es, (m - hi) * es);
	copied = ddpi_shm_publish(s);
	if ((rc = ddpi_shm_wait_all(s, copied, deadline, "all_reduce")) < 0 ||
	    (first && (rc = check_all(s, "all_reduce")) < 0))
		return rc;

	for (int q = 0; q < s->lws; q++)
		src[q] = (q == me ? buf : ddpi_shm_slot(s, q, slot)) + lo * es;
	ddpi_reduce2(dt, op, mine + lo * es, buf + lo * es, src, s->lws, hi - lo, avg_div);
	reduced = ddpi_shm_publish(s);

	for (int k = 1; k < s->lws; k++) {
		int q = (me + k) % s->lws; /* spread the readers over the owners */
		size_t qlo, qhi;
		slice_bounds(m, s->lws, q, es, &qlo, &qhi);
		if ((rc = ddpi_shm_wait(s, q, reduced, deadline, "all_reduce")) < 0)
			return rc;
		memcpy(buf + qlo * es, ddpi_shm_slot(s, q, slot) + qlo * es, (qhi - qlo) * es);
	}
	ddpi_shm_release_slot(s, slot);
	return 0;
}

int ddpi_shm_all_reduce(struct ddpi_shm *s, void *buf, size_t count, enum ddp_dtype dt,
			enum ddp_op op, int avg_div, int64_t deadline)
{
	size_t es = ddp_dtype_size(dt), bytes = count * es;
	size_t chunk = s->slot_bytes / es;
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
		for (size_t off = 0; off < count && rc == 0; off += chunk) {
			size_t m = count - off < chunk ? count - off : chunk;
			rc = all_reduce_chunk(s, (char *)buf + off * es, m, dt, op, avg_div,
					      off == 0, deadline);
		}
	}
	ddpi_shm_end(s);
	return rc;
}

/* Every rank has published for this collective: compare with each peer. */
static int sync_all(struct ddpi_shm *s, int64_t deadline, const char *what)
{
	int rc = ddpi_shm_wait_all(s, ddpi_shm_publish(s), deadline, what);
	return rc < 0 ? rc : check_all(s, what);
}

int ddpi_shm_broadcast(struct ddpi_shm *s, void *buf, size_t bytes, int root, int64_t deadline)
{
	struct ddpi_coll_desc d = {.kind = DDPI_BROADCAST, .root = root, .count = bytes};
	int rc = 0;

	if (s->lws == 1)
		return 0;
	ddpi_shm_begin(s, &d);
	if (bytes == 0)
		rc = sync_all(s, deadline, "broadcast");
	for (size_t off = 0; off < bytes && rc == 0; off += s->slot_bytes) {
		size_t m = bytes - off < s->slot_bytes ? bytes - off : s->slot_bytes;
		uint32_t in;
		int slot;

		if ((rc = ddpi_shm_acquire_slot(s, deadline, "broadcast", &slot)) < 0)
			break;
		if (s->me == root)
			memcpy(ddpi_shm_slot(s, root, slot), (char *)buf + off, m);
		in = ddpi_shm_publish(s);
		/* The first chunk waits for every rank, root included, and compares
		 * with each: a rank that wrongly believes it is the root (and so would
		 * wait for nobody) is caught on every rank, not left with its data. */
		if (off == 0 && ((rc = ddpi_shm_wait_all(s, in, deadline, "broadcast")) < 0 ||
				 (rc = check_all(s, "broadcast")) < 0))
			break;
		if (s->me != root) {
			if ((rc = ddpi_shm_wait(s, root, in, deadline, "broadcast")) < 0)
				break;
			memcpy((char *)buf + off, ddpi_shm_slot(s, root, slot), m);
		}
		ddpi_shm_release_slot(s, slot);
	}
	ddpi_shm_end(s);
	return rc;
}

int ddpi_shm_all_gather(struct ddpi_shm *s, const void *send, void *recv, size_t bytes,
			const int *pos, int64_t deadline)
{
	struct ddpi_coll_desc d = {.kind = DDPI_ALL_GATHER, .root = -1, .count = bytes};
	char *my_dst = (char *)recv + (size_t)pos[s->me] * bytes;
	int rc = 0;

	if (s->lws == 1) {
		if (bytes && my_dst != send)
			memmove(my_dst, send, bytes);
		return 0;
	}
	ddpi_shm_begin(s, &d);
	if (bytes == 0)
		rc = sync_all(s, deadline, "all_gather");
	for (size_t off = 0; off < bytes && rc == 0; off += s->slot_bytes) {
		size_t m = bytes - off < s->slot_bytes ? bytes - off : s->slot_bytes;
		uint32_t in;
		int slot;

		if ((rc = ddpi_shm_acquire_slot(s, deadline, "all_gather", &slot)) < 0)
			break;
		memcpy(ddpi_shm_slot(s, s->me, slot), (const char *)send + off, m);
		in = ddpi_shm_publish(s);
		for (int k = 1; k < s->lws && rc == 0; k++) {
			int q = (s->me + k) % s->lws;
			if ((rc = ddpi_shm_wait(s, q, in, deadline, "all_gather")) < 0 ||
			    (off == 0 && (rc = ddpi_shm_check(s, q, "all_gather")) < 0))
				break;
			memcpy((char *)recv + (size_t)pos[q] * bytes + off,
			       ddpi_shm_slot(s, q, slot), m);
		}
		if (rc == 0)
			ddpi_shm_release_slot(s, slot);
	}
	/* send may alias my slot in recv: copy it last. */
	if (rc == 0 && my_dst != send)
		memmove(my_dst, send, bytes);
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
	rc = sync_all(s, deadline, what);
	ddpi_shm_end(s);
	return rc;
}

int ddpi_shm_barrier(struct ddpi_shm *s, int64_t deadline)
{
	return ddpi_shm_agree(s, deadline, "barrier");
}
