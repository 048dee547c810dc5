/* ddp_gpu_grads: the NCCL side of the gradient-path benchmark, run by
 * tests/gpu/run.sh. The model of bench/allreduce's "grads" mode (26M float32
 * parameters in 24 layers, 108 MB of gradients): each step produces every
 * layer's gradient on the device (cudaMemsetAsync stands in for backward, so
 * nothing hides the communication) and reduces it in one of three ways:
 *   nccl     the anchor: one ncclAllReduce of the same bytes after the last
 *            layer, on a communicator and stream of this program's own, then
 *            cudaStreamSynchronize (what a hand-written program does);
 *   flat     one ddp_all_reduce of the same bytes (libddp's wrapper alone);
 *   buckets  DDP buckets: mark_ready as each layer is produced, then finish.
 * The modes take turns step by step; each reports its median step, and
 * buckets' and flat's overhead over the anchor in percent (goal: buckets
 * under 5%). Then the latency of one small all_reduce (4 KiB, device memory),
 * libddp against the bare NCCL call and stream synchronisation, medians of
 * interleaved calls. Two lines from rank 0:
 *   grads-nccl ranks=N mbytes=M buckets=B nccl_ms=R flat_ms=F buckets_ms=K
 *              overhead_pct=P flat_pct=Q
 *   lat-nccl bytes=4096 nccl_us=R ddp_us=D
 * Nothing is asserted on the figures. Built everywhere; without CUDA it says
 * so and exits 77.
 *   ddp_gpu_grads [STEPS]   (default 20; world from the launcher's environment) */
#include <stdio.h>
#include <stdlib.h>

#include "ddp.h"

#ifndef DDP_WITH_CUDA
int main(void)
{
	printf("ddp_gpu_grads: libddp was built without CUDA (make CUDA=1)\n");
	return 77;
}
#else
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
/* nccl.h declares a few functions as f() (not f(void)). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#define NLAYERS	  24
#define LAT_CALLS 300

enum mode { M_NCCL, M_FLAT, M_BUCKETS, NMODES };

/* The anchor's own communicator and stream. */
struct raw {
	ncclComm_t comm;
	cudaStream_t stream;
	cudaEvent_t done;
};

/* Layer sizes (elements), as bench/allreduce/bench_allreduce.c's layer_size. */
static size_t layer_size(int l)
{
	static const size_t base[6] = {6912, 147456, 589824, 1179648, 2359296, 4718592};
	return base[l / 4 < 6 ? l / 4 : 5] / (l % 4 == 3 ? 64 : 1);
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(double), cmp_double);
	return v[n / 2];
}

static int fail(const char *what)
{
	fprintf(stderr, "ddp_gpu_grads: %s: %s\n", what, ddp_errmsg());
	return 1;
}

/* The anchor's communicator: rank 0's id reaches the others through libddp. */
static int raw_open(struct ddp_ctx *ctx, struct raw *r)
{
	ncclUniqueId id;

	memset(&id, 0, sizeof(id));
	if (ddp_rank(ctx) == 0 && ncclGetUniqueId(&id) != ncclSuccess)
		return -1;
	if (ddp_broadcast(ctx, &id, sizeof(id), 0) < 0)
		return -1;
	if (cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking) != cudaSuccess ||
	    cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming) != cudaSuccess)
		return -1;
	return ncclCommInitRank(&r->comm, ddp_world_size(ctx), id, ddp_rank(ctx)) == ncclSuccess
		       ? 0
		       : -1;
}

/* The bare call: after the work queued on the default stream, then waited. */
static int raw_all_reduce(struct raw *r, void *buf, size_t count, ncclRedOp_t op)
{
	if (cudaEventRecord(r->done, 0) != cudaSuccess ||
	    cudaStreamWaitEvent(r->stream, r->done, 0) != cudaSuccess ||
	    ncclAllReduce(buf, buf, count, ncclFloat32, op, r->comm, r->stream) != ncclSuccess)
		return -1;
	return cudaStreamSynchronize(r->stream) == cudaSuccess ? 0 : -1;
}

/* One step of mode m; returns the slowest rank's ms or < 0. */
static double step(struct ddp_ctx *ctx, struct raw *raw, struct ddp_reducer *red, float *flat,
		   size_t total, const size_t *off, enum mode m)
{
	double t0, dt;
	int rc;

	if (ddp_barrier(ctx) < 0)
		return -1;
	cudaDeviceSynchronize();
	t0 = now_ms();
	for (int l = NLAYERS - 1; l >= 0; l--) {
		size_t n = layer_size(l);
		if (m == M_BUCKETS) {
			cudaMemsetAsync(ddp_reducer_grad(red, (size_t)l), 0, n * sizeof(float), 0);
			if (ddp_reducer_mark_ready(red, (size_t)l) < 0)
				return -1;
		} else {
			cudaMemsetAsync(flat + off[l], 0, n * sizeof(float), 0);
		}
	}
	if (m == M_NCCL)
		rc = raw_all_reduce(raw, flat, total, ncclAvg);
	else if (m == M_FLAT)
		rc = ddp_all_reduce(ctx, flat, total, DDP_FLOAT32, DDP_AVG);
	else
		rc = ddp_reducer_finish(red);
	if (rc < 0)
		return -1;
	cudaDeviceSynchronize();
	dt = now_ms() - t0;
	if (ddp_all_reduce(ctx, &dt, 1, DDP_FLOAT64, DDP_MAX) < 0)
		return -1;
	return dt;
}

/* One small all_reduce, bare and through libddp, taking turns: the median us
 * of each (this rank's; the ranks run in lockstep). */
static int latency(struct ddp_ctx *ctx, struct raw *raw, float *buf, size_t count, double us[2])
{
	static double t[2][LAT_CALLS];

	for (int i = -10; i < LAT_CALLS; i++) /* the first ten warm up */
		for (int k = 0; k < 2; k++) {
			double t0 = now_ms();
			int rc = k == 0 ? raw_all_reduce(raw, buf, count, ncclSum)
					: ddp_all_reduce(ctx, buf, count, DDP_FLOAT32, DDP_SUM);
			if (rc < 0)
				return -1;
			if (i >= 0)
				t[k][i] = (now_ms() - t0) * 1e3;
		}
	us[0] = median(t[0], LAT_CALLS);
	us[1] = median(t[1], LAT_CALLS);
	return 0;
}

int main(int argc, char **argv)
{
	static const char *names[NMODES] = {"ncclAllReduce", "flat all_reduce", "buckets"};
	int steps = argc > 1 ? atoi(argv[1]) : 20;
	struct ddp_options o;
	struct ddp_ctx *ctx;
	struct ddp_param p[NLAYERS];
	struct ddp_reducer *red;
	struct raw raw;
	size_t off[NLAYERS], total = 0;
	float *flat;
	double *t[NMODES], ms[NMODES], lat[2];

	if (steps < 1)
		steps = 1;
	ddp_options_init(&o);
	o.backend = DDP_BACKEND_NCCL;
	if (ddp_init(&o, &ctx) < 0)
		return fail("ddp_init nccl");
	if (raw_open(ctx, &raw) < 0)
		return fail("the anchor's NCCL communicator");
	for (int l = 0; l < NLAYERS; l++) {
		void *d = NULL;
		off[l] = total;
		total += layer_size(l);
		if (cudaMalloc(&d, layer_size(l) * sizeof(float)) != cudaSuccess)
			return fail("cudaMalloc");
		p[l] = (struct ddp_param){NULL, d, layer_size(l), DDP_FLOAT32};
	}
	if (cudaMalloc((void **)&flat, total * sizeof(float)) != cudaSuccess)
		return fail("cudaMalloc");
	if (ddp_reducer_create(ctx, p, NLAYERS, NULL, &red) < 0)
		return fail("ddp_reducer_create");
	for (int m = 0; m < NMODES; m++)
		t[m] = calloc((size_t)steps, sizeof(double));
	for (int s = -1; s < steps; s++) /* step -1 warms up */
		for (int m = 0; m < NMODES; m++) {
			double dt = step(ctx, &raw, red, flat, total, off, (enum mode)m);
			if (dt < 0)
				return fail(names[m]);
			if (s >= 0)
				t[m][s] = dt;
		}
	for (int m = 0; m < NMODES; m++) {
		ms[m] = median(t[m], steps);
		free(t[m]);
	}
	if (latency(ctx, &raw, flat, 1024, lat) < 0)
		return fail("small all_reduce");
	if (ddp_rank(ctx) == 0) {
		printf("grads-nccl ranks=%d mbytes=%.1f buckets=%zu nccl_ms=%.3f flat_ms=%.3f "
		       "buckets_ms=%.3f overhead_pct=%.1f flat_pct=%.1f\n",
		       ddp_world_size(ctx), total * 4.0 / 1e6, ddp_reducer_num_buckets(red),
		       ms[M_NCCL], ms[M_FLAT], ms[M_BUCKETS],
		       (ms[M_BUCKETS] - ms[M_NCCL]) / ms[M_NCCL] * 100,
		       (ms[M_FLAT] - ms[M_NCCL]) / ms[M_NCCL] * 100);
		printf("lat-nccl bytes=4096 nccl_us=%.1f ddp_us=%.1f\n", lat[0], lat[1]);
	}
	ddp_reducer_destroy(red);
	for (int l = 0; l < NLAYERS; l++)
		cudaFree(p[l].data);
	cudaFree(flat);
	ncclCommDestroy(raw.comm);
	cudaStreamDestroy(raw.stream);
	cudaEventDestroy(raw.done);
	return ddp_finalize(ctx) < 0 ? fail("ddp_finalize") : 0;
}
#endif
