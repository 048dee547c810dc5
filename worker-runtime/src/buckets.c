/* buckets: which parameters share a gradient bucket, as PyTorch's DDP decides
 * (torch/csrc/distributed/c10d/reducer.cpp compute_bucket_assignment_by_size,
 * called with [1 MiB, bucket_cap] and then reversed by DistributedDataParallel).
 *
 * Parameters are taken in registration order and grouped by dtype (one device
 * here). A dtype's open bucket closes as soon as its size reaches the current
 * cap; the first bucket of each dtype has the small first cap so the gradients
 * computed last in backward (the first layers) finish in a small bucket.
 * Remaining open buckets are closed at the end; buckets are sorted by their
 * smallest parameter index and the list is reversed, so bucket 0 holds the last
 * registered parameters, whose gradients are ready first. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_internal.h"

#define NDTYPES 6

struct open_bucket {
	size_t *idx; /* parameter indices, in registration order */
	size_t n;
	size_t bytes;
	int limit_step; /* 0 while the first cap applies */
};

struct closed_bucket {
	size_t first; /* position in the flat index list */
	size_t n;
	size_t bytes;
	size_t min_idx;
};

/* Moves b's indices to the end of flat as bucket c; b starts over empty. */
static void close_bucket(struct open_bucket *b, struct closed_bucket *c, size_t *flat,
			 size_t *nflat)
{
	c->first = *nflat;
	c->n = b->n;
	c->bytes = b->bytes;
	c->min_idx = b->idx[0];
	memcpy(flat + *nflat, b->idx, b->n * sizeof(size_t));
	*nflat += b->n;
	b->n = 0;
	b->bytes = 0;
}

static int by_min_idx(const void *a, const void *b)
{
	const struct closed_bucket *x = a, *y = b;
	return x->min_idx < y->min_idx ? -1 : x->min_idx > y->min_idx;
}

int ddpi_bucket_plan(const struct ddp_param *params, size_t n, size_t first_cap, size_t cap,
		     struct ddpi_bucket_plan *plan)
{
	struct open_bucket open[NDTYPES];
	struct closed_bucket *closed = NULL;
	size_t nclosed = 0, *flat = NULL, nflat = 0;
	int rc = -ENOMEM;

	memset(plan, 0, sizeof(*plan));
	memset(open, 0, sizeof(open));
	if (n == 0)
		return ddpi_err(-EINVAL, "reducer: no parameters");
	for (size_t i = 0; i < n; i++)
		if (!ddpi_dtype_valid(params[i].dtype))
			return ddpi_err(-EINVAL, "reducer: parameter %zu has an invalid dtype", i);
	closed = calloc(n, sizeof(*closed));
	flat = calloc(n, sizeof(*flat));
	for (int d = 0; d < NDTYPES; d++)
		open[d].idx = calloc(n, sizeof(size_t));
	if (!closed || !flat)
		goto fail;
	for (int d = 0; d < NDTYPES; d++)
		if (!open[d].idx)
			goto fail;

	for (size_t i = 0; i < n; i++) {
		struct open_bucket *b = &open[params[i].dtype];
		size_t limit;

		b->idx[b->n++] = i;
		b->bytes += params[i].count * ddp_dtype_size(params[i].dtype);
		limit = b->limit_step == 0 ? first_cap : cap;
		if (b->bytes >= limit) {
			close_bucket(b, &closed[nclosed++], flat, &nflat);
			b->limit_step = 1;
		}
	}
	for (int d = 0; d < NDTYPES; d++)
		if (open[d].n)
			close_bucket(&open[d], &closed[nclosed++], flat, &nflat);
	/* min_idx values are distinct, so the unstable qsort is deterministic. */
	qsort(closed, nclosed, sizeof(*closed), by_min_idx);

	plan->nbuckets = nclosed;
	plan->start = calloc(nclosed + 1, sizeof(size_t));
	plan->order = calloc(n, sizeof(size_t));
	plan->bytes = calloc(nclosed, sizeof(size_t));
	if (!plan->start || !plan->order || !plan->bytes)
		goto fail;
	size_t pos = 0;
	for (size_t b = 0; b < nclosed; b++) {
		const struct closed_bucket *c = &closed[nclosed - 1 - b]; /* reversed */
		plan->start[b] = pos;
		plan->bytes[b] = c->bytes;
		memcpy(plan->order + pos, flat + c->first, c->n * sizeof(size_t));
		pos += c->n;
	}
	plan->start[nclosed] = pos;
	rc = 0;
	goto out;
fail:
	ddpi_bucket_plan_free(plan);
	ddpi_err(rc, "reducer: out of memory planning buckets");
out:
	for (int d = 0; d < NDTYPES; d++)
		free(open[d].idx);
	free(closed);
	free(flat);
	return rc;
}

void ddpi_bucket_plan_free(struct ddpi_bucket_plan *plan)
{
	free(plan->start);
	free(plan->order);
	free(plan->bytes);
	memset(plan, 0, sizeof(*plan));
}
