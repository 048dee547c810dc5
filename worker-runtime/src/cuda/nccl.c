/* nccl: the GPU backend. Rank 0's ncclUniqueId reaches the others through the
 * cpu communicator (shared memory / node leaders), the communicator is created
 * non-blocking so init and every wait can be abandoned at the deadline, and all
 * work goes to one stream per communicator. A watchdog loop polls the stream
 * and ncclCommGetAsyncError; on an error or the deadline it aborts the
 * communicator (ncclCommAbort) instead of hanging. ncclCommAbort can itself
 * block while the stream holds work that never ends (seen on an H200: a
 * collective queued behind the program's own stuck work), so it runs on a
 * thread of its own, waited for a bounded time; a stream that is still busy
 * after that is left as it is ("stranded"): every later call fails at once,
 * and nothing that would wait for the device (cudaFree) is called again.
 *
 * Buffers: device (or managed) pointers are used in place; host pointers are
 * staged through a device scratch buffer, so host code works too. Work the
 * program queued on the legacy default stream before a call is waited for
 * (an event), so kernels that wrote gradients finish before they are reduced.
 * No call blocks on the stream outside the watchdog: a host buffer is copied
 * in before the stream waits for the program's work, and copied back only
 * once the watchdog saw the collective done (a copy to or from pageable
 * memory may wait for the stream), and a scratch buffer that grows is freed
 * only at the end (cudaFree waits for the whole device). */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
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
#include "progress.h"
#include "util.h"

struct nccl_be {
	struct ddp_ctx *ctx;
	ncclComm_t comm;
	cudaStream_t stream;
	cudaEvent_t user_done; /* recorded on the legacy default stream */
	void *scratch;
	size_t scratch_len;
	void *retired[64]; /* outgrown scratch buffers (sizes double): freed at the end */
	int nretired;
	int aborted;
	int stranded; /* the stream may never drain: free nothing that waits on it */
};

/* How long an abort, and the stream's draining after it, are waited for. */
#define NCCL_ABORT_GRACE_MS 5000

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

/* One ncclCommAbort on its own thread; whichever of the thread and the
 * waiter lets go last frees it. */
struct nccl_abort {
	ncclComm_t comm;
	atomic_int done, refs;
};

static void abort_put(struct nccl_abort *a)
{
	if (atomic_fetch_sub(&a->refs, 1) == 1)
		free(a);
}

static void *abort_main(void *arg)
{
	struct nccl_abort *a = arg;

	ncclCommAbort(a->comm);
	atomic_store(&a->done, 1);
	abort_put(a);
	return NULL;
}

/* abort_comm's work: 0 when the abort and the stream finished, 1 when
 * either did not in time, -1 when no thread could run the abort. */
static int abort_wait(struct nccl_be *b)
{
	struct timespec nap = {0, 1000000};
	struct nccl_abort *a;
	pthread_t t;
	int64_t until = util_now_ms() + NCCL_ABORT_GRACE_MS;
	int done;

	a = calloc(1, sizeof(*a));
	if (a) {
		a->comm = b->comm;
		atomic_init(&a->refs, 2);
	}
	b->comm = NULL;
	if (!a || pthread_create(&t, NULL, abort_main, a) != 0) {
		/* No thread to spare, and an abort here could block for good:
		 * leave the communicator as it is. */
		free(a);
		return -1;
	}
	pthread_detach(t);
	while (!(done = atomic_load(&a->done)) && util_now_ms() < until)
		nanosleep(&nap, NULL);
	abort_put(a);
	if (!done)
		return 1;
	while (cudaStreamQuery(b->stream) == cudaErrorNotReady)
		if (util_now_ms() >= until)
			return 1;
		else
			nanosleep(&nap, NULL);
	cudaGetLastError(); /* an aborted collective's error is not the next call's */
	return 0;
}

/* Abort the communicator and wait (bounded) for it and for the stream to be
 * done. Returns 1 when the stream was left busy (stranded), said once on
 * stderr, else 0. */
static int abort_comm(struct nccl_be *b)
{
	if (!b->comm || b->aborted)
		return b->stranded;
	b->aborted = 1;
	int rc = abort_wait(b);
	if (rc < 0)
		fprintf(stderr,
			"[rank%d] libddp: no thread could be started to abort the NCCL "
			"communicator (out of memory or threads): it is left as it is, its "
			"memory allocated\n",
			ddpi_log_rank());
	else if (rc > 0)
		fprintf(stderr,
			"[rank%d] libddp: the NCCL communicator's abort or its stream did not "
			"finish within %d s: its memory stays allocated\n",
			ddpi_log_rank(), NCCL_ABORT_GRACE_MS / 1000);
	b->stranded = rc != 0;
	return b->stranded;
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

/* A small collective ends on the GPU within microseconds: the wait spins on
 * the stream this long before it naps (as CUDA's own synchronisation spins
 * first), so such a call does not pay a whole nap. The naps then grow with
 * the wait (an eighth of it, from 50 us to 2 ms): a wait ends at most about
 * 12% late, and a long one costs little CPU (fixed 50 us naps took 45% of a
 * core on an H200 machine). */
#define NCCL_SPIN_NS	(500 * 1000)
#define NCCL_NAP_MIN_NS (50 * 1000)
#define NCCL_NAP_MAX_NS (2 * 1000 * 1000)

static void nap_for(uint64_t waited_ns)
{
	uint64_t ns = waited_ns / 8;
	struct timespec ts;

	ns = ns < NCCL_NAP_MIN_NS ? NCCL_NAP_MIN_NS : ns > NCCL_NAP_MAX_NS ? NCCL_NAP_MAX_NS : ns;
	ts.tv_sec = 0;
	ts.tv_nsec = (long)ns;
	nanosleep(&ts, NULL);
}

/* Whose work a busy stream waits for: the program's own, queued before the
 * collective (b->user_done not yet reached: NCCL never started, no peer is to
 * blame), or the collective's. */
static int own_work_pending(struct nccl_be *b)
{
	int own = cudaEventQuery(b->user_done) == cudaErrorNotReady;

	cudaGetLastError();
	return own;
}

/* The deadline passed with the stream busy: say whose work it was, abort. */
static int stream_timed_out(struct nccl_be *b, const char *what)
{
	int rc;

	if (own_work_pending(b))
		rc = ddpi_caused_by(
			ddpi_err(-ETIMEDOUT,
				 "%s: timed out: this rank's own GPU work, queued before the "
				 "collective, did not finish (a kernel or host function of the "
				 "program's is stuck or still running); NCCL communicator aborted",
				 what),
			"this rank's own GPU work did not finish");
	else
		rc = ddpi_caused_by(
			ddpi_err(-ETIMEDOUT,
				 "%s: timed out waiting for the GPU (a peer rank is gone "
				 "or stuck); NCCL communicator aborted",
				 what),
			"a peer rank timed out");
	abort_comm(b);
	return rc;
}

/* A wait this long is worth explaining in the hang report (ddprun
 * --hang-timeout reads the progress slot): whether the program's own GPU
 * work before the collective still runs, or the collective itself. Looked at
 * again every NCCL_LOOK_NS, not at every poll (a CUDA call each). */
#define NCCL_LOOK_AFTER_NS (1000ull * 1000 * 1000)
#define NCCL_LOOK_NS	   (250ull * 1000 * 1000)

static void say_what_it_waits_for(struct nccl_be *b)
{
	ddpi_progress_wait(own_work_pending(b) ? DDPI_WAIT_OWN_GPU_WORK : DDPI_WAIT_GPU_PEERS);
}

/* Every call first: after an abort there is nothing to wait for, and a
 * stranded stream must not be waited on (until the deadline) again. */
static int check_comm(struct nccl_be *b, const char *what)
{
	if (!b->comm || b->stranded)
		return ddpi_err(DDP_EBROKEN, "%s: the NCCL communicator was aborted", what);
	return 0;
}

/* The watchdog: wait for the stream, watching for NCCL errors and the deadline. */
static int wait_stream(struct nccl_be *b, int64_t deadline, const char *what)
{
	uint64_t start = util_now_ns(), now, look = start + NCCL_LOOK_AFTER_NS;
	int rc;

	if ((rc = check_comm(b, what)) < 0)
		return rc;
	for (;;) {
		cudaError_t e = cudaStreamQuery(b->stream);
		if (e == cudaSuccess)
			return 0;
		if (e != cudaErrorNotReady)
			return cuda_err(e, what);
		ncclResult_t st = ncclSuccess;
		if (ncclCommGetAsyncError(b->comm, &st) == ncclSuccess && st != ncclSuccess &&
		    st != ncclInProgress) {
			rc = nccl_err(b, st, what);
			abort_comm(b);
			return rc;
		}
		if (util_now_ms() >= deadline)
			return stream_timed_out(b, what);
		now = util_now_ns();
		if (now >= look) {
			say_what_it_waits_for(b);
			look = now + NCCL_LOOK_NS;
		}
		if (now - start >= NCCL_SPIN_NS)
			nap_for(now - start);
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

/* At least len bytes of device scratch. An outgrown buffer is kept until the
 * end, not freed: cudaFree would wait for the whole device, the program's
 * own (perhaps stuck) work too, outside the watchdog. */
static int need_scratch(struct nccl_be *b, size_t len)
{
	size_t want = len > 2 * b->scratch_len ? len : 2 * b->scratch_len;
	void *p = NULL;
	cudaError_t e;

	if (b->scratch_len >= len)
		return 0;
	if (b->scratch && b->nretired == (int)(sizeof(b->retired) / sizeof(b->retired[0])))
		return ddpi_err(-ENOMEM, "staging host buffers: too many scratch buffers");
	if ((e = cudaMalloc(&p, want)) != cudaSuccess)
		return cuda_err(e, "cudaMalloc (staging host buffers)");
	if (b->scratch)
		b->retired[b->nretired++] = b->scratch;
	b->scratch = p;
	b->scratch_len = want;
	return 0;
}

/* An in-place operation on buf: its device address (buf, or the scratch with
 * a host buffer copied in), ordered after the program's queued work. */
static int begin_op(struct nccl_be *b, void *buf, size_t bytes, void **dev, const char *what)
{
	int rc;

	*dev = buf;
	if ((rc = check_comm(b, what)) < 0)
		return rc;
	if (!on_device(buf)) {
		if ((rc = need_scratch(b, bytes)) < 0)
			return rc;
		*dev = b->scratch;
		/* Before the stream waits for the program's work: a pageable copy
		 * may wait for the stream. */
		cudaMemcpyAsync(*dev, buf, bytes, cudaMemcpyHostToDevice, b->stream);
	}
	return after_user_work(b);
}

/* After the NCCL call that returned r: settle, wait under the watchdog, and
 * copy a staged result back (the stream idle by then). */
static int end_op(struct nccl_be *b, ncclResult_t r, void *buf, void *dev, size_t bytes,
		  int64_t deadline, const char *what)
{
	int rc;

	if (r != ncclSuccess && r != ncclInProgress)
		return nccl_err(b, r, what);
	if ((rc = settle(b, deadline, what)) < 0 || (rc = wait_stream(b, deadline, what)) < 0)
		return rc;
	if (dev == buf)
		return 0;
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
	int send_host = !on_device(send), host = send_host || !on_device(recv), rc;
	const void *s = send;
	void *d = recv;

	if ((rc = check_comm(b, "all_gather")) < 0)
		return rc;
	if (host) {
		if ((rc = need_scratch(b, total + bytes)) < 0)
			return rc;
		d = b->scratch;
		s = (char *)b->scratch + total;
		/* A host source before the stream waits for the program's work
		 * (begin_op says why); a device one after it. */
		if (send_host)
			cudaMemcpyAsync((void *)s, send, bytes, cudaMemcpyHostToDevice, b->stream);
	}
	if ((rc = after_user_work(b)) < 0)
		return rc;
	if (host && !send_host)
		cudaMemcpyAsync((void *)s, send, bytes, cudaMemcpyDeviceToDevice, b->stream);
	ncclResult_t r = ncclAllGather(s, d, bytes, ncclInt8, b->comm, b->stream);
	if (r != ncclSuccess && r != ncclInProgress)
		return nccl_err(b, r, "ncclAllGather");
	if ((rc = settle(b, deadline, "all_gather")) < 0 ||
	    (rc = wait_stream(b, deadline, "all_gather")) < 0 || !host)
		return rc;
	cudaMemcpyAsync(recv, d, total, cudaMemcpyDefault, b->stream);
	return wait_stream(b, deadline, "all_gather");
}

static int nccl_barrier(void *be, int64_t deadline)
{
	struct nccl_be *b = be;
	int rc;

	/* Like torch's NCCL barrier: a one-element all-reduce, waited for. */
	if ((rc = check_comm(b, "barrier")) < 0 || (rc = need_scratch(b, 64)) < 0)
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
	struct nccl_be *b = be;

	if (!b->stranded) /* cudaFree waits for the device: it would never return */
		cudaFree(p);
}

/* Zeroed after the program's queued work (its optimizer may still read the
 * gradients), waited for under the watchdog. */
static int nccl_mem_zero(void *be, void *p, size_t bytes)
{
	struct nccl_be *b = be;
	cudaError_t e;
	int rc;

	if ((rc = check_comm(b, "zero")) < 0 || (rc = after_user_work(b)) < 0)
		return rc;
	if ((e = cudaMemsetAsync(p, 0, bytes, b->stream)) != cudaSuccess)
		return cuda_err(e, "cudaMemset");
	return wait_stream(b, ddpi_deadline(b->ctx), "zero");
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
	if (b->stranded) { /* its stream may never drain: leave what it uses */
		free(b);
		return;
	}
	if (b->scratch)
		cudaFree(b->scratch);
	while (b->nretired > 0)
		cudaFree(b->retired[--b->nretired]);
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
