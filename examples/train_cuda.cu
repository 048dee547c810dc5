/* train_cuda: the CUDA variant of examples/train.c. Linear regression of a
 * deterministic synthetic target (y = A x + c + noise-free) with SGD on the
 * GPU, gradients computed by kernels straight into the reducer's device
 * buckets and averaged over the ranks with NCCL. Rank 0 prints the loss per
 * epoch and a checksum; defaults do not depend on the number of ranks.
 *
 *   train_cuda [--steps N] [--batch B] [--lr X] [--seed S] [--samples N]
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include <ddp.h>

#define IN  128
#define OUT 16

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static float uniform(uint64_t key)
{
	return (float)((double)(mix(key) >> 11) * 0x1p-52 - 1.0);
}

#define CUDA_CHECK(ctx, call)                                                                 \
	do {                                                                                  \
		cudaError_t e_ = (call);                                                      \
		if (e_ != cudaSuccess)                                                        \
			ddp_fatal(ctx, "%s: %s", #call, cudaGetErrorString(e_));              \
	} while (0)

/* err[s][o] = (W x_s + b)[o] - y[s][o], and the batch's squared error. */
__global__ void forward(const float *W, const float *b, const float *x, const float *y, float *err,
			float *sq, int nb)
{
	int s = blockIdx.x, o = threadIdx.x;
	if (s >= nb || o >= OUT)
		return;
	float a = b[o];
	for (int k = 0; k < IN; k++)
		a += W[o * IN + k] * x[s * IN + k];
	float d = a - y[s * OUT + o];
	err[s * OUT + o] = d;
	atomicAdd(sq, d * d);
}

/* Gradients of the mean of 0.5 * err^2 over the local batch. */
__global__ void grad_b(const float *err, float *gb, int nb)
{
	int o = threadIdx.x;
	if (o >= OUT)
		return;
	float a = 0;
	for (int s = 0; s < nb; s++)
		a += err[s * OUT + o];
	gb[o] += a / nb;
}

__global__ void grad_w(const float *err, const float *x, float *gW, int nb)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= OUT * IN)
		return;
	int o = i / IN, k = i % IN;
	float a = 0;
	for (int s = 0; s < nb; s++)
		a += err[s * OUT + o] * x[s * IN + k];
	gW[i] += a / nb;
}

__global__ void sgd(float *p, const float *g, float lr, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		p[i] -= lr * g[i];
}

int main(int argc, char **argv)
{
	long steps = 200, batch = 64, samples = 4096;
	double lr = 0.05;
	unsigned long long seed = 0;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--steps"))
			steps = atol(argv[i + 1]);
		else if (!strcmp(argv[i], "--batch"))
			batch = atol(argv[i + 1]);
		else if (!strcmp(argv[i], "--samples"))
			samples = atol(argv[i + 1]);
		else if (!strcmp(argv[i], "--lr"))
			lr = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--seed"))
			seed = strtoull(argv[i + 1], NULL, 10);
		else {
			fprintf(stderr, "train_cuda: unknown option %s\n", argv[i]);
			return 2;
		}
	}
	struct ddp_options o;
	struct ddp_ctx *ctx;
	ddp_options_init(&o);
	o.backend = DDP_BACKEND_NCCL; /* the kernels need GPU memory */
	if (ddp_init(&o, &ctx) < 0) {
		fprintf(stderr, "train_cuda: %s\n", ddp_errmsg());
		return 1;
	}
	int w = ddp_world_size(ctx);
	if (batch < w || batch % w || samples % w || samples < batch)
		ddp_fatal(ctx, "batch and samples must be multiples of the world size (%d)", w);
	long local = batch / w, per_epoch = samples / batch;

	/* Parameters on the GPU, initialised the same everywhere. */
	float hW[OUT * IN], hb[OUT];
	for (int i = 0; i < OUT * IN; i++)
		hW[i] = 0.01f * uniform(seed * 7 + (uint64_t)i);
	for (int i = 0; i < OUT; i++)
		hb[i] = 0;
	float *W, *b, *dx, *dy, *derr, *dsq;
	CUDA_CHECK(ctx, cudaMalloc(&W, sizeof(hW)));
	CUDA_CHECK(ctx, cudaMalloc(&b, sizeof(hb)));
	CUDA_CHECK(ctx, cudaMalloc(&dx, sizeof(float) * local * IN));
	CUDA_CHECK(ctx, cudaMalloc(&dy, sizeof(float) * local * OUT));
	CUDA_CHECK(ctx, cudaMalloc(&derr, sizeof(float) * local * OUT));
	CUDA_CHECK(ctx, cudaMalloc(&dsq, sizeof(float)));
	CUDA_CHECK(ctx, cudaMemcpy(W, hW, sizeof(hW), cudaMemcpyHostToDevice));
	CUDA_CHECK(ctx, cudaMemcpy(b, hb, sizeof(hb), cudaMemcpyHostToDevice));

	struct ddp_param params[2] = {{"linear.weight", W, OUT * IN, DDP_FLOAT32},
				      {"linear.bias", b, OUT, DDP_FLOAT32}};
	struct ddp_reducer *red;
	if (ddp_reducer_create(ctx, params, 2, NULL, &red) < 0)
		ddp_fatal(ctx, "%s", ddp_errmsg());
	float *gW = (float *)ddp_reducer_grad(red, 0), *gb = (float *)ddp_reducer_grad(red, 1);

	struct ddp_sampler smp;
	ddp_sampler_init_ctx(&smp, ctx, (uint64_t)samples, 1, seed, 0);
	uint64_t *idx = (uint64_t *)calloc(smp.num_samples, sizeof(uint64_t));
	float *hx = (float *)calloc(local * IN, sizeof(float));
	float *hy = (float *)calloc(local * OUT, sizeof(float));
	printf("train_cuda: %d rank(s) on GPU %d, global batch %ld, %ld steps\n", w, ddp_device(ctx),
	       batch, steps);

	double eloss = 0;
	long in_epoch = 0;
	for (long step = 0; step < steps; step++) {
		long e = step / per_epoch, j = step % per_epoch;
		if (j == 0) {
			ddp_sampler_set_epoch(&smp, (uint64_t)e);
			ddp_sampler_indices(&smp, idx);
		}
		for (long s = 0; s < local; s++) {
			uint64_t id = idx[j * local + s];
			for (int k = 0; k < IN; k++)
				hx[s * IN + k] = uniform(seed * 1000003 + id * IN + (uint64_t)k);
			for (int q = 0; q < OUT; q++) {
				float a = 0.5f * uniform(~seed + (uint64_t)q);
				for (int k = 0; k < IN; k++)
					a += uniform(seed * 31 + (uint64_t)(q * IN + k)) * hx[s * IN + k] /
					     16;
				hy[s * OUT + q] = a;
			}
		}
		CUDA_CHECK(ctx, cudaMemcpy(dx, hx, sizeof(float) * local * IN, cudaMemcpyHostToDevice));
		CUDA_CHECK(ctx, cudaMemcpy(dy, hy, sizeof(float) * local * OUT, cudaMemcpyHostToDevice));
		CUDA_CHECK(ctx, cudaMemset(dsq, 0, sizeof(float)));
		forward<<<local, OUT>>>(W, b, dx, dy, derr, dsq, (int)local);
		grad_b<<<1, OUT>>>(derr, gb, (int)local);
		if (ddp_reducer_mark_ready(red, 1) < 0)
			ddp_fatal(ctx, "%s", ddp_errmsg());
		grad_w<<<(OUT * IN + 255) / 256, 256>>>(derr, dx, gW, (int)local);
		if (ddp_reducer_mark_ready(red, 0) < 0 || ddp_reducer_finish(red) < 0)
			ddp_fatal(ctx, "%s", ddp_errmsg());
		sgd<<<(OUT * IN + 255) / 256, 256>>>(W, gW, (float)lr, OUT * IN);
		sgd<<<1, OUT>>>(b, gb, (float)lr, OUT);
		float sq;
		CUDA_CHECK(ctx, cudaMemcpy(&sq, dsq, sizeof(float), cudaMemcpyDeviceToHost));
		if (ddp_reducer_zero_grad(red) < 0)
			ddp_fatal(ctx, "%s", ddp_errmsg());
		eloss += 0.5 * sq / (double)(local * OUT);
		in_epoch++;
		if (j == per_epoch - 1 || step == steps - 1) {
			double l = eloss / in_epoch;
			ddp_all_reduce(ctx, &l, 1, DDP_FLOAT64, DDP_AVG); /* host buffer: staged */
			printf("epoch %ld: loss %.6f (%ld steps)\n", e + 1, l, in_epoch);
			eloss = 0;
			in_epoch = 0;
		}
	}
	CUDA_CHECK(ctx, cudaMemcpy(hW, W, sizeof(hW), cudaMemcpyDeviceToHost));
	CUDA_CHECK(ctx, cudaMemcpy(hb, b, sizeof(hb), cudaMemcpyDeviceToHost));
	double sum = 0;
	for (int i = 0; i < OUT * IN; i++)
		sum += hW[i];
	for (int i = 0; i < OUT; i++)
		sum += hb[i];
	printf("checksum %.4f\n", sum);
	ddp_reducer_destroy(red);
	free(idx);
	free(hx);
	free(hy);
	cudaFree(W);
	cudaFree(b);
	cudaFree(dx);
	cudaFree(dy);
	cudaFree(derr);
	cudaFree(dsq);
	return ddp_finalize(ctx) < 0;
}
