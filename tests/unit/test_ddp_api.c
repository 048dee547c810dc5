/* Unit tests for libddp's public API used wrongly, in a world of one (no
 * launcher): each misuse gets its documented error and a clear message, never
 * a crash, a hang or a silent wrong result. What needs several ranks is in
 * tests/e2e/test_ddp_misuse.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_internal.h"
#include "util.h"

static struct ddp_ctx *world_of_one(const struct ddp_options *o)
{
	static const char *const launcher[] = {
		"RANK",
		"WORLD_SIZE",
		"LOCAL_RANK",
		"LOCAL_WORLD_SIZE",
		"GROUP_RANK",
		"MASTER_ADDR",
		"MASTER_PORT",
		"TORCHELASTIC_RUN_ID",
		"DDP_TIMEOUT",
		"DDP_STORE",
		"TORCHELASTIC_RESTART_COUNT",
	};
	struct ddp_options d;
	struct ddp_ctx *ctx = NULL;

	for (size_t i = 0; i < sizeof(launcher) / sizeof(launcher[0]); i++)
		unsetenv(launcher[i]);
	if (o)
		d = *o;
	else
		ddp_options_init(&d);
	d.backend = DDP_BACKEND_CPU;
	d.quiet = 1;
	assert_int_equal(ddp_init(&d, &ctx), 0);
	return ctx;
}

/* "Forever" as INT64_MAX: now + timeout overflowed into the past, and every
 * collective that had to wait for a peer failed at once with -ETIMEDOUT. */
static void test_a_huge_timeout_means_a_far_deadline(void **state)
{
	struct ddp_options o;
	struct ddp_ctx *ctx;

	ddp_options_init(&o);
	o.timeout_ms = INT64_MAX;
	ctx = world_of_one(&o);
	assert_true(ddpi_deadline(ctx) > util_now_ms() + 1000LL * 1000 * 1000);
	assert_int_equal(ddp_set_timeout(ctx, INT64_MAX), 0);
	assert_true(ddpi_deadline(ctx) > util_now_ms() + 1000LL * 1000 * 1000);
	assert_int_equal(ddp_set_timeout(ctx, INT64_MAX - 1), 0);
	assert_true(ddpi_deadline(ctx) > util_now_ms());
	assert_int_equal(ddp_set_timeout(ctx, 0), -EINVAL);
	assert_int_equal(ddp_barrier(ctx), 0);
	assert_int_equal(ddp_finalize(ctx), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_a_huge_timeout_means_a_far_deadline),
	};
	return cmocka_run_group_tests_name("ddp_api", tests, NULL, NULL);
}
