/* ddp_gpu_grads: the NCCL side of the gradient-path benchmark, run by
 * tests/gpu/run.sh. The model of bench/allreduce's "grads" mode (26M float32
 * parameters in 24 layers, 108 MB of gradients): each step produces every
 * layer's gradient on the device (cudaMemsetAsync stands in for backward, so
 * nothing hides the communication) and reduces it either with DDP buckets
 * (mark_ready as each layer is produced, then finish) or as one flat
 * ddp_all_reduce (one ncclAllReduce) of the same bytes after the last layer.
 * The modes take turns step by step; each reports its median step, and the
 * buckets' overhead over the flat reduction as a percentage (goal: under 5%).
 * One line: "grads-nccl ranks=N mbytes=M buckets=B flat_ms=F buckets_ms=K
 * overhead_pct=P". Nothing is asserted on the figures. Built everywhere;
 * without CUDA it says so and exits 77.
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
#include <time.h>

#include <cuda_runtime_api.h>

#define NLAYERS 24

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

static int fail(const char *what)
{
	fprintf(stderr, "ddp_gpu_grads: %s: %s\n", what, ddp_errmsg());
	return 1;
}

/* One step of mode m (0 flat, 1 buckets); returns the slowest rank's ms or < 0. */
static double step(struct ddp_ctx *ctx, struct ddp_reducer *red, float *flat, size_t total,
		   size_t *off, int m)
{
	double t0, dt;

	if (ddp_barrier(ctx) < 0)
		return -1;
	cudaDeviceSynchronize();
	t0 = now_ms();
	for (int l = NLAYERS - 1; l >= 0; l--) {
		size_t n = layer_size(l);
		if (m == 1) {
			cudaMemsetAsync(ddp_reducer_grad(red, (size_t)l), 0, n * sizeof(float), 0);
			if (ddp_reducer_mark_ready(red, (size_t)l) < 0)
				return -1;
		} else {
			cudaMemsetAsync(flat + off[l], 0, n * sizeof(float), 0);
		}
	}
	if (m == 0 && ddp_all_reduce(ctx, flat, total, DDP_FLOAT32, DDP_AVG) < 0)
		return -1;
	if (m == 1 && ddp_reducer_finish(red) < 0)
		return -1;
	cudaDeviceSynchronize();
	dt = now_ms() - t0;
	if (ddp_all_reduce(ctx, &dt, 1, DDP_FLOAT64, DDP_MAX) < 0)
		return -1;
	return dt;
}

int main(int argc, char **argv)
{
	int steps = argc > 1 ? atoi(argv[1]) : 20;
	struct ddp_options o;
	struct ddp_ctx *ctx;
	struct ddp_param p[NLAYERS];
	struct ddp_reducer *red;
	size_t off[NLAYERS], total = 0;
	float *flat;
	double *t[2], ms[2];

	if (steps < 1)
		steps = 1;
	ddp_options_init(&o);
	o.backend = DDP_BACKEND_NCCL;
	if (ddp_init(&o, &ctx) < 0)
		return fail("ddp_init nccl");
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
	for (int m = 0; m < 2; m++)
		t[m] = calloc((size_t)steps, sizeof(double));
	for (int s = -1; s < steps; s++) /* step -1 warms up */
		for (int m = 0; m < 2; m++) {
			double dt = step(ctx, red, flat, total, off, m);
			if (dt < 0)
				return fail(m ? "buckets" : "flat all_reduce");
			if (s >= 0)
				t[m][s] = dt;
		}
	for (int m = 0; m < 2; m++) {
		qsort(t[m], (size_t)steps, sizeof(double), cmp_double);
		ms[m] = t[m][steps / 2];
		free(t[m]);
	}
	if (ddp_rank(ctx) == 0)
		printf("grads-nccl ranks=%d mbytes=%.1f buckets=%zu flat_ms=%.3f buckets_ms=%.3f "
		       "overhead_pct=%.1f\n",
		       ddp_world_size(ctx), total * 4.0 / 1e6, ddp_reducer_num_buckets(red), ms[0],
		       ms[1], (ms[1] - ms[0]) / ms[0] * 100);
	ddp_reducer_destroy(red);
	for (int l = 0; l < NLAYERS; l++)
		cudaFree(p[l].data);
	cudaFree(flat);
	return ddp_finalize(ctx) < 0 ? fail("ddp_finalize") : 0;
}
#endif
