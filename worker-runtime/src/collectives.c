/* collectives: the public collective calls. Each checks its arguments, fails
 * fast on a broken context, lets queued gradient buckets finish first (so
 * every rank issues collectives in the same order), runs the backend's
 * operation under the context lock with a deadline, and breaks the context if
 * it fails. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ddp_internal.h"
#include "progress.h"

/* A call of no bytes still takes part (the ranks agree on every call), but
 * its NULL buffers must not reach memcpy, where NULL is undefined even for
 * 0 bytes: they become this (never read or written). */
static char no_bytes[1];

/* The call was refused for its arguments (rc, its error set): the peers
 * wait in it for this rank, which may finalize next (ddp_finalize then tells
 * them why; a rank that ends so often printed the error only to its own log). */
static int refuse(struct ddp_ctx *ctx, int rc)
{
	if (ddpi_ctx_live(ctx)) {
		pthread_mutex_lock(&ctx->lock);
		snprintf(ctx->refused, sizeof(ctx->refused), "%s", ddp_errmsg());
		ctx->refused_at = ddpi_cpu_ncalls(ctx->cpu);
		pthread_mutex_unlock(&ctx->lock);
	}
	return rc;
}

static int begin(struct ddp_ctx *ctx, const char *what, enum ddpi_progress_op op)
{
	int rc;

	if (!ddpi_ctx_live(ctx))
		return ddpi_ctx_refuse(ctx, what);
	if ((rc = ddpi_ctx_check(ctx, what)) < 0 ||
	    (ctx->async && (rc = ddpi_async_wait(ctx->async, what)) < 0))
		return rc;
	pthread_mutex_lock(&ctx->lock);
	ddpi_progress_enter(op);
	return 0;
}

static int end(struct ddp_ctx *ctx, int rc)
{
	ddpi_progress_leave();
	if (rc < 0)
		ddpi_ctx_fail(ctx, rc);
	pthread_mutex_unlock(&ctx->lock);
	return rc;
}

int ddp_all_reduce(struct ddp_ctx *ctx, void *buf, size_t count, enum ddp_dtype dt, enum ddp_op op)
{
	int rc;

	if (!ddpi_dtype_valid(dt) || !ddpi_op_valid(op))
		return refuse(ctx, ddpi_err(-EINVAL, "all_reduce: invalid dtype %d or op %d",
					    (int)dt, (int)op));
	if (count > SIZE_MAX / 8 || (count && !buf))
		return refuse(ctx, ddpi_err(-EINVAL, "all_reduce: bad buffer or count"));
	if ((rc = begin(ctx, "all_reduce", DDPI_PROG_ALL_REDUCE)) < 0)
		return rc;
	if (!count)
		buf = no_bytes;
	rc = ctx->ops->all_reduce(ctx->be, buf, count, dt, op, ddpi_deadline(ctx));
	return end(ctx, rc);
}

int ddp_broadcast(struct ddp_ctx *ctx, void *buf, size_t bytes, int root)
{
	int rc;

	if (bytes && !buf)
		return refuse(ctx, ddpi_err(-EINVAL, "broadcast: buf is NULL"));
	if (ddpi_ctx_live(ctx) && (root < 0 || root >= ctx->env.world))
		return refuse(ctx,
			      ddpi_err(-EINVAL, "broadcast: root %d is not a rank of a world of %d",
				       root, ctx->env.world));
	if ((rc = begin(ctx, "broadcast", DDPI_PROG_BROADCAST)) < 0)
		return rc;
	if (!bytes)
		buf = no_bytes;
	rc = ctx->ops->broadcast(ctx->be, buf, bytes, root, ddpi_deadline(ctx));
	return end(ctx, rc);
}

int ddp_all_gather(struct ddp_ctx *ctx, const void *send, void *recv, size_t bytes)
{
	int rc;

	if (bytes && (!send || !recv))
		return refuse(ctx, ddpi_err(-EINVAL, "all_gather: send or recv is NULL"));
	if (ddpi_ctx_live(ctx) && bytes > SIZE_MAX / (size_t)ctx->env.world)
		return refuse(ctx, ddpi_err(-EINVAL, "all_gather: %zu bytes per rank is too large",
					    bytes));
	/* send may be this rank's part of recv (in place), nowhere else in it:
	 * the peers read it while this rank writes the other parts. */
	if (ddpi_ctx_live(ctx) && bytes) {
		uintptr_t s = (uintptr_t)send, r = (uintptr_t)recv;
		uintptr_t mine = r + (uintptr_t)ctx->env.rank * bytes;
		if (s != mine && s < r + (uintptr_t)ctx->env.world * bytes && r < s + bytes)
			return refuse(ctx, ddpi_err(-EINVAL,
						    "all_gather: send overlaps recv elsewhere than "
						    "at this rank's part (recv + rank * bytes, the "
						    "in-place call)"));
	}
	if ((rc = begin(ctx, "all_gather", DDPI_PROG_ALL_GATHER)) < 0)
		return rc;
	if (!bytes)
		send = recv = no_bytes;
	rc = ctx->ops->all_gather(ctx->be, send, recv, bytes, ddpi_deadline(ctx));
	return end(ctx, rc);
}

int ddp_barrier(struct ddp_ctx *ctx)
{
	int rc;

	if ((rc = begin(ctx, "barrier", DDPI_PROG_BARRIER)) < 0)
		return rc;
	rc = ctx->ops->barrier(ctx->be, ddpi_deadline(ctx));
	return end(ctx, rc);
}
