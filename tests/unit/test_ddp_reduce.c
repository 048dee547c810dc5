/* Unit test of the integer reduction kernels' arithmetic: a sum past the
 * type's range wraps around (two's complement, as it always did) without
 * signed overflow, which is undefined behaviour (an optimizer may assume it
 * never happens). reduce.c is compiled into this test with signed overflow
 * trapping (Makefile), its exported names renamed beside libddp's own. */
#define ddpi_reduce    trapping_reduce
#define ddpi_scale_div trapping_scale_div
#include "reduce.c"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#define N 100 /* past a vector's width, and a tail */

static void test_int32_sums_wrap_around_without_overflow(void **state)
{
	int32_t a[N], b[N], out[N];
	const void *src[] = {a, b};

	for (int i = 0; i < N; i++) {
		a[i] = INT32_MAX - i;
		b[i] = i + 1 + (i % 3);
	}
	trapping_reduce(DDP_INT32, DDP_SUM, out, src, 2, N, 2);
	for (int i = 0; i < N; i++)
		assert_int_equal(out[i], INT32_MIN + (i % 3));
	trapping_reduce(DDP_INT32, DDP_SUM, a, src, 2, N, 2); /* in place */
	assert_int_equal(a[0], INT32_MIN);
}

static void test_int64_sums_wrap_around_without_overflow(void **state)
{
	int64_t a[N], b[N], out[N];
	const void *src[] = {a, b};

	for (int i = 0; i < N; i++) {
		a[i] = INT64_MIN + i;
		b[i] = -(int64_t)i - 1;
	}
	trapping_reduce(DDP_INT64, DDP_SUM, out, src, 2, N, 2);
	for (int i = 0; i < N; i++)
		assert_true(out[i] == INT64_MAX);
	/* the average divides the wrapped sum (integers: truncated) */
	trapping_reduce(DDP_INT64, DDP_AVG, out, src, 2, N, 2);
	for (int i = 0; i < N; i++)
		assert_true(out[i] == INT64_MAX / 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_int32_sums_wrap_around_without_overflow),
		cmocka_unit_test(test_int64_sums_wrap_around_without_overflow),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
