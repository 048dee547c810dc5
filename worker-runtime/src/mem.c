/* mem: ddp_alloc, memory for a backend's collectives (cpu: shared with the
 * node's ranks where it can be, shm_mem.c; nccl: device memory). The
 * backend's mem_alloc is the one the reducer's buckets come from. */
#include <errno.h>

#include "ddp_internal.h"

void *ddp_alloc(struct ddp_ctx *ctx, size_t bytes)
{
	void *p = NULL;
	int rc;

	if (!ctx) {
		ddpi_err(-EINVAL, "ddp_alloc: no context");
		return NULL;
	}
	if ((rc = ctx->ops->mem_alloc(ctx->be, bytes, &p)) < 0) {
		ddpi_err(rc, "ddp_alloc: cannot allocate %zu bytes", bytes);
		return NULL;
	}
	return p;
}

void ddp_free(struct ddp_ctx *ctx, void *p)
{
	if (ctx && p)
		ctx->ops->mem_free(ctx->be, p);
}
