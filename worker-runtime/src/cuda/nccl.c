/* nccl: the GPU backend. Rank 0's ncclUniqueId reaches the others through the
 * cpu communicator (shared memory / node leaders), the communicator is created
 * non-blocking so init and every wait can be abandoned at the deadline, and all
 * work goes to one stream per communicator. A watchdog loop polls the stream
 * and ncclCommGetAsyncError; on an error or the deadline it aborts the
 * communicator (ncclCommAbort) instead of hanging.
 *
 * Buffers: device (or managed) pointers are used in place; host pointers are
 * staged through a device scratch buffer, so host code works too. Work the
 * program queued on the legacy default stream before a call is waited for
 * (an event), so kernels that wrote gradients finish before they are reduced. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
/* nccl.h declares a few functions as f() (not f(void)). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include "ddp_internal.h"
#include "util.h"

struct nccl_be {
	struct ddp_ctx *ctx;
	ncclComm_t comm;
	cudaStream_t stream;
	cudaEvent_t user_done; /* recorded on the legacy default stream */
	void *scratch;
	size_t scratch_len;
	int aborted;
};

static int cuda_err(cudaError_t e, const char *what)
{
	return ddpi_err(DDP_ECUDA, "%s: %s", what, cudaGetErrorString(e));
}

static int nccl_err(struct nccl_be *b, ncclResult_t r, const char *what)
{
	const char *last = b && b->comm ? ncclGetLastError(b->comm) : NULL;
	int rc = ddpi_err(DDP_ENCCL, "%s: %s%s%s", what, ncclGetErrorString(r),
			  last && *last ? ": " : "", last ? last : "");

	/* NCCL's word for a peer that went away (a dead rank, a closed socket). */
	return r == ncclRemoteError ? ddpi_caused_by(rc, "a peer rank failed (NCCL remote error)")
				    : rc;
}

static ncclDataType_t nccl_type(enum ddp_dtype dt)
{
	switch (dt) {
	case DDP_FLOAT32:
		return ncclFloat32;
	case DDP_FLOAT64:
		return ncclFloat64;
	case DDP_FLOAT16:
		return ncclFloat16;
	case DDP_BFLOAT16:
		return ncclBfloat16;
	case DDP_INT32:
		return ncclInt32;
	case DDP_INT64:
		return ncclInt64;
	}
	return ncclFloat32;
}

static ncclRedOp_t nccl_op(enum ddp_op op)
{
	switch (op) {
	case DDP_SUM:
		return ncclSum;
	case DDP_AVG:
		return ncclAvg;
	case DDP_MIN:
		return ncclMin;
	case DDP_MAX:
		return ncclMax;
	}
	return ncclSum;
}

static void abort_comm(struct nccl_be *b)
{
	if (b->comm && !b->aborted) {
		ncclCommAbort(b->comm);
		b->aborted = 1;
		b->comm = NULL;
	}
}

/* Non-blocking communicator: wait until the last call has been taken in. */
static int settle(struct nccl_be *b, int64_t deadline, const char *what)
{
	for (;;) {
		ncclResult_t st = ncclSuccess;
		ncclResult_t r = ncclCommGetAsyncError(b->comm, &st);
		if (r != ncclSuccess)
			return nccl_err(b, r, what);
		if (st == ncclSuccess)
			return 0;
		if (st != ncclInProgress) {
			int rc = nccl_err(b, st, what);
			abort_comm(b);
			return rc;
		}
		if (util_now_ms() >= deadline) {
			abort_comm(b);
			return ddpi_caused_by(ddpi_err(-ETIMEDOUT,
						       "%s: timed out (NCCL communicator aborted)",
						       what),
					      "a peer rank timed out");
		}
		sched_yield();
	}
}

/* The watchdog: wait for the stream, watching for NCCL errors and the deadline. */
static int wait_stream(struct nccl_be *b, int64_t deadline, const char *what)
{
	struct timespec nap = {0, 50000};

	for (;;) {
		cudaError_t e = cudaStreamQuery(b->stream);
		if (e == cudaSuccess)
			return 0;
		if (e != cudaErrorNotReady)
			return cuda_err(e, what);
		ncclResult_t st = ncclSuccess;
		if (b->comm && ncclCommGetAsyncError(b->comm, &st) == ncclSuccess &&
		    st != ncclSuccess && st != ncclInProgress) {
			int rc = nccl_err(b, st, what);
			abort_comm(b);
			return rc;
		}
		if (util_now_ms() >= deadline) {
			abort_comm(b);
			return ddpi_caused_by(
				ddpi_err(-ETIMEDOUT,
					 "%s: timed out waiting for the GPU (a peer rank is gone "
					 "or stuck); NCCL communicator aborted",
					 what),
				"a peer rank timed out");
		}
		nanosleep(&nap, NULL);
	}
}

static int after_user_work(struct nccl_be *b)
{
	cudaError_t e = cudaEventRecord(b->user_done, cudaStreamLegacy);
	if (e == cudaSuccess)
		e = cudaStreamWaitEvent(b->stream, b->user_done, 0);
	return e == cudaSuccess ? 0 : cuda_err(e, "cudaStreamWaitEvent");
}

static int on_device(const void *p)
{
	struct cudaPointerAttributes a;

	if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
		cudaGetLastError();
		return 0;
	}
	return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

static int need_scratch(struct nccl_be *b, size_t len)
{
	cudaError_t e;

	if (b->scratch_len >= len)
		return 0;
	if (b->scratch) {
		cudaStreamSynchronize(b->stream);
		cudaFree(b->scratch);
		b->scratch = NULL;
		b->scratch_len = 0;
	}
	if ((e = cudaMalloc(&b->scratch, len)) != cudaSuccess)
		return cuda_err(e, "cudaMalloc (staging host buffers)");
	b->scratch_len = len;
	return 0;
}

static int check_comm(struct nccl_be *b, const char *what)
{
	if (!b->comm)
		return ddpi_err(DDP_EBROKEN, "%s: the NCCL communicator was aborted", what);
	return 0;
}

/* An in-place operation on buf: its device address (buf, or the scratch
 * after copying a host buffer in), once the program's queued work is done. */
static int begin_op(struct nccl_be *b, void *buf, size_t bytes, void **dev, const char *what)
{
	int rc;

	*dev = buf;
	if ((rc = check_comm(b, what)) < 0 || (rc = after_user_work(b)) < 0)
		return rc;
	if (on_device(buf))
		return 0;
	if ((rc = need_scratch(b, bytes)) < 0)
		return rc;
	*dev = b->scratch;
	cudaMemcpyAsync(*dev, buf, bytes, cudaMemcpyHostToDevice, b->stream);
	return 0;
}

/* After the NCCL call that returned r: settle, copy a staged result back, and
 * wait under the watchdog. */
static int end_op(struct nccl_be *b, ncclResult_t r, void *buf, void *dev, size_t bytes,
		  int64_t deadline, const char *what)
{
	int rc;

	if (r != ncclSuccess && r != ncclInProgress)
		return nccl_err(b, r, what);
	if ((rc = settle(b, deadline, what)) < 0)
		return rc;
	if (dev != buf)
		cudaMemcpyAsync(buf, dev, bytes, cudaMemcpyDeviceToHost, b->stream);
	return wait_stream(b, deadline, what);
}

static int nccl_all_reduce(void *be, void *buf, size_t count, enum ddp_dtype dt, enum ddp_op op,
			   int64_t deadline)
{
	struct nccl_be *b = be;
	size_t bytes = count * ddp_dtype_size(dt);
	void *dev;
	int rc;

	if ((rc = begin_op(b, buf, bytes, &dev, "all_reduce")) < 0)
		return rc;
	ncclResult_t r =
		ncclAllReduce(dev, dev, count, nccl_type(dt), nccl_op(op), b->comm, b->stream);
	return end_op(b, r, buf, dev, bytes, deadline, "all_reduce");
}

static int nccl_all_reduce_async(void *be, void *buf, size_t count, enum ddp_dtype dt,
				 enum ddp_op op)
{
	struct nccl_be *b = be;
	int rc;

	if ((rc = check_comm(b, "all_reduce")) < 0 || (rc = after_user_work(b)) < 0)
		return rc;
	ncclResult_t r =
		ncclAllReduce(buf, buf, count, nccl_type(dt), nccl_op(op), b->comm, b->stream);
	if (r != ncclSuccess && r != ncclInProgress)
		return nccl_err(b, r, "ncclAllReduce");
	return settle(b, ddpi_deadline(b->ctx), "all_reduce");
}

static int nccl_wait_async(void *be, int64_t deadline)
{
	return wait_stream(be, deadline, "gradient buckets");
}

static int nccl_broadcast(void *be, void *buf, size_t bytes, int root, int64_t deadline)
{
	struct nccl_be *b = be;
	void *dev;
	int rc;

	if ((rc = begin_op(b, buf, bytes, &dev, "broadcast")) < 0)
		return rc;
	ncclResult_t r = ncclBroadcast(dev, dev, bytes, ncclInt8, root, b->comm, b->stream);
	return end_op(b, r, buf, dev, bytes, deadline, "broadcast");
}

static int nccl_all_gather(void *be, const void *send, void *recv, size_t bytes, int64_t deadline)
{
	struct nccl_be *b = be;
	size_t total = bytes * (size_t)b->ctx->env.world;
	int host = !on_device(recv) || !on_device(send), rc;
	const void *s = send;
	void *d = recv;

	if ((rc = check_comm(b, "all_gather")) < 0 || (rc = after_user_work(b)) < 0)
		return rc;
	if (host) {
		if ((rc = need_scratch(b, total + bytes)) < 0)
			return rc;
		d = b->scratch;
		s = (char *)b->scratch + total;
		cudaMemcpyAsync((void *)s, send, bytes, cudaMemcpyDefault, b->stream);
	}
	ncclResult_t r = ncclAllGather(s, d, bytes, ncclInt8, b->comm, b->stream);
	if (r != ncclSuccess && r != ncclInProgress)
		return nccl_err(b, r, "ncclAllGather");
	if ((rc = settle(b, deadline, "all_gather")) < 0)
		return rc;
	if (host)
		cudaMemcpyAsync(recv, d, total, cudaMemcpyDefault, b->stream);
	return wait_stream(b, deadline, "all_gather");
}

static int nccl_barrier(void *be, int64_t deadline)
{
	struct nccl_be *b = be;
	int rc;

	/* Like torch's NCCL barrier: a one-element all-reduce, waited for. */
	if ((rc = need_scratch(b, 64)) < 0)
		return rc;
	cudaMemsetAsync(b->scratch, 0, 4, b->stream);
	return nccl_all_reduce(be, b->scratch, 1, DDP_FLOAT32, DDP_SUM, deadline);
}

static int nccl_mem_alloc(void *be, size_t bytes, void **p)
{
	cudaError_t e = cudaMalloc(p, bytes ? bytes : 64);
	return e == cudaSuccess ? 0 : cuda_err(e, "cudaMalloc");
}

static void nccl_mem_free(void *be, void *p)
{
	cudaFree(p);
}

static int nccl_mem_zero(void *be, void *p, size_t bytes)
{
	struct nccl_be *b = be;
	cudaError_t e = cudaMemsetAsync(p, 0, bytes, b->stream);
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(b->stream);
	return e == cudaSuccess ? 0 : cuda_err(e, "cudaMemset");
}

static void nccl_destroy(void *be)
{
	struct nccl_be *b = be;

	if (!b)
		return;
	if (b->comm) {
		if (wait_stream(b, ddpi_deadline(b->ctx), "finalize") == 0 && b->comm)
			ncclCommDestroy(b->comm);
		else
			abort_comm(b);
	}
	if (b->scratch)
		cudaFree(b->scratch);
	if (b->user_done)
		cudaEventDestroy(b->user_done);
	if (b->stream)
		cudaStreamDestroy(b->stream);
	free(b);
}

int ddpi_nccl_open(struct ddp_ctx *ctx, int64_t deadline, void **out)
{
	struct nccl_be *b = calloc(1, sizeof(*b));
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	ncclUniqueId id;
	cudaError_t e;
	ncclResult_t r;
	int rc;

	if (!b)
		return -ENOMEM;
	b->ctx = ctx;
	if ((e = cudaSetDevice(ctx->device)) != cudaSuccess) {
		rc = cuda_err(e, "cudaSetDevice");
		goto fail;
	}
	if ((e = cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking)) != cudaSuccess ||
	    (e = cudaEventCreateWithFlags(&b->user_done, cudaEventDisableTiming)) != cudaSuccess) {
		rc = cuda_err(e, "cudaStreamCreate");
		goto fail;
	}
	memset(&id, 0, sizeof(id));
	if (ctx->env.rank == 0 && (r = ncclGetUniqueId(&id)) != ncclSuccess) {
		rc = nccl_err(NULL, r, "ncclGetUniqueId");
		goto fail;
	}
	/* Rank 0's id to everyone over the cpu communicator. */
	if (ctx->env.world > 1 &&
	    (rc = ddpi_cpu_ops.broadcast(ctx->cpu, &id, sizeof(id), 0, deadline)) < 0)
		goto fail;
	cfg.blocking = 0;
	r = ncclCommInitRankConfig(&b->comm, ctx->env.world, id, ctx->env.rank, &cfg);
	if (r != ncclSuccess && r != ncclInProgress) {
		rc = nccl_err(b, r, "ncclCommInitRank");
		goto fail;
	}
	if ((rc = settle(b, deadline, "ncclCommInitRank")) < 0)
		goto fail;
	*out = b;
	return 0;
fail:
	nccl_destroy(b);
	return rc;
}

const struct ddpi_backend_ops ddpi_nccl_ops = {
	.name = "nccl",
	.all_reduce = nccl_all_reduce,
	.broadcast = nccl_broadcast,
	.all_gather = nccl_all_gather,
	.barrier = nccl_barrier,
	.all_reduce_async = nccl_all_reduce_async,
	.wait_async = nccl_wait_async,
	.mem_alloc = nccl_mem_alloc,
	.mem_free = nccl_mem_free,
	.mem_zero = nccl_mem_zero,
	.destroy = nccl_destroy,
};
