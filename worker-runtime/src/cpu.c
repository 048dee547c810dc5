/* cpu: the cpu backend, hierarchical. Inside a node the ranks share memory
 * (shm_coll.c); between nodes only the node leaders (local rank 0) talk, over
 * TCP (tcp.c), and then hand the result to their node through shared memory. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shm.h"
#include "tcp.h"

struct ddpi_cpu {
	struct ddp_env env;
	struct ddpi_shm *shm; /* NULL with one local rank */
	struct ddpi_tcp *tcp; /* node leaders of a multi-node job only */
	int *pos;	      /* local rank -> global rank (all_gather positions) */
	void *tmp;	      /* scratch for multi-node all_gather */
	size_t tmp_len;
	float *wide; /* a 16-bit float all_reduce across nodes, in float32 */
	size_t wide_len;
	uint64_t ncalls; /* collective calls so far: the sequence number all compare */
};

int ddpi_cpu_open(const struct ddp_env *env, struct store_client *sc, int64_t deadline,
		  struct ddpi_cpu **out)
{
	struct ddpi_cpu *c = calloc(1, sizeof(*c));
	int rc = -ENOMEM;

	if (!c)
		return ddpi_err(rc, "out of memory for the cpu communicator");
	c->env = *env;
	c->pos = calloc((size_t)env->local_world, sizeof(int));
	if (!c->pos) {
		rc = ddpi_err(rc, "out of memory for the cpu communicator");
		goto fail;
	}
	if (env->local_world > 1) {
		if ((rc = ddpi_shm_open(env, deadline, &c->shm)) < 0)
			goto fail;
		for (int q = 0; q < env->local_world; q++)
			c->pos[q] = ddpi_shm_rank_of(c->shm, q);
	} else {
		c->pos[0] = env->rank;
	}
	if (env->nnodes > 1 && env->local_rank == 0) {
		if (!sc)
			rc = ddpi_err(-EINVAL, "a multi-node job needs the store");
		else
			rc = ddpi_tcp_open(env, c->pos, sc, deadline, &c->tcp);
		if (rc < 0) {
			if (c->shm)
				ddpi_shm_abort(c->shm, rc, ddp_errmsg());
			goto fail;
		}
	}
	if (env->nnodes > 1 && c->shm) {
		/* Nobody starts before the leaders are connected. */
		if ((rc = ddpi_shm_barrier(c->shm, deadline)) < 0)
			goto fail;
	}
	*out = c;
	return 0;
fail:
	ddpi_cpu_close(c);
	return rc;
}

void ddpi_cpu_close(struct ddpi_cpu *c)
{
	if (!c)
		return;
	ddpi_tcp_close(c->tcp);
	ddpi_shm_close(c->shm);
	free(c->pos);
	free(c->tmp);
	free(c->wide);
	free(c);
}

uint64_t ddpi_cpu_ncalls(const struct ddpi_cpu *c)
{
	return c ? c->ncalls : 0;
}

void ddpi_cpu_finish(struct ddpi_cpu *c, const char *refused)
{
	if (!c)
		return;
	ddpi_tcp_finish(c->tcp, c->ncalls, refused);
	ddpi_shm_finish(c->shm, c->ncalls, refused);
}

static int all_reduce_steps(void *be, const struct ddpi_call *call, void *buf, size_t count,
			    enum ddp_dtype dt, enum ddp_op op, int64_t deadline)
{
	struct ddpi_cpu *c = be;
	enum ddp_op partial = op == DDP_AVG ? DDP_SUM : op;
	int rc;

	if (c->env.nnodes == 1)
		return c->shm ? ddpi_shm_all_reduce(c->shm, buf, count, dt, op, c->env.world,
						    deadline)
			      : 0;
	/* Sum inside the node, between the leaders, then hand the result down. */
	if (c->shm && (rc = ddpi_shm_all_reduce(c->shm, buf, count, dt, partial, 1, deadline)) < 0)
		return rc;
	if (c->tcp) {
		if ((rc = ddpi_tcp_all_reduce(c->tcp, call, buf, count, dt, partial, deadline)) < 0)
			return rc;
		if (op == DDP_AVG)
			ddpi_scale_div(dt, buf, count, c->env.world);
	}
	if (c->shm)
		return ddpi_shm_broadcast(c->shm, buf, count * ddp_dtype_size(dt), 0, deadline);
	return 0;
}

/* float16 and bfloat16 sums and averages accumulate in float32
 * (ddp.h). Inside a node they do (shm_coll.c), but a node's partial result
 * stored back in 16 bits, and rounded again at every step of the ring
 * between nodes, lost precision and overflowed: the average of 65504 over 3
 * ranks on 2 nodes was inf. Across nodes every rank works on a float32 copy
 * (the node steps and the ring carry twice the bytes) and rounds once, at
 * the end, the same on every rank. The call checks compare the caller's
 * call (call), not this copy's dtype. */
static int all_reduce_wide(struct ddpi_cpu *c, const struct ddpi_call *call, void *buf,
			   size_t count, enum ddp_dtype dt, enum ddp_op op, int64_t deadline)
{
	int rc;

	/* Kept for the next call, but not four times a call's size: one huge
	 * call must not hold twice its bytes for the context's life. */
	if (count > c->wide_len || count < c->wide_len / 4) {
		float *w = count <= SIZE_MAX / sizeof(float)
				   ? malloc((count ? count : 1) * sizeof(float))
				   : NULL;

		if (w == NULL)
			return ddpi_err(
				-ENOMEM,
				"out of memory for a float32 copy of a %s all_reduce of %zu "
				"elements across nodes",
				ddpi_dtype_name(dt), count);
		free(c->wide);
		c->wide = w;
		c->wide_len = count;
	}
	if (dt == DDP_FLOAT16)
		ddpi_f16_to_f32_n(c->wide, buf, count);
	else
		ddpi_bf16_to_f32_n(c->wide, buf, count);
	rc = all_reduce_steps(c, call, c->wide, count, DDP_FLOAT32, op, deadline);
	if (rc < 0)
		return rc;
	if (dt == DDP_FLOAT16)
		ddpi_f32_to_f16_n(buf, c->wide, count);
	else
		ddpi_f32_to_bf16_n(buf, c->wide, count);
	return 0;
}

static int broadcast_steps(void *be, const struct ddpi_call *call, void *buf, size_t bytes,
			   int root, int64_t deadline)
{
	struct ddpi_cpu *c = be;
	int root_local = c->shm ? ddpi_shm_local_of(c->shm, root) : (root == c->env.rank ? 0 : -1);
	int rc;

	if (c->env.nnodes == 1)
		return c->shm ? ddpi_shm_broadcast(c->shm, buf, bytes, root_local, deadline) : 0;
	/* The call is agreed on first, inside the node (a step that compares every
	 * rank's call) and then between the leaders: the root's node's ranks could
	 * otherwise return before the other nodes were heard (its leader publishes
	 * in the node's step only after the agreement). Then the root's node (so
	 * its leader has the data), the leaders, every other node from its leader. */
	if (c->shm && (rc = ddpi_shm_agree(c->shm, deadline, "broadcast")) < 0)
		return rc;
	if (c->tcp && (rc = ddpi_tcp_agree(c->tcp, call, deadline, "broadcast")) < 0)
		return rc;
	if (root_local >= 0 && c->shm &&
	    (rc = ddpi_shm_broadcast(c->shm, buf, bytes, root_local, deadline)) < 0)
		return rc;
	if (c->tcp && (rc = ddpi_tcp_broadcast(c->tcp, buf, bytes, root, deadline)) < 0)
		return rc;
	if (root_local < 0 && c->shm)
		return ddpi_shm_broadcast(c->shm, buf, bytes, 0, deadline);
	return 0;
}

static int all_gather_steps(void *be, const struct ddpi_call *call, const void *send, void *recv,
			    size_t bytes, int64_t deadline)
{
	struct ddpi_cpu *c = be;
	int rc;

	if (c->env.nnodes == 1) {
		if (c->shm)
			return ddpi_shm_all_gather(c->shm, send, recv, bytes, c->pos, deadline);
		if ((char *)recv != (const char *)send)
			memmove(recv, send, bytes);
		return 0;
	}
	/* The node's pieces land at their ranks' places in recv; the leaders fill
	 * in the other nodes' places; then the whole of recv goes down. */
	if (c->shm)
		rc = ddpi_shm_all_gather(c->shm, send, recv, bytes, c->pos, deadline);
	else
		rc = (memmove((char *)recv + (size_t)c->env.rank * bytes, send, bytes), 0);
	if (rc < 0)
		return rc;
	if (c->tcp && ((rc = ddpi_tcp_agree(c->tcp, call, deadline, "all_gather")) < 0 ||
		       (rc = ddpi_tcp_all_gather(c->tcp, recv, bytes, deadline)) < 0))
		return rc;
	if (c->shm)
		return ddpi_shm_broadcast(c->shm, recv, bytes * (size_t)c->env.world, 0, deadline);
	return 0;
}

static int barrier_steps(void *be, const struct ddpi_call *call, int64_t deadline)
{
	struct ddpi_cpu *c = be;
	int rc;

	if (c->shm && (rc = ddpi_shm_barrier(c->shm, deadline)) < 0)
		return rc;
	if (c->env.nnodes == 1)
		return 0;
	/* The calls' gather is a barrier itself: every leader's call reached every
	 * leader, so every node has entered it. */
	if (c->tcp && (rc = ddpi_tcp_agree(c->tcp, call, deadline, "barrier")) < 0)
		return rc;
	return c->shm ? ddpi_shm_barrier(c->shm, deadline) : 0;
}

/* Any failure breaks the context for good (collectives.c), and the rank
 * tells its peers at once, and why, even if this process goes on living (a
 * program that catches the error, a slow exit): the node's ranks through the
 * shared segment (a no-op where a step aborted it already, or a peer did),
 * a leader the other nodes by shutting its ring down. A failure before any
 * step (no memory for all_reduce_wide's copy) left the peers waiting for
 * this rank until their deadline, or until it finalized. */
static int broken(void *be, int rc)
{
	struct ddpi_cpu *c = be;

	if (rc < 0 && c->shm)
		ddpi_shm_abort(c->shm, rc, ddp_errmsg());
	if (rc < 0 && c->tcp)
		ddpi_tcp_abort(c->tcp, rc, ddp_errmsg(), c->ncalls - 1); /* the call that failed */
	return rc;
}

/* This rank's next call, as every rank compares it (coll_call.h); the node's
 * steps carry it so that the shared segment's checks see the whole call. */
static struct ddpi_call call_begin(struct ddpi_cpu *c, enum ddpi_coll_kind kind, size_t count,
				   enum ddp_dtype dt, enum ddp_op op, int root)
{
	struct ddpi_call call = {.kind = (uint32_t)kind,
				 .dt = (uint32_t)dt,
				 .op = (uint32_t)op,
				 .root = root,
				 .count = count,
				 .seq = c->ncalls++};
	return call;
}

/* A local rank gave up on a call (a timeout, say) after the others had
 * published their part of it: a rank late to it fails at once with that
 * reason, rather than finish it on what the others left (success here, a
 * failure there), or start another. */
static int gave_up(struct ddpi_cpu *c, const char *what)
{
	return c->shm && ddpi_shm_aborted(c->shm) ? ddpi_shm_abort_error(c->shm, what) : 0;
}

static int call_end(struct ddpi_cpu *c, int rc)
{
	if (c->shm)
		c->shm->outer = NULL;
	return broken(c, rc);
}

static int cpu_all_reduce(void *be, void *buf, size_t count, enum ddp_dtype dt, enum ddp_op op,
			  int64_t deadline)
{
	struct ddpi_cpu *c = be;
	struct ddpi_call call = call_begin(c, DDPI_ALL_REDUCE, count, dt, op, -1);
	int rc = gave_up(c, "all_reduce");

	if (c->shm)
		c->shm->outer = &call;
	if (rc == 0 && c->env.nnodes > 1 && (dt == DDP_FLOAT16 || dt == DDP_BFLOAT16) &&
	    op != DDP_MIN && op != DDP_MAX) /* (these two are exact in 16 bits) */
		return call_end(c, all_reduce_wide(c, &call, buf, count, dt, op, deadline));
	return call_end(c, rc < 0 ? rc : all_reduce_steps(be, &call, buf, count, dt, op, deadline));
}

static int cpu_broadcast(void *be, void *buf, size_t bytes, int root, int64_t deadline)
{
	struct ddpi_cpu *c = be;
	struct ddpi_call call = call_begin(c, DDPI_BROADCAST, bytes, 0, 0, root);
	int rc = gave_up(c, "broadcast");

	if (c->shm)
		c->shm->outer = &call;
	return call_end(c, rc < 0 ? rc : broadcast_steps(be, &call, buf, bytes, root, deadline));
}

static int cpu_all_gather(void *be, const void *send, void *recv, size_t bytes, int64_t deadline)
{
	struct ddpi_cpu *c = be;
	struct ddpi_call call = call_begin(c, DDPI_ALL_GATHER, bytes, 0, 0, -1);
	int rc = gave_up(c, "all_gather");

	if (c->shm)
		c->shm->outer = &call;
	return call_end(c, rc < 0 ? rc : all_gather_steps(be, &call, send, recv, bytes, deadline));
}

static int cpu_barrier(void *be, int64_t deadline)
{
	struct ddpi_cpu *c = be;
	struct ddpi_call call = call_begin(c, DDPI_BARRIER, 0, 0, 0, -1);
	int rc = gave_up(c, "barrier");

	if (c->shm)
		c->shm->outer = &call;
	return call_end(c, rc < 0 ? rc : barrier_steps(be, &call, deadline));
}

static int cpu_mem_alloc(void *be, size_t bytes, void **p)
{
	struct ddpi_cpu *c = be;
	void *m = NULL;

	/* The reducer's buckets: shared with the node's other ranks, so that
	 * their all_reduce reads the peers' buckets directly (shm_mem.c);
	 * where that cannot be, private. Page-aligned either way, or cache-line
	 * aligned, so the reduction loops vectorize cleanly. */
	if (c->shm && ddpi_shm_mem_alloc(c->shm, bytes, p) == 0)
		return 0;
	if (posix_memalign(&m, 64, bytes ? bytes : 64))
		return -ENOMEM;
	*p = m;
	return 0;
}

static void cpu_mem_free(void *be, void *p)
{
	struct ddpi_cpu *c = be;

	if (!c->shm || ddpi_shm_mem_free(c->shm, p) != 0)
		free(p);
}

static int cpu_mem_zero(void *be, void *p, size_t bytes)
{
	memset(p, 0, bytes);
	return 0;
}

static void cpu_destroy(void *be)
{
	ddpi_cpu_close(be);
}

const struct ddpi_backend_ops ddpi_cpu_ops = {
	.name = "cpu",
	.all_reduce = cpu_all_reduce,
	.broadcast = cpu_broadcast,
	.all_gather = cpu_all_gather,
	.barrier = cpu_barrier,
	.mem_alloc = cpu_mem_alloc,
	.mem_free = cpu_mem_free,
	.mem_zero = cpu_mem_zero,
	.destroy = cpu_destroy,
};
