/* mem: ddp_alloc, memory for a backend's collectives (cpu: shared with the
 * node's ranks where it can be, shm_mem.c; nccl: device memory). The
 * backend's mem_alloc is the one the reducer's buckets come from.
 *
 * The context keeps a list of its blocks, so that ddp_free of a pointer it did
 * not give (or gave and took back already) is refused with a message instead
 * of reaching free() or munmap(), and ddp_finalize frees what is left. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "ddp_internal.h"

struct ddpi_block {
	struct ddpi_block *next;
	void *p;
};

void *ddp_alloc(struct ddp_ctx *ctx, size_t bytes)
{
	struct ddpi_block *b;
	void *p = NULL;
	int rc;

	if (!ddpi_ctx_live(ctx)) {
		ddpi_ctx_refuse(ctx, "ddp_alloc");
		return NULL;
	}
	if (!(b = malloc(sizeof(*b)))) {
		ddpi_err(-ENOMEM, "ddp_alloc: out of memory");
		return NULL;
	}
	if ((rc = ctx->ops->mem_alloc(ctx->be, bytes, &p)) < 0) {
		free(b);
		ddpi_err(rc, "ddp_alloc: cannot allocate %zu bytes", bytes);
		return NULL;
	}
	b->p = p;
	pthread_mutex_lock(&ctx->mem_lock);
	b->next = ctx->blocks;
	ctx->blocks = b;
	pthread_mutex_unlock(&ctx->mem_lock);
	return p;
}

void ddp_free(struct ddp_ctx *ctx, void *p)
{
	struct ddpi_block **pp, *b = NULL;

	if (!p)
		return;
	if (!ddpi_ctx_live(ctx)) {
		ddpi_ctx_refuse(ctx, "ddp_free");
		return;
	}
	pthread_mutex_lock(&ctx->mem_lock);
	for (pp = &ctx->blocks; *pp; pp = &(*pp)->next)
		if ((*pp)->p == p) {
			b = *pp;
			*pp = b->next;
			break;
		}
	pthread_mutex_unlock(&ctx->mem_lock);
	if (!b) {
		ddpi_err(-EINVAL,
			 "ddp_free: %p is not a block of this context's ddp_alloc (freed already, "
			 "or from elsewhere): left alone",
			 p);
		fprintf(stderr, "[rank%d] libddp: %s\n", ctx->env.rank, ddp_errmsg());
		return;
	}
	ctx->ops->mem_free(ctx->be, p);
	free(b);
}

void ddpi_blocks_free(struct ddp_ctx *ctx)
{
	while (ctx->blocks) {
		struct ddpi_block *b = ctx->blocks;
		ctx->blocks = b->next;
		ctx->ops->mem_free(ctx->be, b->p);
		free(b);
	}
}
