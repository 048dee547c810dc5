/* ddp_misuse: libddp's API used in ways its contract allows but that went
 * wrong with several ranks, for tests/e2e/test_ddp_misuse.py (run under ddprun).
 *   ddp_misuse reinit N   N contexts one after the other (init, all_reduce of the
 *                         rank, finalize); prints "round I sum S" on every rank
 *   ddp_misuse zero       every collective with 0 elements and NULL buffers
 *   ddp_misuse dfree      ddp_free of a shared block twice, then a collective
 *   ddp_misuse printnull  ddp_print_force(NULL, "force-null R") on every rank, the
 *                         silenced ones too, and printf("printf R")
 *   ddp_misuse bigalloc   ddp_alloc and malloc of twice RAM and swap: prints
 *                         "malloc M ddp_alloc D" (1: succeeded), and ddp_errmsg
 *   ddp_misuse caps       a reducer whose last rank gives other bucket caps:
 *                         "create: <ddp_errmsg>", then an all_reduce still works
 *   ddp_misuse fork WHAT  an all_reduce, then a forked child calls ddp_all_reduce
 *                         (WHAT coll) or ddp_finalize (fin) and prints "child
 *                         R rc C <ddp_errmsg>"; the parent then sums 1 three
 *                         times: "parent R sum S"
 * Every rank prints "ok" (or "failed: <ddp_errmsg>") on stderr at the end. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ddp.h"

static int fail(int rc)
{
	fprintf(stderr, "failed: %s (%s)\n", ddp_errmsg(), ddp_strerror(rc));
	return 1;
}

static int reinit(int rounds)
{
	for (int i = 0; i < rounds; i++) {
		struct ddp_ctx *ctx;
		int rc = ddp_init(NULL, &ctx), sum;

		if (rc < 0)
			return fail(rc);
		sum = ddp_rank(ctx);
		if ((rc = ddp_all_reduce(ctx, &sum, 1, DDP_INT32, DDP_SUM)) < 0)
			return fail(rc);
		fprintf(stderr, "round %d sum %d\n", i, sum);
		if ((rc = ddp_finalize(ctx)) < 0)
			return fail(rc);
	}
	return 0;
}

static int zero(struct ddp_ctx *ctx)
{
	char b[8];
	int rc;

	if ((rc = ddp_all_reduce(ctx, NULL, 0, DDP_FLOAT32, DDP_SUM)) < 0 ||
	    (rc = ddp_broadcast(ctx, NULL, 0, 0)) < 0 ||
	    (rc = ddp_all_gather(ctx, NULL, NULL, 0)) < 0 ||
	    (rc = ddp_all_gather(ctx, b, NULL, 0)) < 0 ||
	    (rc = ddp_all_gather(ctx, NULL, b, 0)) < 0 || (rc = ddp_barrier(ctx)) < 0)
		return fail(rc);
	return 0;
}

static int dfree(struct ddp_ctx *ctx)
{
	size_t n = 1 << 18; /* 1 MiB of float32: a shared block */
	float *p = ddp_alloc(ctx, n * sizeof(float));
	int rc;

	if (!p)
		return fail(-1);
	for (size_t i = 0; i < n; i++)
		p[i] = 1;
	if ((rc = ddp_all_reduce(ctx, p, n, DDP_FLOAT32, DDP_SUM)) < 0)
		return fail(rc);
	ddp_free(ctx, p);
	ddp_free(ctx, p);
	float x = 1;
	if ((rc = ddp_all_reduce(ctx, &x, 1, DDP_FLOAT32, DDP_SUM)) < 0)
		return fail(rc);
	return x == ddp_world_size(ctx) ? 0 : fail(-1);
}

static int printnull(struct ddp_ctx *ctx)
{
	int rc = ddp_print_force(NULL, "force-null %d\n", ddp_rank(ctx));

	printf("printf %d\n", ddp_rank(ctx));
	fflush(stdout);
	return rc < 0 ? fail(rc) : 0;
}

/* ddp_alloc fails where malloc does: its shared memory, charged only once
 * touched, took any size. */
static int bigalloc(struct ddp_ctx *ctx)
{
	struct sysinfo si;
	size_t n;

	if (sysinfo(&si) != 0)
		return fail(-1);
	n = 2 * ((size_t)si.totalram + si.totalswap) * si.mem_unit;
	void *m = malloc(n), *d = ddp_alloc(ctx, n);
	fprintf(stderr, "malloc %d ddp_alloc %d %s\n", m != NULL, d != NULL, d ? "" : ddp_errmsg());
	free(m);
	ddp_free(ctx, d);
	return 0;
}

static int caps(struct ddp_ctx *ctx)
{
	static float w[4096];
	struct ddp_param p[] = {{"a", w, 1024, DDP_FLOAT32}, {"b", w + 1024, 3072, DDP_FLOAT32}};
	struct ddp_reducer_options o;
	struct ddp_reducer *r = NULL;
	int rc, x = 1;

	ddp_reducer_options_init(&o);
	if (ddp_rank(ctx) == ddp_world_size(ctx) - 1)
		o.first_bucket_bytes = 4096; /* "a" alone, then "b": two buckets, not one */
	rc = ddp_reducer_create(ctx, p, 2, &o, &r);
	fprintf(stderr, "create: %s\n", rc < 0 ? ddp_errmsg() : "succeeded");
	ddp_reducer_destroy(r);
	if (rc != -EINVAL)
		return 1;
	if ((rc = ddp_all_reduce(ctx, &x, 1, DDP_INT32, DDP_SUM)) < 0)
		return fail(rc);
	return x == ddp_world_size(ctx) ? 0 : fail(-1);
}

/* A forked child holds a copy of the context: its collective mixed into the
 * parents' and its ddp_finalize told the peers that the rank had finished. */
static int forked(struct ddp_ctx *ctx, const char *what)
{
	float x = 1;
	int rc, status;
	pid_t pid;

	if ((rc = ddp_all_reduce(ctx, &x, 1, DDP_FLOAT32, DDP_SUM)) < 0)
		return fail(rc);
	fflush(NULL);
	if ((pid = fork()) < 0)
		return fail(-errno);
	if (pid == 0) {
		float y = 100;
		rc = !strcmp(what, "fin") ? ddp_finalize(ctx)
					  : ddp_all_reduce(ctx, &y, 1, DDP_FLOAT32, DDP_SUM);
		fprintf(stderr, "child %d rc %d %s\n", ddp_rank(ctx), rc, rc ? ddp_errmsg() : "");
		_exit(0);
	}
	if (waitpid(pid, &status, 0) != pid)
		return fail(-errno);
	for (int i = 0; i < 3; i++) {
		x = 1;
		if ((rc = ddp_all_reduce(ctx, &x, 1, DDP_FLOAT32, DDP_SUM)) < 0)
			return fail(rc);
		fprintf(stderr, "parent %d sum %g\n", ddp_rank(ctx), x);
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct ddp_ctx *ctx;
	int rc;

	if (argc < 2)
		return 2;
	if (!strcmp(argv[1], "reinit"))
		rc = reinit(argc > 2 ? atoi(argv[2]) : 2);
	else {
		if ((rc = ddp_init(NULL, &ctx)) < 0)
			return fail(rc);
		if (!strcmp(argv[1], "zero"))
			rc = zero(ctx);
		else if (!strcmp(argv[1], "dfree"))
			rc = dfree(ctx);
		else if (!strcmp(argv[1], "printnull"))
			rc = printnull(ctx);
		else if (!strcmp(argv[1], "bigalloc"))
			rc = bigalloc(ctx);
		else if (!strcmp(argv[1], "caps"))
			rc = caps(ctx);
		else if (!strcmp(argv[1], "fork") && argc > 2)
			rc = forked(ctx, argv[2]);
		else
			rc = 2;
		if (ddp_finalize(ctx) < 0 && rc == 0)
			rc = fail(-1);
	}
	if (rc == 0)
		fprintf(stderr, "ok\n");
	return rc;
}
