/* reducer: DDP gradient buckets (PyTorch's Reducer, without autograd hooks:
 * the program says when a gradient is ready).
 *
 * Gradients live inside bucket buffers (gradient_as_bucket_view). A bucket is
 * launched once all its gradients are marked and every earlier bucket has been
 * launched, so every rank issues the same collectives in the same order even
 * when gradients become ready in a different order. Launching means an
 * asynchronous all-reduce with AVG: the cpu backend's communication thread or
 * the nccl stream. finish() waits for all of them and resets the iteration. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_internal.h"
#include "progress.h"

#define DEFAULT_FIRST_BUCKET (1u << 20)
#define DEFAULT_BUCKET	     (25u << 20)
#define BROADCAST_CHUNK	     ((size_t)250 << 20) /* torch's _DEFAULT_BROADCAST chunk */

struct bucket {
	void *buf;
	size_t bytes, count;
	enum ddp_dtype dt;
	size_t nparams, pending;
};

struct ddp_reducer {
	struct ddp_ctx *ctx;	  /* NULL once ddp_finalize detached it */
	struct ddp_reducer *next; /* the context's reducers */
	size_t nparams, nbuckets, next_bucket;
	size_t marked;		  /* parameters marked ready this iteration */
	struct ddp_param *params; /* names copied */
	size_t *bucket_of;
	void **grad;
	unsigned char *ready;
	struct bucket *b;
	int sync;
};

void ddp_reducer_options_init(struct ddp_reducer_options *o)
{
	memset(o, 0, sizeof(*o));
	o->first_bucket_bytes = DEFAULT_FIRST_BUCKET;
	o->bucket_bytes = DEFAULT_BUCKET;
	o->broadcast_params = 1;
}

static const char *pname(const struct ddp_reducer *r, size_t i, char *buf, size_t len)
{
	if (r->params[i].name)
		return r->params[i].name;
	snprintf(buf, len, "#%zu", i);
	return buf;
}

static uint64_t fnv(uint64_t h, uint64_t v)
{
	return (h ^ v) * 1099511628211ull;
}

/* Every rank must register the same parameters and make the same buckets of
 * them (bucket caps that differ would otherwise surface only as a mismatched
 * bucket all_reduce in the first finish): compare fingerprints. */
static int verify_same_params(struct ddp_ctx *ctx, const struct ddp_param *p, size_t n,
			      const struct ddpi_bucket_plan *plan)
{
	int w = ddp_world_size(ctx), rc;
	uint64_t mine[4] = {n, 1469598103934665603ull, plan->nbuckets, 1469598103934665603ull},
		 *all;

	for (size_t i = 0; i < n; i++)
		mine[1] = fnv(fnv(mine[1], p[i].count), (uint64_t)p[i].dtype);
	for (size_t b = 0; b < plan->nbuckets; b++)
		mine[3] = fnv(fnv(mine[3], plan->bytes[b]), plan->start[b]);
	if (w == 1)
		return 0;
	all = malloc(sizeof(mine) * (size_t)w);
	if (!all)
		return ddpi_err(-ENOMEM, "reducer: out of memory");
	rc = ddp_all_gather(ctx, mine, all, sizeof(mine));
	for (int r = 0; rc == 0 && r < w; r++) {
		const uint64_t *its = all + 4 * r;
		if (its[0] != mine[0] || its[1] != mine[1])
			rc = ddpi_err(-EINVAL,
				      "reducer: rank %d registered different parameters (%llu "
				      "parameters) than rank %d (%llu): counts or dtypes differ",
				      r, (unsigned long long)its[0], ddp_rank(ctx),
				      (unsigned long long)mine[0]);
		else if (its[2] != mine[2] || its[3] != mine[3])
			rc = ddpi_err(-EINVAL,
				      "reducer: rank %d made different buckets (%llu) than rank %d "
				      "(%llu) of the same parameters: every rank must give the "
				      "same first_bucket_bytes and bucket_bytes",
				      r, (unsigned long long)its[2], ddp_rank(ctx),
				      (unsigned long long)mine[2]);
	}
	free(all);
	return rc;
}

/* Rank 0's values everywhere. cpu: packed into large broadcasts; nccl: the
 * parameters are device memory, one broadcast each. */
static int broadcast_params(struct ddp_ctx *ctx, const struct ddp_param *p, size_t n)
{
	char *pack = NULL;
	size_t i = 0;
	int rc = 0;

	if (ddp_world_size(ctx) == 1)
		return 0;
	if (ctx->backend != DDP_BACKEND_CPU) {
		for (; i < n && rc == 0; i++)
			rc = ddp_broadcast(ctx, p[i].data, p[i].count * ddp_dtype_size(p[i].dtype),
					   0);
		return rc;
	}
	while (i < n && rc == 0) {
		size_t first = i, len = 0, off = 0;
		while (i < n) {
			size_t b = p[i].count * ddp_dtype_size(p[i].dtype);
			if (len && len + b > BROADCAST_CHUNK)
				break;
			len += b;
			i++;
		}
		char *np = realloc(pack, len);
		if (!np) {
			rc = ddpi_err(-ENOMEM, "out of memory for %zu bytes", len);
			break;
		}
		pack = np;
		for (size_t k = first; k < i; k++) {
			size_t b = p[k].count * ddp_dtype_size(p[k].dtype);
			memcpy(pack + off, p[k].data, b);
			off += b;
		}
		if ((rc = ddp_broadcast(ctx, pack, len, 0)) < 0)
			break;
		off = 0;
		for (size_t k = first; k < i; k++) {
			size_t b = p[k].count * ddp_dtype_size(p[k].dtype);
			memcpy(p[k].data, pack + off, b);
			off += b;
		}
	}
	free(pack);
	return rc;
}

int ddp_reducer_create(struct ddp_ctx *ctx, const struct ddp_param *params, size_t nparams,
		       const struct ddp_reducer_options *o, struct ddp_reducer **out)
{
	struct ddp_reducer_options defaults;
	struct ddpi_bucket_plan plan = {0};
	struct ddp_reducer *r;
	int rc;

	if (ctx && !ddpi_ctx_live(ctx))
		return ddpi_ctx_refuse(ctx, "reducer");
	if (!ctx || !out || (!params && nparams))
		return ddpi_err(-EINVAL,
				"reducer: bad arguments (or no context: NULL or finalized)");
	if (!o) {
		ddp_reducer_options_init(&defaults);
		o = &defaults;
	}
	for (size_t i = 0; i < nparams; i++)
		if (!params[i].data || !params[i].count || !ddpi_dtype_valid(params[i].dtype) ||
		    params[i].count > SIZE_MAX / 16)
			return ddpi_err(-EINVAL,
					"reducer: parameter %zu (%s) has no data, no "
					"elements or an invalid dtype",
					i, params[i].name ? params[i].name : "unnamed");
	if ((rc = ddpi_bucket_plan(params, nparams,
				   o->first_bucket_bytes ? o->first_bucket_bytes
							 : DEFAULT_FIRST_BUCKET,
				   o->bucket_bytes ? o->bucket_bytes : DEFAULT_BUCKET, &plan)) < 0)
		return rc;
	if ((rc = verify_same_params(ctx, params, nparams, &plan)) < 0) {
		ddpi_bucket_plan_free(&plan);
		return rc;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		goto nomem;
	r->ctx = ctx;
	r->sync = 1;
	r->nparams = nparams;
	r->nbuckets = plan.nbuckets;
	r->params = calloc(nparams, sizeof(*r->params));
	r->bucket_of = calloc(nparams, sizeof(size_t));
	r->grad = calloc(nparams, sizeof(void *));
	r->ready = calloc(nparams, 1);
	r->b = calloc(plan.nbuckets, sizeof(*r->b));
	if (!r->params || !r->bucket_of || !r->grad || !r->ready || !r->b)
		goto nomem;
	for (size_t i = 0; i < nparams; i++) {
		r->params[i] = params[i];
		r->params[i].name = params[i].name ? strdup(params[i].name) : NULL;
		if (params[i].name && !r->params[i].name)
			goto nomem;
	}
	for (size_t b = 0; b < plan.nbuckets; b++) {
		struct bucket *bk = &r->b[b];
		size_t off = 0;
		bk->bytes = plan.bytes[b];
		bk->nparams = plan.start[b + 1] - plan.start[b];
		bk->dt = params[plan.order[plan.start[b]]].dtype;
		bk->count = bk->bytes / ddp_dtype_size(bk->dt);
		if ((rc = ctx->ops->mem_alloc(ctx->be, bk->bytes, &bk->buf)) < 0) {
			rc = ddpi_err(rc, "reducer: cannot allocate a bucket of %zu bytes",
				      bk->bytes);
			goto fail;
		}
		if ((rc = ctx->ops->mem_zero(ctx->be, bk->buf, bk->bytes)) < 0)
			goto fail;
		for (size_t k = plan.start[b]; k < plan.start[b + 1]; k++) {
			size_t i = plan.order[k];
			r->bucket_of[i] = b;
			r->grad[i] = (char *)bk->buf + off;
			off += params[i].count * ddp_dtype_size(params[i].dtype);
		}
		bk->pending = bk->nparams;
	}
	ddpi_bucket_plan_free(&plan);
	if (ddp_world_size(ctx) > 1 && !ctx->ops->all_reduce_async && !ctx->async &&
	    (rc = ddpi_async_start(ctx, ctx->env.async, &ctx->async)) < 0)
		goto fail;
	if (o->broadcast_params && (rc = broadcast_params(ctx, params, nparams)) < 0) {
		rc = ddpi_err_prefix(rc, "reducer: initial broadcast of the parameters");
		goto fail;
	}
	pthread_mutex_lock(&ctx->mem_lock);
	r->next = ctx->reducers;
	ctx->reducers = r;
	pthread_mutex_unlock(&ctx->mem_lock);
	*out = r;
	return 0;
nomem:
	rc = ddpi_err(-ENOMEM, "reducer: out of memory");
fail:
	ddpi_bucket_plan_free(&plan);
	ddp_reducer_destroy(r);
	return rc;
}

/* On a stream backend (nccl) each bucket enters its collective at launch
 * and all are in flight until this wait: the rank stays inside the last one
 * in the progress slot until they are done, and a failure breaks the
 * context, as the cpu backend's communication thread does (async.c). A
 * broken context has nothing in flight on a stream (its communicator was
 * aborted), while the communication thread is drained either way. Then 0,
 * or the context's failure (ddpi_ctx_check(ctx, what)). what NULL: the
 * caller returns nothing, so the failure is left for the next call. */
static int wait_launched(struct ddp_reducer *r, const char *what)
{
	struct ddp_ctx *ctx = r->ctx;
	int rc = 0;

	if (ctx->ops->wait_async && !ctx->broken) {
		pthread_mutex_lock(&ctx->lock);
		rc = ctx->ops->wait_async(ctx->be, ddpi_deadline(ctx));
		if (rc < 0 && what)
			ddpi_ctx_fail(ctx, ddpi_err_prefix(rc, "gradient bucket all_reduce"));
		else if (rc < 0)
			ddpi_ctx_fail_later(ctx, ddpi_err_prefix(rc, "gradient bucket all_reduce"));
		ddpi_progress_leave();
		pthread_mutex_unlock(&ctx->lock);
	} else if (ctx->async) {
		rc = ddpi_async_wait(ctx->async, what);
	}
	return rc < 0 || !what ? rc : ddpi_ctx_check(ctx, what);
}

/* Waits for r's buckets and gives their memory back; the first error. */
static int release_buckets(struct ddp_reducer *r, const char *what)
{
	int rc = wait_launched(r, what);

	for (size_t b = 0; r->b && b < r->nbuckets; b++)
		if (r->b[b].buf) {
			if (r->ctx->async)
				ddpi_async_free(r->ctx->async, r->b[b].buf);
			else
				r->ctx->ops->mem_free(r->ctx->be, r->b[b].buf);
			r->b[b].buf = NULL;
		}
	for (size_t i = 0; r->grad && i < r->nparams; i++)
		r->grad[i] = NULL;
	return rc;
}

int ddpi_reducers_detach(struct ddp_ctx *ctx)
{
	int rc = 0, rc2;

	for (;;) {
		pthread_mutex_lock(&ctx->mem_lock);
		struct ddp_reducer *r = ctx->reducers;
		if (r)
			ctx->reducers = r->next;
		pthread_mutex_unlock(&ctx->mem_lock);
		if (!r)
			return rc;
		if ((rc2 = release_buckets(r, "ddp_finalize")) < 0 && rc == 0)
			rc = rc2;
		r->ctx = NULL;
		r->next = NULL;
	}
}

/* A reducer outlives its context only to be destroyed. In a forked child
 * its buckets are the parent's (shared with the node) and no communication
 * thread runs: it is refused as its context is. */
static int detached(const struct ddp_reducer *r)
{
	if (!r)
		return ddpi_err(-EINVAL, "reducer: no reducer (NULL)");
	if (!r->ctx)
		return ddpi_err(-EINVAL, "reducer: its context was finalized (ddp_reducer_destroy "
					 "is all that is left to call)");
	if (!ddpi_ctx_live(r->ctx))
		return ddpi_ctx_refuse(r->ctx, "reducer");
	return 0;
}

void ddp_reducer_destroy(struct ddp_reducer *r)
{
	if (!r)
		return;
	/* A forked child frees its own copy only: the buckets, the context's
	 * list and its lock are the parent's. */
	if (r->ctx && ddpi_ctx_live(r->ctx)) {
		struct ddp_reducer **pp = &r->ctx->reducers;
		pthread_mutex_lock(&r->ctx->mem_lock);
		while (*pp && *pp != r)
			pp = &(*pp)->next;
		if (*pp)
			*pp = r->next;
		pthread_mutex_unlock(&r->ctx->mem_lock);
		release_buckets(r, NULL); /* returns nothing: the next call reports */
	}
	for (size_t i = 0; r->params && i < r->nparams; i++)
		free((char *)r->params[i].name);
	free(r->params);
	free(r->bucket_of);
	free(r->grad);
	free(r->ready);
	free(r->b);
	free(r);
}

void *ddp_reducer_grad(struct ddp_reducer *r, size_t i)
{
	if (detached(r) < 0)
		return NULL;
	if (i >= r->nparams) {
		ddpi_err(-EINVAL, "ddp_reducer_grad: parameter %zu of %zu", i, r->nparams);
		return NULL;
	}
	return r->grad[i];
}

int ddp_reducer_zero_grad(struct ddp_reducer *r)
{
	int rc;

	if ((rc = detached(r)) < 0)
		return rc;
	/* Never zero a bucket the communication thread may still be reading. */
	if ((rc = wait_launched(r, "reducer")) < 0)
		return rc;
	for (size_t b = 0; b < r->nbuckets; b++)
		if ((rc = r->ctx->ops->mem_zero(r->ctx->be, r->b[b].buf, r->b[b].bytes)) < 0)
			return rc;
	return 0;
}

static int launch(struct ddp_reducer *r, struct bucket *bk)
{
	struct ddp_ctx *ctx = r->ctx;
	int rc;

	/* A bucket of an earlier iteration may have failed since. */
	if ((rc = ddpi_ctx_check(ctx, "reducer")) < 0)
		return rc;
	if (ctx->ops->all_reduce_async) {
		pthread_mutex_lock(&ctx->lock);
		ddpi_progress_enter(DDPI_PROG_BUCKET);
		rc = ctx->ops->all_reduce_async(ctx->be, bk->buf, bk->count, bk->dt, DDP_AVG);
		if (rc < 0) { /* nothing runs: a hang report must not find it inside */
			ddpi_ctx_fail(ctx, ddpi_err_prefix(rc, "gradient bucket all_reduce"));
			ddpi_progress_leave();
		}
		pthread_mutex_unlock(&ctx->lock);
		return rc;
	}
	if (ddp_world_size(ctx) == 1)
		return 0; /* the average over one rank */
	if ((rc = ddpi_async_submit(ctx->async, bk->buf, bk->count, bk->dt, DDP_AVG)) < 0) {
		/* The peers wait for this bucket in vain: the context is broken. */
		pthread_mutex_lock(&ctx->lock);
		ddpi_ctx_fail(ctx, ddpi_err_prefix(rc, "reducer"));
		pthread_mutex_unlock(&ctx->lock);
	}
	return rc;
}

int ddp_reducer_mark_ready(struct ddp_reducer *r, size_t i)
{
	struct bucket *bk;
	int rc;

	if ((rc = detached(r)) < 0 || (rc = ddpi_ctx_check(r->ctx, "reducer")) < 0)
		return rc;
	if (i >= r->nparams)
		return ddpi_err(-EINVAL, "reducer: parameter index %zu out of range", i);
	if (r->ready[i]) {
		char nb[32];
		return ddpi_err(-EALREADY,
				"reducer: parameter %s marked ready twice in one "
				"iteration",
				pname(r, i, nb, sizeof(nb)));
	}
	r->ready[i] = 1;
	r->marked++;
	bk = &r->b[r->bucket_of[i]];
	bk->pending--;
	if (!r->sync || bk->pending)
		return 0;
	/* Launch this bucket and any ready ones after it, never out of order. */
	while (r->next_bucket < r->nbuckets && r->b[r->next_bucket].pending == 0) {
		if ((rc = launch(r, &r->b[r->next_bucket])) < 0)
			return rc; /* the context is broken: nothing more launches */
		r->next_bucket++;
	}
	return 0;
}

static void reset_iteration(struct ddp_reducer *r)
{
	memset(r->ready, 0, r->nparams);
	r->marked = 0;
	for (size_t b = 0; b < r->nbuckets; b++)
		r->b[b].pending = r->b[b].nparams;
	r->next_bucket = 0;
}

int ddp_reducer_finish(struct ddp_reducer *r)
{
	int rc;

	if ((rc = detached(r)) < 0)
		return rc;
	if (!r->sync) {
		reset_iteration(r);
		return ddpi_ctx_check(r->ctx, "reducer");
	}
	/* A failed launch broke the context: wait_launched says so. */
	rc = wait_launched(r, "reducer");
	for (size_t i = 0; rc == 0 && i < r->nparams; i++)
		if (!r->ready[i]) {
			char nb[32];
			rc = ddpi_err(DDP_ENOTREADY,
				      "reducer: parameter %s (index %zu) was never marked ready in "
				      "this iteration; its bucket and the ones after it were not "
				      "reduced",
				      pname(r, i, nb, sizeof(nb)), i);
		}
	reset_iteration(r);
	return rc;
}

int ddp_reducer_set_sync(struct ddp_reducer *r, int sync)
{
	int rc;

	if ((rc = detached(r)) < 0)
		return rc;
	/* Checked as every other option is: a 2 taken for "on" would make a
	 * value the header never defined mean something. */
	if (sync != 0 && sync != 1)
		return ddpi_err(-EINVAL, "reducer: sync must be 0 (no_sync) or 1, not %d", sync);
	/* Not once a gradient was marked: buckets completed while sync was off
	 * were never launched, and finish would leave them unreduced. */
	if (r->marked > 0 && sync != r->sync)
		return ddpi_err(-EBUSY,
				"reducer: cannot change sync in the middle of an iteration (%zu "
				"of %zu gradients marked ready; call ddp_reducer_finish first)",
				r->marked, r->nparams);
	r->sync = sync;
	return 0;
}

size_t ddp_reducer_num_buckets(const struct ddp_reducer *r)
{
	/* finalized: the buckets are gone; a forked child's are the parent's */
	return r && r->ctx && ddpi_ctx_live(r->ctx) ? r->nbuckets : 0;
}

int ddp_reducer_bucket_info(const struct ddp_reducer *r, size_t b, size_t *bytes, size_t *nparams)
{
	if (!r)
		return ddpi_err(-EINVAL, "ddp_reducer_bucket_info: no reducer (NULL)");
	if (!r->ctx || !ddpi_ctx_live(r->ctx))
		return detached(r);
	if (b >= r->nbuckets)
		return ddpi_err(-EINVAL, "ddp_reducer_bucket_info: bucket %zu of %zu", b,
				r->nbuckets);
	if (bytes)
		*bytes = r->b[b].bytes;
	if (nparams)
		*nparams = r->b[b].nparams;
	return 0;
}
