/* train: a small real DDP training job on libddp (the README's main job).
 *
 * A two-layer MLP (64 -> 256 -> 10, ReLU, softmax cross-entropy) learns a
 * deterministic synthetic dataset (inputs from a hash of the sample index,
 * labels from a fixed random "teacher" network) with plain SGD. Each rank
 * draws its share of every global batch through the DistributedSampler,
 * computes gradients straight into the reducer's buckets, marks each one ready
 * as backward produces it (last layer first), and lets the reducer average them
 * over all ranks while backward continues.
 *
 * Every default is independent of the number of ranks (global batch, steps,
 * seed, learning rate), so one command line trains the same model at any
 * world size: N ranks match one rank up to rounding, and the final checksum
 * agrees. The model is float64 so that this holds to the printed digits: in
 * float32 the order of the gradient sums (which depends on the world size)
 * shows in the 6th digit. Rank 0 prints the loss per epoch and the checksum.
 *
 *   train [--steps N] [--batch B] [--lr X] [--seed S] [--samples N]
 *         [--bucket-cap-kb K] [--check-sync] [--dump FILE] [--no-sync-every K]
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ddp.h>

#define IN     64
#define HIDDEN 256
#define OUT    10

struct opts {
	long steps, batch, samples, bucket_kb, no_sync_every;
	double lr;
	unsigned long long seed;
	int check_sync;
	const char *dump;
};

enum { W1, B1, W2, B2, NPARAMS };

struct model {
	double *p[NPARAMS]; /* parameters */
	double *g[NPARAMS]; /* gradients: views into the reducer's buckets */
};

static const size_t param_count[NPARAMS] = {HIDDEN * IN, HIDDEN, OUT *HIDDEN, OUT};
static const char *const param_name[NPARAMS] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};

/* splitmix64: the deterministic source of data and initial weights. */
static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static double uniform(uint64_t key) /* in [-1, 1) */
{
	return (double)(mix(key) >> 11) * 0x1p-52 - 1.0;
}

static void sample(uint64_t seed, uint64_t i, double *x)
{
	for (int k = 0; k < IN; k++)
		x[k] = uniform(seed * 0x100000001b3ull + i * IN + (uint64_t)k);
}

/* The label: argmax of a fixed random linear teacher. */
static int label(uint64_t seed, const double *x)
{
	int best = 0;
	double bv = -1e30;
	for (int c = 0; c < OUT; c++) {
		double v = 0;
		for (int k = 0; k < IN; k++)
			v += uniform(~seed * 31 + (uint64_t)(c * IN + k)) * x[k];
		if (v > bv) {
			bv = v;
			best = c;
		}
	}
	return best;
}

static void init_params(struct model *m, uint64_t seed)
{
	double s1 = 1.0 / sqrt(IN), s2 = 1.0 / sqrt(HIDDEN);
	for (size_t i = 0; i < param_count[W1]; i++)
		m->p[W1][i] = s1 * uniform((seed ^ 0xa1) * 0x10000 + i);
	for (size_t i = 0; i < param_count[W2]; i++)
		m->p[W2][i] = s2 * uniform((seed ^ 0xa2) * 0x10000 + i);
	memset(m->p[B1], 0, sizeof(double) * HIDDEN);
	memset(m->p[B2], 0, sizeof(double) * OUT);
}

/* Forward and backward over a local batch; gradients (of the local mean loss)
 * are accumulated into m->g, each marked ready as soon as it is complete.
 * Returns the local batch's summed loss. */
static double step_grads(struct ddp_ctx *ctx, struct ddp_reducer *red, struct model *m,
			 const double *xs, const int *ys, long nb)
{
	static double h[HIDDEN], dh[HIDDEN], z[OUT], dz[OUT];
	double *dzs = calloc((size_t)nb * OUT, sizeof(double));
	double *hs = calloc((size_t)nb * HIDDEN, sizeof(double));
	double loss = 0;
	int rc;

	if (!dzs || !hs)
		ddp_fatal(ctx, "out of memory");
	/* Forward, keeping what backward needs. */
	for (long s = 0; s < nb; s++) {
		const double *x = xs + s * IN;
		for (int j = 0; j < HIDDEN; j++) {
			double a = m->p[B1][j];
			for (int k = 0; k < IN; k++)
				a += m->p[W1][j * IN + k] * x[k];
			h[j] = a > 0 ? a : 0;
		}
		double zmax = -1e300;
		for (int c = 0; c < OUT; c++) {
			double a = m->p[B2][c];
			for (int j = 0; j < HIDDEN; j++)
				a += m->p[W2][c * HIDDEN + j] * h[j];
			z[c] = a;
			zmax = a > zmax ? a : zmax;
		}
		double se = 0;
		for (int c = 0; c < OUT; c++)
			se += exp(z[c] - zmax);
		loss += log(se) + zmax - z[ys[s]];
		for (int c = 0; c < OUT; c++)
			dz[c] = exp(z[c] - zmax) / se - (c == ys[s]);
		for (int c = 0; c < OUT; c++)
			dzs[s * OUT + c] = dz[c] / (double)nb;
		memcpy(hs + s * HIDDEN, h, sizeof(h));
	}
	/* Backward, last layer first: its gradients are ready first. */
	for (long s = 0; s < nb; s++)
		for (int c = 0; c < OUT; c++)
			m->g[B2][c] += dzs[s * OUT + c];
	if ((rc = ddp_reducer_mark_ready(red, B2)) < 0)
		ddp_fatal(ctx, "%s", ddp_errmsg());
	for (long s = 0; s < nb; s++)
		for (int c = 0; c < OUT; c++)
			for (int j = 0; j < HIDDEN; j++)
				m->g[W2][c * HIDDEN + j] += dzs[s * OUT + c] * hs[s * HIDDEN + j];
	if ((rc = ddp_reducer_mark_ready(red, W2)) < 0)
		ddp_fatal(ctx, "%s", ddp_errmsg());
	for (long s = 0; s < nb; s++) {
		for (int j = 0; j < HIDDEN; j++) {
			double a = 0;
			for (int c = 0; c < OUT; c++)
				a += m->p[W2][c * HIDDEN + j] * dzs[s * OUT + c];
			dh[j] = hs[s * HIDDEN + j] > 0 ? a : 0;
		}
		const double *x = xs + s * IN;
		for (int j = 0; j < HIDDEN; j++) {
			m->g[B1][j] += dh[j];
			for (int k = 0; k < IN; k++)
				m->g[W1][j * IN + k] += dh[j] * x[k];
		}
	}
	if ((rc = ddp_reducer_mark_ready(red, B1)) < 0 ||
	    (rc = ddp_reducer_mark_ready(red, W1)) < 0)
		ddp_fatal(ctx, "%s", ddp_errmsg());
	free(dzs);
	free(hs);
	return loss;
}

static uint64_t params_hash(const struct model *m)
{
	uint64_t h = 1469598103934665603ull;
	for (int p = 0; p < NPARAMS; p++) {
		const unsigned char *b = (const unsigned char *)m->p[p];
		for (size_t i = 0; i < param_count[p] * sizeof(double); i++)
			h = (h ^ b[i]) * 1099511628211ull;
	}
	return h;
}

/* Every rank must hold bit-identical parameters after every step. */
static void check_sync(struct ddp_ctx *ctx, const struct model *m, long step)
{
	int w = ddp_world_size(ctx);
	uint64_t mine = params_hash(m), *all = calloc((size_t)w, sizeof(uint64_t));

	if (!all || ddp_all_gather(ctx, &mine, all, sizeof(mine)) < 0)
		ddp_fatal(ctx, "check-sync: %s", ddp_errmsg());
	for (int r = 0; r < w; r++)
		if (all[r] != mine)
			ddp_fatal(ctx,
				  "check-sync: rank %d's parameters differ from rank %d's after "
				  "step %ld",
				  r, ddp_rank(ctx), step);
	free(all);
}

static int parse(int argc, char **argv, struct opts *o)
{
	*o = (struct opts){.steps = 256, .batch = 64, .samples = 4096, .lr = 0.5, .seed = 0};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		char *end = NULL;
		if (!strcmp(a, "--check-sync")) {
			o->check_sync = 1;
			continue;
		}
		if (!v) {
			fprintf(stderr,
				"train: %s needs a value (see the comment at the top of "
				"examples/train.c)\n",
				a);
			return -1;
		}
		i++;
		errno = 0;
		if (!strcmp(a, "--steps"))
			o->steps = strtol(v, &end, 10);
		else if (!strcmp(a, "--batch"))
			o->batch = strtol(v, &end, 10);
		else if (!strcmp(a, "--samples"))
			o->samples = strtol(v, &end, 10);
		else if (!strcmp(a, "--bucket-cap-kb"))
			o->bucket_kb = strtol(v, &end, 10);
		else if (!strcmp(a, "--no-sync-every"))
			o->no_sync_every = strtol(v, &end, 10);
		else if (!strcmp(a, "--lr"))
			o->lr = strtod(v, &end);
		else if (!strcmp(a, "--seed"))
			o->seed = strtoull(v, &end, 10);
		else if (!strcmp(a, "--dump"))
			o->dump = v, end = (char *)v + strlen(v);
		else {
			fprintf(stderr, "train: unknown option %s\n", a);
			return -1;
		}
		if (errno || !end || *end || end == v) {
			fprintf(stderr, "train: bad value '%s' for %s\n", v, a);
			return -1;
		}
	}
	if (o->steps < 0 || o->batch < 1 || o->samples < o->batch || o->bucket_kb < 0 ||
	    o->no_sync_every < 0 || !(o->lr > 0)) {
		fprintf(stderr, "train: need steps >= 0, 1 <= batch <= samples, lr > 0\n");
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct ddp_options dopt;
	struct ddp_reducer_options ropt;
	struct ddp_param params[NPARAMS];
	struct ddp_reducer *red;
	struct ddp_sampler smp;
	struct ddp_ctx *ctx;
	struct model m;
	struct opts o;
	int rc;

	if (parse(argc, argv, &o) < 0)
		return 2;
	ddp_options_init(&dopt);
	dopt.backend = DDP_BACKEND_CPU; /* the math below runs on the CPU */
	if ((rc = ddp_init(&dopt, &ctx)) < 0) {
		fprintf(stderr, "train: %s\n", ddp_errmsg());
		return 1;
	}
	int w = ddp_world_size(ctx);
	if (o.batch % w)
		ddp_fatal(ctx, "the global batch (%ld) must be a multiple of the world size (%d)",
			  o.batch, w);
	if (o.samples % w)
		ddp_fatal(ctx, "--samples (%ld) must be a multiple of the world size (%d)",
			  o.samples, w);
	long local = o.batch / w, steps_per_epoch = o.samples / o.batch;

	for (int p = 0; p < NPARAMS; p++) {
		m.p[p] = calloc(param_count[p], sizeof(double));
		if (!m.p[p])
			ddp_fatal(ctx, "out of memory");
		params[p] = (struct ddp_param){param_name[p], m.p[p], param_count[p], DDP_FLOAT64};
	}
	init_params(&m, o.seed);
	ddp_reducer_options_init(&ropt);
	if (o.bucket_kb)
		ropt.first_bucket_bytes = ropt.bucket_bytes = (size_t)o.bucket_kb * 1024;
	if ((rc = ddp_reducer_create(ctx, params, NPARAMS, &ropt, &red)) < 0)
		ddp_fatal(ctx, "%s", ddp_errmsg());
	for (int p = 0; p < NPARAMS; p++)
		m.g[p] = ddp_reducer_grad(red, (size_t)p);
	if ((rc = ddp_sampler_init_ctx(&smp, ctx, (uint64_t)o.samples, 1, o.seed, 0)) < 0)
		ddp_fatal(ctx, "%s", ddp_errmsg());
	printf("train: %d rank(s), global batch %ld (%ld per rank), %ld steps, %zu bucket(s)\n", w,
	       o.batch, local, o.steps, ddp_reducer_num_buckets(red));

	uint64_t *idx = calloc(smp.num_samples, sizeof(uint64_t));
	double *xs = calloc((size_t)local * IN, sizeof(double));
	int *ys = calloc((size_t)local, sizeof(int));
	double epoch_loss = 0;
	long epoch = -1, in_epoch = 0;
	if (!idx || !xs || !ys)
		ddp_fatal(ctx, "out of memory");

	for (long step = 0; step < o.steps; step++) {
		long e = step / steps_per_epoch, j = step % steps_per_epoch;
		if (e != epoch) {
			epoch = e;
			ddp_sampler_set_epoch(&smp, (uint64_t)e);
			if (ddp_sampler_indices(&smp, idx) < 0)
				ddp_fatal(ctx, "%s", ddp_errmsg());
		}
		for (long s = 0; s < local; s++) {
			sample(o.seed, idx[j * local + s], xs + s * IN);
			ys[s] = label(o.seed, xs + s * IN);
		}
		/* Gradient accumulation: K-1 local steps without communication. */
		int sync = !o.no_sync_every || (step + 1) % o.no_sync_every == 0;
		if (ddp_reducer_set_sync(red, sync) < 0)
			ddp_fatal(ctx, "%s", ddp_errmsg());
		epoch_loss += step_grads(ctx, red, &m, xs, ys, local) / (double)local;
		in_epoch++;
		if ((rc = ddp_reducer_finish(red)) < 0)
			ddp_fatal(ctx, "%s", ddp_errmsg());
		if (sync) {
			for (int p = 0; p < NPARAMS; p++)
				for (size_t i = 0; i < param_count[p]; i++)
					m.p[p][i] -= o.lr * m.g[p][i];
			if (ddp_reducer_zero_grad(red) < 0)
				ddp_fatal(ctx, "%s", ddp_errmsg());
		}
		if (o.check_sync)
			check_sync(ctx, &m, step);
		if (j == steps_per_epoch - 1 || step == o.steps - 1) {
			double l = epoch_loss / (double)in_epoch;
			if (ddp_all_reduce(ctx, &l, 1, DDP_FLOAT64, DDP_AVG) < 0)
				ddp_fatal(ctx, "%s", ddp_errmsg());
			printf("epoch %ld: loss %.4f (%ld steps)\n", e + 1, l, in_epoch);
			epoch_loss = 0;
			in_epoch = 0;
		}
	}
	if (o.check_sync)
		printf("check-sync: parameters identical on all %d rank(s) after every step\n", w);

	double sum = 0, sq = 0;
	for (int p = 0; p < NPARAMS; p++)
		for (size_t i = 0; i < param_count[p]; i++) {
			sum += m.p[p][i];
			sq += m.p[p][i] * m.p[p][i];
		}
	printf("checksum %.6f %.6f\n", sum, sq);
	if (o.dump && ddp_rank(ctx) == 0) {
		FILE *f = fopen(o.dump, "wb");
		for (int p = 0; f && p < NPARAMS; p++)
			fwrite(m.p[p], sizeof(double), param_count[p], f);
		if (!f || fclose(f) != 0)
			ddp_fatal(ctx, "cannot write %s", o.dump);
	}
	ddp_reducer_destroy(red);
	for (int p = 0; p < NPARAMS; p++)
		free(m.p[p]);
	free(idx);
	free(xs);
	free(ys);
	return ddp_finalize(ctx) < 0;
}
