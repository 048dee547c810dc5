/* ddp_gpu_check: the NCCL backend on one GPU (world size 1), run by
 * tests/gpu/run.sh. Each check prints "CHECK|<name>|ok|" or "CHECK|<name>|FAIL|<why>"; exit 0 only
 * if all pass. Built everywhere; without CUDA it says so and exits 77.
 *   ddp_gpu_check          the collectives, the reducer, print control
 *   ddp_gpu_check stuck    the program's own work never ends on the GPU (a
 *                          host function holds the default stream), and an
 *                          all_reduce waits behind it: libddp's watchdog must
 *                          end the wait at DDP_TIMEOUT with a timeout that says
 *                          so, the context is unusable after, and
 *                          ddp_finalize returns (nothing waits for the held
 *                          stream); the process then _exits, the stream still
 *                          held
 *   ddp_gpu_check stuck-buckets   the same for DDP gradient buckets: finish
 *                          times out, the context is broken, and the reducer's
 *                          destroy and ddp_finalize return */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ddp.h"

#ifndef DDP_WITH_CUDA
int main(void)
{
	printf("ddp_gpu_check: libddp was built without CUDA (make CUDA=1)\n");
	return 77;
}
#else
#include <cuda_runtime_api.h>
/* nccl.h declares a few functions as f() (not f(void)). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

static int failures;

static void report(const char *name, int ok, const char *why)
{
	printf("CHECK|%s|%s|%s\n", name, ok ? "ok" : "FAIL", ok ? "" : why);
	fflush(stdout);
	failures += !ok;
}

/* What this run used: the GPU, the driver's CUDA, the runtime's and NCCL's
 * versions as loaded (not as built: a machine may carry others). */
static void print_versions(void)
{
	struct cudaDeviceProp prop;
	int drv = 0, rt = 0, nccl = 0, dev = 0, n = 0;

	cudaDriverGetVersion(&drv);
	cudaRuntimeGetVersion(&rt);
	ncclGetVersion(&nccl);
	cudaGetDevice(&dev);
	if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess)
		snprintf(prop.name, sizeof(prop.name), "?");
	printf("INFO|%s sm_%d%d|driver CUDA %d.%d, runtime %d.%d, NCCL %d.%d.%d (built %d.%d.%d)\n",
	       prop.name, prop.major, prop.minor, drv / 1000, drv % 1000 / 10, rt / 1000,
	       rt % 1000 / 10, nccl / 10000, nccl / 100 % 100, nccl % 100, NCCL_MAJOR, NCCL_MINOR,
	       NCCL_PATCH);
	/* As CUDA_VISIBLE_DEVICES leaves them (nvidia-smi counts every GPU). */
	cudaGetDeviceCount(&n);
	printf("GPUS|%d\n", n);
	fflush(stdout);
}

static int dev_equal(const void *dev, const void *host, size_t bytes)
{
	char *tmp = malloc(bytes);
	int eq = tmp && cudaMemcpy(tmp, dev, bytes, cudaMemcpyDeviceToHost) == cudaSuccess &&
		 memcmp(tmp, host, bytes) == 0;
	free(tmp);
	return eq;
}

static void check_binding(struct ddp_ctx *ctx)
{
	int cur = -1;
	cudaGetDevice(&cur);
	report("backend is nccl", ddp_backend(ctx) == DDP_BACKEND_NCCL,
	       ddp_backend_name(ddp_backend(ctx)));
	report("device bound (local_rank % n)", ddp_device(ctx) == 0 && cur == 0, "device != 0");
}

static void check_collectives(struct ddp_ctx *ctx)
{
	float h[1000], hh[1000];
	float *d;
	int rc;

	for (int i = 0; i < 1000; i++)
		h[i] = (float)(i % 17) - 8;
	cudaMalloc((void **)&d, sizeof(h));
	cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice);
	for (int op = DDP_SUM; op <= DDP_MAX; op++) {
		rc = ddp_all_reduce(ctx, d, 1000, DDP_FLOAT32, op);
		char name[64];
		snprintf(name, sizeof(name), "all_reduce device op %d", op);
		report(name, rc == 0 && dev_equal(d, h, sizeof(h)), ddp_errmsg());
	}
	for (int dt = DDP_FLOAT32; dt <= DDP_INT64; dt++) {
		char buf[8000];
		void *db;
		memset(buf, 0x3c, sizeof(buf));
		cudaMalloc(&db, sizeof(buf));
		cudaMemcpy(db, buf, sizeof(buf), cudaMemcpyHostToDevice);
		rc = ddp_all_reduce(ctx, db, sizeof(buf) / ddp_dtype_size(dt), dt, DDP_SUM);
		char name[64];
		snprintf(name, sizeof(name), "all_reduce dtype %d", dt);
		report(name, rc == 0 && dev_equal(db, buf, sizeof(buf)), ddp_errmsg());
		cudaFree(db);
	}
	memcpy(hh, h, sizeof(h));
	rc = ddp_all_reduce(ctx, hh, 1000, DDP_FLOAT32, DDP_AVG);
	report("all_reduce host buffer", rc == 0 && !memcmp(hh, h, sizeof(h)), ddp_errmsg());
	rc = ddp_broadcast(ctx, d, sizeof(h), 0);
	report("broadcast", rc == 0 && dev_equal(d, h, sizeof(h)), ddp_errmsg());
	float *g;
	cudaMalloc((void **)&g, sizeof(h));
	rc = ddp_all_gather(ctx, d, g, sizeof(h));
	report("all_gather", rc == 0 && dev_equal(g, h, sizeof(h)), ddp_errmsg());
	report("barrier", ddp_barrier(ctx) == 0, ddp_errmsg());
	cudaFree(g);
	cudaFree(d);
}

static void check_reducer(struct ddp_ctx *ctx)
{
	enum { N = 3 };
	size_t counts[N] = {300000, 70000, 5};
	struct ddp_param p[N];
	struct ddp_reducer_options o;
	struct ddp_reducer *r;
	float *host = calloc(300000, sizeof(float));
	int rc;

	for (int i = 0; i < N; i++) {
		void *d;
		cudaMalloc(&d, counts[i] * 4);
		cudaMemset(d, 0, counts[i] * 4);
		p[i] = (struct ddp_param){i == 0   ? "w0"
					  : i == 1 ? "w1"
						   : "b",
					  d, counts[i], DDP_FLOAT32};
	}
	ddp_reducer_options_init(&o);
	o.first_bucket_bytes = 256 * 1024;
	o.bucket_bytes = 1 << 20;
	rc = ddp_reducer_create(ctx, p, N, &o, &r);
	report("reducer create (buckets)", rc == 0 && ddp_reducer_num_buckets(r) == 2,
	       ddp_errmsg());
	if (rc < 0)
		return;
	for (size_t i = 0; i < 300000; i++)
		host[i] = (float)(i % 5);
	for (int it = 0; it < 3; it++) {
		for (int i = N - 1; i >= 0; i--) {
			cudaMemcpy(ddp_reducer_grad(r, (size_t)i), host, counts[i] * 4,
				   cudaMemcpyHostToDevice);
			ddp_reducer_mark_ready(r, (size_t)i);
		}
		rc = ddp_reducer_finish(r);
	}
	report("buckets all-reduce (avg of 1)",
	       rc == 0 && dev_equal(ddp_reducer_grad(r, 0), host, counts[0] * 4), ddp_errmsg());
	ddp_reducer_zero_grad(r);
	float *zeros = calloc(counts[1], sizeof(float));
	report("zero_grad", dev_equal(ddp_reducer_grad(r, 1), zeros, counts[1] * 4), "not zero");
	ddp_reducer_mark_ready(r, 2);
	rc = ddp_reducer_finish(r);
	report("never-marked parameter", rc == DDP_ENOTREADY && strstr(ddp_errmsg(), "w0"),
	       ddp_errmsg());
	ddp_reducer_set_sync(r, 0);
	ddp_reducer_mark_ready(r, 0);
	report("no_sync finish", ddp_reducer_finish(r) == 0, ddp_errmsg());
	ddp_reducer_destroy(r);
	for (int i = 0; i < N; i++)
		cudaFree(p[i].data);
	free(zeros);
	free(host);
}

static atomic_int released;

/* Holds the stream it was queued on until released (at most 120 s). */
static void CUDART_CB hold_stream(void *arg)
{
	(void)arg;
	for (int i = 0; i < 12000 && !atomic_load(&released); i++)
		usleep(10000);
}

static double since(const struct timespec *t0)
{
	struct timespec t1;

	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (double)(t1.tv_sec - t0->tv_sec) + (t1.tv_nsec - t0->tv_nsec) / 1e9;
}

/* After the timeout: the context refuses work, and tearing down returns. */
static void check_after_stuck(struct ddp_ctx *ctx, float *d, struct ddp_reducer *red)
{
	struct timespec t0;
	int rc = ddp_all_reduce(ctx, d, 1024, DDP_FLOAT32, DDP_SUM);

	report("then the context is broken", rc == DDP_EBROKEN, ddp_errmsg());
	clock_gettime(CLOCK_MONOTONIC, &t0);
	ddp_reducer_destroy(red);
	rc = ddp_finalize(ctx);
	printf("stuck: destroy and finalize returned %d after %.1f s\n", rc, since(&t0));
	/* A hang here fails the row (tests/gpu/run.sh's time limit); nothing is
	 * left to wait for, so finalize has nothing to fail on either. */
	report("destroy and finalize return", rc == 0, ddp_errmsg());
}

static void check_stuck(struct ddp_ctx *ctx, int buckets)
{
	struct ddp_param p = {"w", NULL, 1024, DDP_FLOAT32};
	struct ddp_reducer *red = NULL;
	struct timespec t0;
	float *d;
	int rc;

	cudaMalloc((void **)&d, 4096);
	if (buckets) {
		cudaMalloc(&p.data, 4096);
		if (ddp_reducer_create(ctx, &p, 1, NULL, &red) < 0) {
			report("reducer create", 0, ddp_errmsg());
			return;
		}
	}
	cudaLaunchHostFunc(0, hold_stream, NULL); /* the legacy default stream */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (buckets)
		rc = ddp_reducer_mark_ready(red, 0) < 0 ? -1 : ddp_reducer_finish(red);
	else
		rc = ddp_all_reduce(ctx, d, 1024, DDP_FLOAT32, DDP_SUM);
	printf("stuck: %s returned %d after %.1f s: %s\n", buckets ? "buckets" : "all_reduce", rc,
	       since(&t0), ddp_errmsg());
	report("a stuck stream times out, blamed on own work",
	       rc == -ETIMEDOUT && strstr(ddp_errmsg(), "own GPU work"), ddp_errmsg());
	check_after_stuck(ctx, d, red);
	atomic_store(&released, 1);
}

int main(int argc, char **argv)
{
	struct ddp_options o;
	struct ddp_ctx *ctx;
	int stuck = argc > 1 && !strcmp(argv[1], "stuck");
	int stuck_buckets = argc > 1 && !strcmp(argv[1], "stuck-buckets");

	ddp_options_init(&o);
	o.backend = DDP_BACKEND_NCCL;
	if (ddp_init(&o, &ctx) < 0) {
		report("ddp_init nccl", 0, ddp_errmsg());
		return 1;
	}
	report("ddp_init nccl", 1, "");
	if (stuck || stuck_buckets) {
		check_stuck(ctx, stuck_buckets);
		fflush(stdout);
		_exit(failures ? 1 : 0);
	}
	print_versions();
	check_binding(ctx);
	check_collectives(ctx);
	check_reducer(ctx);
	printf("stdout from rank 0 (print control)\n");
	ddp_print_force(ctx, "forced line\n");
	report("finalize", ddp_finalize(ctx) == 0, ddp_errmsg());
	return failures ? 1 : 0;
}
#endif
