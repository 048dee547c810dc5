/* device: which backend a rank uses and which device it binds.
 * auto = nccl when libddp has CUDA and a GPU is visible, else cpu; a forced
 * nccl without CUDA support or without a GPU is an error, never a silent
 * fallback. The GPU itself is bound in cuda/ (local_rank % visible devices). */
#include <errno.h>
#include <stdio.h>

#include "ddp_internal.h"

#ifndef DDP_WITH_CUDA
int ddpi_gpu_count(char *msg, size_t len)
{
	snprintf(msg, len, "libddp was built without CUDA");
	return 0;
}
#endif

const char *ddp_backend_name(enum ddp_backend b)
{
	switch (b) {
	case DDP_BACKEND_AUTO:
		return "auto";
	case DDP_BACKEND_CPU:
		return "cpu";
	case DDP_BACKEND_NCCL:
		return "nccl";
	}
	return "invalid";
}

int ddpi_select_backend(struct ddp_ctx *ctx, enum ddp_backend want, char *why, size_t len)
{
	char msg[256];
	int n;

	why[0] = '\0';
	ctx->device = -1;
	switch (want) {
	case DDP_BACKEND_CPU:
		ctx->backend = DDP_BACKEND_CPU;
		snprintf(why, len, "requested");
		return 0;
	case DDP_BACKEND_NCCL:
#ifndef DDP_WITH_CUDA
		return ddpi_err(DDP_ENOTBUILT,
				"backend nccl requested but libddp was built without CUDA "
				"(rebuild with make CUDA=1, or use DDP_BACKEND=cpu)");
#else
		n = ddpi_gpu_count(msg, sizeof(msg));
		if (n <= 0)
			return ddpi_err(DDP_ENOGPU,
					"backend nccl requested but no GPU is visible (%s); use "
					"DDP_BACKEND=cpu or auto",
					msg);
		ctx->backend = DDP_BACKEND_NCCL;
		ctx->device = ctx->env.local_rank % n;
		return 0;
#endif
	case DDP_BACKEND_AUTO:
		n = ddpi_gpu_count(msg, sizeof(msg));
		if (n > 0) {
			ctx->backend = DDP_BACKEND_NCCL;
			ctx->device = ctx->env.local_rank % n;
		} else {
			ctx->backend = DDP_BACKEND_CPU;
#ifdef DDP_WITH_CUDA
			snprintf(why, len, "%s", msg); /* worth saying: a GPU was expected */
#endif
		}
		return 0;
	}
	return ddpi_err(-EINVAL, "invalid backend %d", (int)want);
}
