/* bench_allreduce: libddp's cpu backend, timed the way gloo_allreduce.py times
 * gloo (one warm-up, a barrier, ITERS calls, the slowest rank's mean).
 *
 *   bench_allreduce sizes NRANKS BYTES[,BYTES...] ITERS[,ITERS...] [OP]
 *       OP: all_reduce (float32 sum, the default), all_reduce_bf16 and
 *       all_reduce_f16 (the same bytes of bfloat16 or float16, summed in
 *       float32), all_gather (BYTES is the whole gathered buffer, as
 *       nccl-tests count it) or broadcast (root 0); all_reduce_shared,
 *       all_gather_shared and broadcast_shared: the same on buffers from
 *       ddp_alloc, as a DDP bucket's: shared with the node's ranks, which
 *       read one another's directly.
 *       One line per size: "ddp op=OP ranks=N bytes=B mean_us=T"
 *   bench_allreduce launched BYTES[,BYTES...] ITERS[,ITERS...] [OP]
 *       the same, as one rank started by a launcher (ddprun): the world
 *       comes from the environment (bench/allreduce/ring.py, several nodes)
 *   bench_allreduce grads NRANKS STEPS
 *       the gradient path of one training step: a model of 26M float32
 *       parameters in 24 layers, a backward pass that produces each layer's
 *       gradient with real work, and either one flat all_reduce of every
 *       gradient after backward or DDP buckets launched during backward.
 *       Prints "grads ranks=N mode=M step_ms=S backward_ms=B comm_ms=C"
 *       (comm = step - backward alone: the communication left exposed).
 * The ranks are started with ddp_spawn (fork) on this machine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_buf.h"

#include "ddp.h"

#define NLAYERS 24

struct cfg {
	const char *mode, *op;
	char *sizes, *iters;
	int steps;
};

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static void die(struct ddp_ctx *ctx, const char *what)
{
	ddp_fatal(ctx, "%s: %s", what, ddp_errmsg());
}

static int run_op(struct ddp_ctx *ctx, const char *op, float *a, float *b, size_t bytes)
{
	if (!strcmp(op, "all_gather"))
		return ddp_all_gather(ctx, a, b, bytes / (size_t)ddp_world_size(ctx));
	if (!strcmp(op, "broadcast"))
		return ddp_broadcast(ctx, a, bytes, 0);
	if (!strcmp(op, "all_reduce_bf16"))
		return ddp_all_reduce(ctx, a, bytes / 2, DDP_BFLOAT16, DDP_SUM);
	if (!strcmp(op, "all_reduce_f16"))
		return ddp_all_reduce(ctx, a, bytes / 2, DDP_FLOAT16, DDP_SUM);
	return ddp_all_reduce(ctx, a, bytes / 4, DDP_FLOAT32, DDP_SUM);
}

static int run_sizes(struct ddp_ctx *ctx, struct cfg *c)
{
	char *sp = NULL, *ip = NULL;
	char *s = strtok_r(c->sizes, ",", &sp), *it = strtok_r(c->iters, ",", &ip);

	for (; s && it; s = strtok_r(NULL, ",", &sp), it = strtok_r(NULL, ",", &ip)) {
		/* whole float32 elements: every op's count fits the buffers */
		size_t bytes = strtoull(s, NULL, 10) / 4 * 4, n = bytes / 4;
		int iters = atoi(it);
		/* OP_shared: OP on memory the node's ranks share, as a DDP
		 * bucket is (ddp_alloc) */
		size_t oplen = strlen(c->op);
		int shared = oplen > 7 && !strcmp(c->op + oplen - 7, "_shared");
		char op[32];
		snprintf(op, sizeof(op), "%.*s", (int)(shared ? oplen - 7 : oplen), c->op);
		float *buf = shared ? ddp_alloc(ctx, n * 4) : bench_buf(n * 4);
		float *out = shared ? ddp_alloc(ctx, n * 4) : bench_buf(n * 4);
		if (!buf || !out)
			ddp_fatal(ctx, "cannot allocate 2 x %zu bytes", bytes);
		/* float32 ones; half-precision sums of ones would reach infinity
		 * within 16 calls (float16), so those start from zeros */
		float one = strncmp(op, "all_reduce_", 11) ? 1.0f : 0.0f;
		for (size_t i = 0; i < n; i++)
			buf[i] = out[i] = one;
		if (run_op(ctx, op, buf, out, bytes) < 0 || ddp_barrier(ctx) < 0)
			die(ctx, "warm-up");
		double t0 = now_ms();
		for (int k = 0; k < iters; k++)
			if (run_op(ctx, op, buf, out, bytes) < 0)
				die(ctx, c->op);
		double mean = (now_ms() - t0) / iters;
		if (ddp_all_reduce(ctx, &mean, 1, DDP_FLOAT64, DDP_MAX) < 0)
			die(ctx, "all_reduce");
		if (ddp_rank(ctx) == 0)
			printf("ddp op=%s ranks=%d bytes=%zu mean_us=%.1f\n", c->op,
			       ddp_world_size(ctx), bytes, mean * 1e3);
		fflush(stdout);
		if (shared) {
			ddp_free(ctx, buf);
			ddp_free(ctx, out);
		} else {
			free(buf);
			free(out);
		}
	}
	return 0;
}

/* Layer sizes (elements) of a convnet-like model: small early layers, big
 * late ones; 26M parameters, 108 MB of float32 gradients (5 DDP buckets). */
static size_t layer_size(int l)
{
	static const size_t base[6] = {6912, 147456, 589824, 1179648, 2359296, 4718592};
	return base[l / 4 < 6 ? l / 4 : 5] / (l % 4 == 3 ? 64 : 1);
}

/* Stand-in for the backward work of a layer: a few passes of arithmetic over
 * its gradient (as a real backward touches activations and weights).
 * noipa: every mode runs this one copy of the loop. Inlined, each mode got
 * its own copy, and the copies ran at different speeds (the same
 * instructions at other addresses: backward alone 102 ms, the buckets' copy
 * about 140), which the benchmark reported as the buckets' communication. */
__attribute__((noipa)) static void backward_layer(float *g, const float *w, size_t n)
{
	for (int pass = 0; pass < 6; pass++)
		for (size_t i = 0; i < n; i++)
			g[i] = g[i] * 0.5f + w[i] * 1e-3f * (float)(pass + 1);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static int run_grads(struct ddp_ctx *ctx, struct cfg *c)
{
	struct ddp_param p[NLAYERS];
	struct ddp_reducer *red;
	float *w[NLAYERS], *flat, *fg[NLAYERS];
	size_t total = 0;

	for (int l = 0; l < NLAYERS; l++) {
		size_t n = layer_size(l);
		w[l] = malloc(n * sizeof(float));
		for (size_t i = 0; i < n; i++)
			w[l][i] = (float)((i * 7 + l) % 13) * 0.01f;
		p[l] = (struct ddp_param){NULL, w[l], n, DDP_FLOAT32};
		total += n;
	}
	flat = calloc(total, sizeof(float));
	for (int l = 0, off = 0; l < NLAYERS; off += (int)layer_size(l), l++)
		fg[l] = flat + off;
	if (ddp_reducer_create(ctx, p, NLAYERS, NULL, &red) < 0)
		die(ctx, "reducer");

	/* The three modes take turns step by step, so machine noise hits them
	 * alike; each reports its median step (the slowest rank's). */
	const char *modes[3] = {"backward-only", "flat", "buckets"};
	double ms[3], *t[3];
	for (int m = 0; m < 3; m++)
		t[m] = calloc((size_t)c->steps, sizeof(double));
	for (int s = -1; s < c->steps; s++) { /* step -1 warms caches and pages */
		for (int m = 0; m < 3; m++) {
			if (ddp_barrier(ctx) < 0)
				die(ctx, "barrier");
			double t0 = now_ms();
			for (int l = NLAYERS - 1; l >= 0; l--) {
				if (m == 2) {
					backward_layer(ddp_reducer_grad(red, (size_t)l), w[l],
						       p[l].count);
					if (ddp_reducer_mark_ready(red, (size_t)l) < 0)
						die(ctx, "mark_ready");
				} else {
					backward_layer(fg[l], w[l], p[l].count);
				}
			}
			if (m == 1 && ddp_all_reduce(ctx, flat, total, DDP_FLOAT32, DDP_AVG) < 0)
				die(ctx, "all_reduce");
			if (m == 2 && ddp_reducer_finish(red) < 0)
				die(ctx, "finish");
			double dt = now_ms() - t0;
			if (ddp_all_reduce(ctx, &dt, 1, DDP_FLOAT64, DDP_MAX) < 0)
				die(ctx, "all_reduce");
			if (s >= 0)
				t[m][s] = dt;
		}
	}
	for (int m = 0; m < 3; m++) {
		qsort(t[m], (size_t)c->steps, sizeof(double), cmp_double);
		ms[m] = t[m][c->steps / 2];
		free(t[m]);
	}
	if (ddp_rank(ctx) == 0)
		for (int m = 1; m < 3; m++)
			printf("grads ranks=%d mode=%s step_ms=%.2f backward_ms=%.2f comm_ms=%.2f "
			       "mbytes=%.1f buckets=%zu\n",
			       ddp_world_size(ctx), modes[m], ms[m], ms[0], ms[m] - ms[0],
			       total * 4.0 / 1e6, ddp_reducer_num_buckets(red));
	ddp_reducer_destroy(red);
	for (int l = 0; l < NLAYERS; l++)
		free(w[l]);
	free(flat);
	return 0;
}

static int worker(int rank, void *arg)
{
	struct cfg *c = arg;
	struct ddp_ctx *ctx;
	int rc;

	if (ddp_init(NULL, &ctx) < 0) {
		fprintf(stderr, "bench_allreduce: %s\n", ddp_errmsg());
		return 1;
	}
	rc = !strcmp(c->mode, "sizes") ? run_sizes(ctx, c) : run_grads(ctx, c);
	ddp_finalize(ctx);
	return rc;
}

int main(int argc, char **argv)
{
	struct cfg c = {0};
	int n;

	int launched = (argc == 4 || argc == 5) && !strcmp(argv[1], "launched");

	if (launched || ((argc == 5 || argc == 6) && !strcmp(argv[1], "sizes"))) {
		c.sizes = argv[3 - launched];
		c.iters = argv[4 - launched];
		c.op = argc == 6 - launched ? argv[5 - launched] : "all_reduce";
		static const char *const ops[] = {
			"all_reduce", "all_reduce_bf16",   "all_reduce_f16", "all_reduce_shared",
			"all_gather", "all_gather_shared", "broadcast",	     "broadcast_shared"};
		size_t k = 0;
		while (k < sizeof(ops) / sizeof(ops[0]) && strcmp(c.op, ops[k]))
			k++;
		if (k == sizeof(ops) / sizeof(ops[0])) {
			fprintf(stderr,
				"bench_allreduce: unknown OP '%s' (all_reduce, all_reduce_bf16, "
				"all_reduce_f16, all_gather, broadcast; all_reduce, all_gather "
				"and broadcast also with _shared)\n",
				c.op);
			return 2;
		}
	} else if (argc == 4 && !strcmp(argv[1], "grads")) {
		c.steps = atoi(argv[3]);
	} else {
		fprintf(stderr, "usage: bench_allreduce sizes NRANKS BYTES,... ITERS,... [OP]\n"
				"       bench_allreduce launched BYTES,... ITERS,... [OP]\n"
				"       bench_allreduce grads NRANKS STEPS\n");
		return 2;
	}
	c.mode = launched ? "sizes" : argv[1];
	if (launched)
		return worker(0, &c);
	n = atoi(argv[2]);
	setenv("DDP_QUIET", "1", 1);
	if (ddp_spawn(worker, &c, n, NULL, NULL) < 0) {
		fprintf(stderr, "bench_allreduce: %s\n", ddp_errmsg());
		return 1;
	}
	return 0;
}
