/* Unit tests for libddp's broken context (ddp.h: "After a collective fails, the
 * context is broken: every later collective fails with DDP_EBROKEN at once"),
 * with two ranks from ddp_spawn: rank 1 leaves after creating its reducer,
 * so rank 0's first gradient bucket fails in the background (DDP_EPEER).
 * The first call that reports the failure returns it; every later
 * collective and reducer call returns DDP_EBROKEN, its message still naming
 * the rank that exited. Rank 0 checks in its own process and exits 1 (the
 * failed check on stderr) when one fails; ddp_spawn then says so. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ddp_internal.h"

/* A check inside rank 0's process, where cmocka's asserts cannot report. */
#define EXPECT(cond)                                                                            \
	do {                                                                                    \
		if (!(cond)) {                                                                  \
			fprintf(stderr, "%s:%d: rank 0: %s failed; ddp_errmsg: %s\n", __FILE__, \
				__LINE__, #cond, ddp_errmsg());                                 \
			return 1;                                                               \
		}                                                                               \
	} while (0)

/* ddp_errmsg names the cause: rank 1 exited. */
#define EXPECT_CAUSE() EXPECT(strstr(ddp_errmsg(), "rank 1") && strstr(ddp_errmsg(), "exited"))
/* A later call: DDP_EBROKEN, and the message still names the cause. */
#define EXPECT_BROKEN(call)                                                   \
	do {                                                                  \
		EXPECT((call) == DDP_EBROKEN);                                \
		EXPECT(strstr(ddp_errmsg(), "broken by an earlier failure")); \
		EXPECT_CAUSE();                                               \
	} while (0)

enum first_report { BY_FINISH, BY_COLLECTIVE, BY_MARK_READY, BY_FINALIZE };

#define N 1024
static float w0[N], w1[N];

/* The first bucket reduced (bucket 0) holds the last parameter, w1. */
static int make_reducer(struct ddp_ctx *ctx, struct ddp_reducer **r)
{
	struct ddp_param p[] = {{"w0", w0, N, DDP_FLOAT32}, {"w1", w1, N, DDP_FLOAT32}};
	struct ddp_reducer_options o;

	ddp_reducer_options_init(&o);
	o.first_bucket_bytes = o.bucket_bytes = N * sizeof(float); /* a bucket each */
	o.broadcast_params = 0;
	return ddp_reducer_create(ctx, p, 2, &o, r);
}

/* Until the communication thread has seen rank 1 go (bounded: 120 s). */
static int wait_broken(struct ddp_ctx *ctx)
{
	for (int i = 0; i < 12000 && !atomic_load(&ctx->broken); i++)
		usleep(10000);
	return atomic_load(&ctx->broken);
}

static int rank0(struct ddp_ctx *ctx, struct ddp_reducer *r, enum first_report how)
{
	float x = 1;

	EXPECT(ddp_reducer_mark_ready(r, 1) == 0); /* bucket 0 leaves for rank 1 */
	if (how == BY_FINALIZE) {
		EXPECT(wait_broken(ctx) == DDP_EPEER);
		ddp_reducer_destroy(r); /* returns nothing: must not take the report */
		EXPECT(ddp_finalize(ctx) == DDP_EPEER);
		EXPECT_CAUSE();
		return 0;
	}
	switch (how) {
	case BY_FINISH:
		EXPECT(ddp_reducer_finish(r) == DDP_EPEER);
		break;
	case BY_COLLECTIVE:
		EXPECT(wait_broken(ctx) == DDP_EPEER);
		EXPECT(ddp_barrier(ctx) == DDP_EPEER);
		EXPECT_CAUSE();
		EXPECT_BROKEN(ddp_reducer_finish(r));
		break;
	case BY_MARK_READY:
		EXPECT(wait_broken(ctx) == DDP_EPEER);
		EXPECT(ddp_reducer_mark_ready(r, 0) == DDP_EPEER);
		EXPECT_CAUSE();
		EXPECT_BROKEN(ddp_reducer_finish(r));
		break;
	case BY_FINALIZE:
		break;
	}
	EXPECT_CAUSE();
	/* The next iteration, and everything after. */
	EXPECT_BROKEN(ddp_reducer_zero_grad(r));
	EXPECT_BROKEN(ddp_reducer_mark_ready(r, 1));
	EXPECT_BROKEN(ddp_reducer_mark_ready(r, 0));
	EXPECT_BROKEN(ddp_reducer_finish(r));
	EXPECT_BROKEN(ddp_all_reduce(ctx, &x, 1, DDP_FLOAT32, DDP_SUM));
	EXPECT_BROKEN(ddp_barrier(ctx));
	EXPECT_BROKEN(ddp_reducer_finish(r));
	ddp_reducer_destroy(r);
	/* Nothing new to meet while draining: the program saw the failure. */
	EXPECT(ddp_finalize(ctx) == 0);
	return 0;
}

static int run_rank(int rank, void *arg)
{
	struct ddp_options o;
	struct ddp_ctx *ctx;
	struct ddp_reducer *r;

	ddp_options_init(&o);
	o.backend = DDP_BACKEND_CPU;
	o.quiet = 1;
	EXPECT(ddp_init(&o, &ctx) == 0);
	EXPECT(make_reducer(ctx, &r) == 0);
	if (rank == 1)
		return 0; /* exits: its peer's bucket all_reduce fails */
	return rank0(ctx, r, *(enum first_report *)arg);
}

static void run(enum first_report how)
{
	int rc;

	unsetenv("TORCHELASTIC_ERROR_FILE"); /* libddp would write it */
	unsetenv("DDP_TIMEOUT");	     /* rank 1 is seen gone, long before */
	rc = ddp_spawn(run_rank, &how, 2, NULL, NULL);
	if (rc < 0)
		print_error("%s\n", ddp_errmsg());
	assert_int_equal(rc, 0);
}

/* ddp_reducer_finish returned DDP_EPEER again on every later iteration. */
static void test_finish_reports_the_failure_once_then_ebroken(void **state)
{
	run(BY_FINISH);
}

/* A collective met the failed bucket first and said DDP_EBROKEN (the root
 * cause was never returned), then ddp_reducer_finish said DDP_EPEER. */
static void test_a_collective_reports_a_failed_bucket_first(void **state)
{
	run(BY_COLLECTIVE);
}

/* The same with the next bucket's ddp_reducer_mark_ready first. */
static void test_mark_ready_reports_a_failed_bucket_first(void **state)
{
	run(BY_MARK_READY);
}

/* A program that destroys its reducer and finalizes after a bucket failed
 * unseen: ddp_reducer_destroy took the report, and ddp_finalize said 0. */
static void test_finalize_reports_a_failure_no_call_returned(void **state)
{
	run(BY_FINALIZE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_finish_reports_the_failure_once_then_ebroken),
		cmocka_unit_test(test_a_collective_reports_a_failed_bucket_first),
		cmocka_unit_test(test_mark_ready_reports_a_failed_bucket_first),
		cmocka_unit_test(test_finalize_reports_a_failure_no_call_returned),
	};
	return cmocka_run_group_tests_name("ddp_broken", tests, NULL, NULL);
}
