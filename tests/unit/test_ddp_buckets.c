/* Unit tests for libddp's gradient buckets: the assignment PyTorch's DDP makes
 * (checked against torch's own _compute_bucket_assignment_by_size in
 * tests/compat), and the reducer's bookkeeping: buckets launch strictly in
 * order once all their gradients are ready, finish names a parameter never
 * marked, no_sync skips communication, gradients are views into buckets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_internal.h"

static struct ddp_param P(size_t count, enum ddp_dtype dt) {
	static float dummy;
	return (struct ddp_param){NULL, &dummy, count, dt};
}

/* Bucket b as a list of parameter indices, compared to want (-1 terminated). */
static void
expect_bucket(const struct ddpi_bucket_plan *pl, size_t b, const int *want)
{
	size_t n = 0;
	while (want[n] >= 0)
		n++;
	assert_int_equal(pl->start[b + 1] - pl->start[b], n);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(pl->order[pl->start[b] + i], want[i]);
}

static void test_first_bucket_small_then_cap_then_reversed(void **state)
{
	/* torch: [[0], [1, 2], [3]] with caps [1 MiB, 25 MiB]; DDP reduces them
	 * reversed, so bucket 0 is [3]. */
	struct ddp_param p[] = {P(300000, DDP_FLOAT32), P(5000000, DDP_FLOAT32),
				P(2000000, DDP_FLOAT32), P(10, DDP_FLOAT32)};
	struct ddpi_bucket_plan pl;
	assert_int_equal(ddpi_bucket_plan(p, 4, 1 << 20, 25 << 20, &pl), 0);
	assert_int_equal(pl.nbuckets, 3);
	expect_bucket(&pl, 0, (int[]){3, -1});
	expect_bucket(&pl, 1, (int[]){1, 2, -1});
	expect_bucket(&pl, 2, (int[]){0, -1});
	assert_int_equal(pl.bytes[0], 40);
	assert_int_equal(pl.bytes[1], 28000000);
	assert_int_equal(pl.bytes[2], 1200000);
	ddpi_bucket_plan_free(&pl);
}

static void test_dtypes_never_share_a_bucket(void **state)
{
	/* torch: [[0, 2], [1]] -> reversed [[1], [0, 2]] */
	struct ddp_param p[] = {P(10, DDP_FLOAT32), P(10, DDP_FLOAT64), P(10, DDP_FLOAT32)};
	struct ddpi_bucket_plan pl;
	assert_int_equal(ddpi_bucket_plan(p, 3, 1 << 20, 25 << 20, &pl), 0);
	assert_int_equal(pl.nbuckets, 2);
	expect_bucket(&pl, 0, (int[]){1, -1});
	expect_bucket(&pl, 1, (int[]){0, 2, -1});
	ddpi_bucket_plan_free(&pl);
}

static void test_each_dtype_has_its_own_first_cap(void **state)
{
	/* 600 KiB halves fill the f16 first bucket only after two parameters;
	 * the f32 parameter in between starts its own small first bucket. */
	struct ddp_param p[] = {P(300 * 1024, DDP_FLOAT16), P(100, DDP_FLOAT32),
				P(300 * 1024, DDP_FLOAT16), P(300 * 1024, DDP_FLOAT16)};
	struct ddpi_bucket_plan pl;
	assert_int_equal(ddpi_bucket_plan(p, 4, 1 << 20, 25 << 20, &pl), 0);
	/* f16: [0, 2] closes at 1.2 MiB, [3] stays open; f32: [1]. Sorted by
	 * smallest index: [0,2], [1], [3]; reversed. */
	assert_int_equal(pl.nbuckets, 3);
	expect_bucket(&pl, 0, (int[]){3, -1});
	expect_bucket(&pl, 1, (int[]){1, -1});
	expect_bucket(&pl, 2, (int[]){0, 2, -1});
	ddpi_bucket_plan_free(&pl);
}

static void test_bad_parameters_are_refused(void **state)
{
	struct ddp_param p[] = {P(10, (enum ddp_dtype)42)};
	struct ddpi_bucket_plan pl;
	assert_int_equal(ddpi_bucket_plan(p, 1, 1 << 20, 25 << 20, &pl), -EINVAL);
	assert_int_equal(ddpi_bucket_plan(p, 0, 1 << 20, 25 << 20, &pl), -EINVAL);
}

/* ---- the reducer against a recording backend ------------------------------- */

static void *launched[16];
static int nlaunched, nwaits;

static int rec_async(void *be, void *buf, size_t count, enum ddp_dtype dt, enum ddp_op op)
{
	assert_int_equal(op, DDP_AVG);
	launched[nlaunched++] = buf;
	return 0;
}

static int rec_wait(void *be, int64_t deadline)
{
	nwaits++;
	return 0;
}

static struct ddp_ctx *recording_ctx(struct ddpi_backend_ops *ops)
{
	struct ddp_ctx *ctx;
	struct ddp_options o;

	unsetenv("RANK");
	unsetenv("WORLD_SIZE");
	setenv("DDP_QUIET", "1", 1);
	ddp_options_init(&o);
	o.backend = DDP_BACKEND_CPU;
	assert_int_equal(ddp_init(&o, &ctx), 0);
	*ops = *ctx->ops;
	ops->all_reduce_async = rec_async;
	ops->wait_async = rec_wait;
	ctx->ops = ops;
	nlaunched = nwaits = 0;
	return ctx;
}

static void test_buckets_launch_in_order_when_complete(void **state)
{
	struct ddpi_backend_ops ops;
	struct ddp_ctx *ctx = recording_ctx(&ops);
	static float a[100], b[100], c[100];
	struct ddp_param p[] = {
		{"a", a, 100, DDP_FLOAT32}, {"b", b, 100, DDP_FLOAT32}, {"c", c, 100, DDP_FLOAT32}};
	struct ddp_reducer_options o;
	struct ddp_reducer *r;

	ddp_reducer_options_init(&o);
	o.first_bucket_bytes = o.bucket_bytes = 400; /* one parameter per bucket */
	assert_int_equal(ddp_reducer_create(ctx, p, 3, &o, &r), 0);
	assert_int_equal(ddp_reducer_num_buckets(r), 3);
	/* bucket 0 holds c (the last registered): marking a first launches nothing */
	assert_int_equal(ddp_reducer_mark_ready(r, 0), 0);
	assert_int_equal(nlaunched, 0);
	assert_int_equal(ddp_reducer_mark_ready(r, 2), 0);
	assert_int_equal(nlaunched, 1);
	assert_ptr_equal(launched[0], ddp_reducer_grad(r, 2));
	/* b completes bucket 1, and bucket 2 (a) was waiting behind it */
	assert_int_equal(ddp_reducer_mark_ready(r, 1), 0);
	assert_int_equal(nlaunched, 3);
	assert_ptr_equal(launched[1], ddp_reducer_grad(r, 1));
	assert_ptr_equal(launched[2], ddp_reducer_grad(r, 0));
	assert_int_equal(ddp_reducer_mark_ready(r, 1), -EALREADY);
	assert_int_equal(ddp_reducer_finish(r), 0);
	assert_true(nwaits >= 1);
	ddp_reducer_destroy(r);
	ddp_finalize(ctx);
}

static void test_finish_names_a_parameter_never_marked(void **state)
{
	struct ddpi_backend_ops ops;
	struct ddp_ctx *ctx = recording_ctx(&ops);
	static double w[10], bias[2];
	struct ddp_param p[] = {{"fc.weight", w, 10, DDP_FLOAT64},
				{"fc.bias", bias, 2, DDP_FLOAT64}};
	struct ddp_reducer *r;

	assert_int_equal(ddp_reducer_create(ctx, p, 2, NULL, &r), 0);
	assert_int_equal(ddp_reducer_mark_ready(r, 1), 0);
	assert_int_equal(ddp_reducer_finish(r), DDP_ENOTREADY);
	assert_non_null(strstr(ddp_errmsg(), "fc.weight"));
	assert_int_equal(nlaunched, 0); /* the one bucket never completed */
	/* the iteration was reset: a full one works */
	assert_int_equal(ddp_reducer_mark_ready(r, 1), 0);
	assert_int_equal(ddp_reducer_mark_ready(r, 0), 0);
	assert_int_equal(ddp_reducer_finish(r), 0);
	assert_int_equal(nlaunched, 1);
	ddp_reducer_destroy(r);
	ddp_finalize(ctx);
}

/* ddp_reducer_set_sync(r, 2) returned 0 (taken for 1): the header defines
 * 0 and 1 only, and every other option is checked. */
static void test_sync_is_0_or_1(void **state)
{
	struct ddpi_backend_ops ops;
	struct ddp_ctx *ctx = recording_ctx(&ops);
	static float x[8];
	struct ddp_param p[] = {{"x", x, 8, DDP_FLOAT32}};
	struct ddp_reducer *r;

	assert_int_equal(ddp_reducer_create(ctx, p, 1, NULL, &r), 0);
	assert_int_equal(ddp_reducer_set_sync(r, 0), 0);
	assert_int_equal(ddp_reducer_set_sync(r, 2), -EINVAL);
	assert_non_null(strstr(ddp_errmsg(), "sync must be 0 (no_sync) or 1, not 2"));
	assert_int_equal(ddp_reducer_set_sync(r, -1), -EINVAL);
	/* refused: the setting is still no_sync */
	assert_int_equal(ddp_reducer_mark_ready(r, 0), 0);
	assert_int_equal(ddp_reducer_finish(r), 0);
	assert_int_equal(nlaunched, 0);
	assert_int_equal(ddp_reducer_set_sync(r, 1), 0);
	assert_int_equal(ddp_reducer_mark_ready(r, 0), 0);
	assert_int_equal(nlaunched, 1);
	assert_int_equal(ddp_reducer_finish(r), 0);
	ddp_reducer_destroy(r);
	ddp_finalize(ctx);
}

static void test_no_sync_skips_communication(void **state)
{
	struct ddpi_backend_ops ops;
	struct ddp_ctx *ctx = recording_ctx(&ops);
	static float x[8];
	struct ddp_param p[] = {{"x", x, 8, DDP_FLOAT32}};
	struct ddp_reducer *r;

	assert_int_equal(ddp_reducer_create(ctx, p, 1, NULL, &r), 0);
	assert_int_equal(ddp_reducer_set_sync(r, 0), 0);
	assert_int_equal(ddp_reducer_mark_ready(r, 0), 0);
	assert_int_equal(ddp_reducer_finish(r), 0);
	assert_int_equal(ddp_reducer_finish(r), 0); /* unmarked is fine without sync */
	assert_int_equal(nlaunched, 0);
	assert_int_equal(ddp_reducer_set_sync(r, 1), 0);
	assert_int_equal(ddp_reducer_mark_ready(r, 0), 0);
	assert_int_equal(nlaunched, 1);
	assert_int_equal(ddp_reducer_set_sync(r, 0), -EBUSY); /* mid-iteration */
	assert_int_equal(ddp_reducer_finish(r), 0);
	ddp_reducer_destroy(r);
	ddp_finalize(ctx);
}

/* Turning sync on after gradients were marked with it off once returned 0,
 * and finish then left the buckets completed meanwhile unreduced: each rank
 * kept its own gradients, silently. Either switch waits for finish. */
static void test_sync_switches_only_between_iterations(void **state)
{
	struct ddpi_backend_ops ops;
	struct ddp_ctx *ctx = recording_ctx(&ops);
	static float x[8], y[8];
	struct ddp_param p[] = {{"x", x, 8, DDP_FLOAT32}, {"y", y, 8, DDP_FLOAT32}};
	struct ddp_reducer_options o;
	struct ddp_reducer *r;

	ddp_reducer_options_init(&o);
	o.first_bucket_bytes = o.bucket_bytes = 32; /* one bucket each */
	assert_int_equal(ddp_reducer_create(ctx, p, 2, &o, &r), 0);
	assert_int_equal(ddp_reducer_num_buckets(r), 2);
	assert_int_equal(ddp_reducer_set_sync(r, 0), 0);
	assert_int_equal(ddp_reducer_mark_ready(r, 1), 0);
	assert_int_equal(ddp_reducer_set_sync(r, 1), -EBUSY);
	assert_non_null(strstr(ddp_errmsg(), "1 of 2 gradients marked ready"));
	assert_int_equal(ddp_reducer_set_sync(r, 0), 0); /* no change: fine */
	assert_int_equal(ddp_reducer_mark_ready(r, 0), 0);
	assert_int_equal(ddp_reducer_finish(r), 0);
	assert_int_equal(nlaunched, 0);
	/* Between iterations it switches; then every bucket is reduced. */
	assert_int_equal(ddp_reducer_set_sync(r, 1), 0);
	assert_int_equal(ddp_reducer_mark_ready(r, 1), 0); /* bucket 0 launches */
	assert_int_equal(nlaunched, 1);
	assert_int_equal(ddp_reducer_set_sync(r, 0), -EBUSY);
	assert_int_equal(ddp_reducer_mark_ready(r, 0), 0);
	assert_int_equal(ddp_reducer_finish(r), 0);
	assert_int_equal(nlaunched, 2);
	ddp_reducer_destroy(r);
	ddp_finalize(ctx);
}

/* A reducer that outlives its context has no buckets left to describe. */
static void test_a_finalized_reducer_reports_no_buckets(void **state)
{
	struct ddpi_backend_ops ops;
	struct ddp_ctx *ctx = recording_ctx(&ops);
	static float x[8];
	struct ddp_param p[] = {{"x", x, 8, DDP_FLOAT32}};
	struct ddp_reducer *r;
	size_t bytes = 7;

	assert_int_equal(ddp_reducer_create(ctx, p, 1, NULL, &r), 0);
	assert_int_equal(ddp_reducer_num_buckets(r), 1);
	ddp_finalize(ctx);
	assert_int_equal(ddp_reducer_num_buckets(r), 0);
	assert_int_equal(ddp_reducer_bucket_info(r, 0, &bytes, NULL), -EINVAL);
	assert_non_null(strstr(ddp_errmsg(), "finalized"));
	assert_int_equal(bytes, 7);
	ddp_reducer_destroy(r);
}

static void test_grads_are_zeroed_views_of_buckets(void **state)
{
	struct ddpi_backend_ops ops;
	struct ddp_ctx *ctx = recording_ctx(&ops);
	static float a[4], b[6];
	struct ddp_param p[] = {{"a", a, 4, DDP_FLOAT32}, {"b", b, 6, DDP_FLOAT32}};
	struct ddp_reducer *r;
	size_t bytes = 0, np = 0;

	assert_int_equal(ddp_reducer_create(ctx, p, 2, NULL, &r), 0);
	assert_int_equal(ddp_reducer_bucket_info(r, 0, &bytes, &np), 0);
	assert_int_equal(bytes, 40);
	assert_int_equal(np, 2);
	float *ga = ddp_reducer_grad(r, 0), *gb = ddp_reducer_grad(r, 1);
	assert_ptr_equal(gb, ga + 4); /* one buffer, registration order */
	for (int i = 0; i < 4; i++)
		assert_true(ga[i] == 0.0f);
	ga[1] = 3;
	assert_int_equal(ddp_reducer_zero_grad(r), 0);
	assert_true(ga[1] == 0.0f);
	assert_null(ddp_reducer_grad(r, 2));
	assert_int_equal(ddp_reducer_bucket_info(r, 1, NULL, NULL), -EINVAL);
	ddp_reducer_destroy(r);
	ddp_finalize(ctx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_first_bucket_small_then_cap_then_reversed),
		cmocka_unit_test(test_dtypes_never_share_a_bucket),
		cmocka_unit_test(test_each_dtype_has_its_own_first_cap),
		cmocka_unit_test(test_bad_parameters_are_refused),
		cmocka_unit_test(test_buckets_launch_in_order_when_complete),
		cmocka_unit_test(test_finish_names_a_parameter_never_marked),
		cmocka_unit_test(test_sync_is_0_or_1),
		cmocka_unit_test(test_no_sync_skips_communication),
		cmocka_unit_test(test_grads_are_zeroed_views_of_buckets),
		cmocka_unit_test(test_sync_switches_only_between_iterations),
		cmocka_unit_test(test_a_finalized_reducer_reports_no_buckets),
	};
	return cmocka_run_group_tests_name("ddp_buckets", tests, NULL, NULL);
}
