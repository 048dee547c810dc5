/* Unit tests for libddp's sampler: mt19937 and randperm draw exactly what
 * PyTorch draws (values recorded from Debian torch 1.13; tests/compat checks
 * many more against live torch), and DistributedSampler's arithmetic. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_internal.h"

static void test_mt19937_matches_the_standard(void **state)
{
	struct ddpi_mt19937 m;

	/* std::mt19937 with the default seed: the 10000th output is 4123659995. */
	ddpi_mt19937_seed(&m, 5489);
	uint32_t v = 0;
	for (int i = 0; i < 10000; i++)
		v = ddpi_mt19937_next(&m);
	assert_int_equal(v, 4123659995u);
	/* Seeds are taken modulo 2^32, like at::mt19937. */
	struct ddpi_mt19937 a, b;
	ddpi_mt19937_seed(&a, 5);
	ddpi_mt19937_seed(&b, (1ull << 32) + 5);
	for (int i = 0; i < 700; i++)
		assert_int_equal(ddpi_mt19937_next(&a), ddpi_mt19937_next(&b));
}

static void expect_perm(uint64_t n, uint64_t seed, const uint64_t *want)
{
	uint64_t got[16];
	assert_int_equal(ddp_randperm(n, seed, got), 0);
	for (uint64_t i = 0; i < n; i++)
		assert_int_equal(got[i], want[i]);
}

static void test_randperm_matches_torch(void **state)
{
	/* torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist() */
	static const uint64_t p10_0[] = {4, 1, 7, 5, 3, 9, 0, 8, 6, 2};
	static const uint64_t p7_42[] = {1, 6, 3, 5, 4, 0, 2};
	static const uint64_t p7_5[] = {1, 0, 4, 2, 6, 5, 3};
	static const uint64_t p5_m1[] = {1, 3, 4, 2, 0};
	expect_perm(10, 0, p10_0);
	expect_perm(7, 42, p7_42);
	expect_perm(7, 5, p7_5);
	expect_perm(7, (1ull << 32) + 5, p7_5);
	expect_perm(5, (uint64_t)-1, p5_m1); /* manual_seed(-1) */
}

static void test_randperm_is_a_permutation(void **state)
{
	enum { N = 100003 };
	uint64_t *p = malloc(N * sizeof(uint64_t));
	unsigned char *seen = calloc(N, 1);
	assert_non_null(p);
	assert_non_null(seen);
	assert_int_equal(ddp_randperm(N, 123, p), 0);
	for (int i = 0; i < N; i++) {
		assert_true(p[i] < N);
		assert_false(seen[p[i]]);
		seen[p[i]] = 1;
	}
	assert_int_equal(ddp_randperm(0, 1, NULL), 0);
	free(p);
	free(seen);
}

static void test_sampler_sizes_follow_torch(void **state)
{
	struct ddp_sampler s;

	assert_int_equal(ddp_sampler_init(&s, 10, 3, 0, 1, 0, 0), 0);
	assert_int_equal(s.num_samples, 4); /* ceil(10 / 3) */
	assert_int_equal(s.total_size, 12);
	assert_int_equal(ddp_sampler_init(&s, 10, 3, 0, 1, 0, 1), 0);
	assert_int_equal(s.num_samples, 3); /* drop_last: ceil((10 - 3) / 3) */
	assert_int_equal(ddp_sampler_init(&s, 12, 3, 2, 1, 0, 1), 0);
	assert_int_equal(s.num_samples, 4); /* divisible: drop_last changes nothing */
	assert_int_equal(ddp_sampler_init(&s, 2, 4, 3, 0, 0, 1), 0);
	assert_int_equal(s.num_samples, 0); /* fewer samples than replicas */
	assert_int_equal(ddp_sampler_init(&s, 0, 4, 3, 1, 0, 0), 0);
	assert_int_equal(s.num_samples, 0);
	assert_int_equal(ddp_sampler_init(&s, 10, 0, 0, 1, 0, 0), -EINVAL);
	assert_int_equal(ddp_sampler_init(&s, 10, 2, 2, 1, 0, 0), -EINVAL);
	assert_int_equal(ddp_sampler_init(&s, 10, 2, -1, 1, 0, 0), -EINVAL);
}

static void test_sampler_indices_match_torch(void **state)
{
	struct ddp_sampler s;
	uint64_t out[8];

	/* list(DistributedSampler(range(10), num_replicas=3, rank=1, seed=7)) */
	static const uint64_t a[] = {0, 1, 6, 5};
	assert_int_equal(ddp_sampler_init(&s, 10, 3, 1, 1, 7, 0), 0);
	assert_int_equal(ddp_sampler_indices(&s, out), 0);
	assert_memory_equal(out, a, sizeof(a));
	/* replicas=4, rank=3, seed=1, drop_last=True, set_epoch(2) */
	static const uint64_t b[] = {7, 9};
	assert_int_equal(ddp_sampler_init(&s, 10, 4, 3, 1, 1, 1), 0);
	ddp_sampler_set_epoch(&s, 2);
	assert_int_equal(ddp_sampler_indices(&s, out), 0);
	assert_memory_equal(out, b, sizeof(b));
	/* range(3), 8 replicas, rank 6, no shuffle: padding wraps around twice */
	assert_int_equal(ddp_sampler_init(&s, 3, 8, 6, 0, 0, 0), 0);
	assert_int_equal(ddp_sampler_indices(&s, out), 0);
	assert_int_equal(s.num_samples, 1);
	assert_int_equal(out[0], 0);
}

static void test_ranks_partition_the_padded_epoch(void **state)
{
	enum { LEN = 1001, REPL = 4 };
	unsigned counts[LEN] = {0};
	for (int r = 0; r < REPL; r++) {
		struct ddp_sampler s;
		assert_int_equal(ddp_sampler_init(&s, LEN, REPL, r, 1, 9, 0), 0);
		ddp_sampler_set_epoch(&s, 3);
		uint64_t *out = malloc(s.num_samples * sizeof(uint64_t));
		assert_int_equal(ddp_sampler_indices(&s, out), 0);
		for (uint64_t i = 0; i < s.num_samples; i++)
			counts[out[i]]++;
		free(out);
	}
	/* Every sample once, plus 3 padded repeats (1004 = 4 * 251). */
	unsigned total = 0, twice = 0;
	for (int i = 0; i < LEN; i++) {
		assert_true(counts[i] == 1 || counts[i] == 2);
		total += counts[i];
		twice += counts[i] == 2;
	}
	assert_int_equal(total, 1004);
	assert_int_equal(twice, 3);
}

static void test_epochs_reshuffle(void **state)
{
	struct ddp_sampler s;
	uint64_t a[50], b[50];
	assert_int_equal(ddp_sampler_init(&s, 100, 2, 0, 1, 0, 0), 0);
	assert_int_equal(ddp_sampler_indices(&s, a), 0);
	ddp_sampler_set_epoch(&s, 1);
	assert_int_equal(ddp_sampler_indices(&s, b), 0);
	assert_memory_not_equal(a, b, sizeof(a));
	/* seed + epoch is what seeds the generator */
	struct ddp_sampler t;
	assert_int_equal(ddp_sampler_init(&t, 100, 2, 0, 1, 1, 0), 0);
	assert_int_equal(ddp_sampler_indices(&t, a), 0);
	assert_memory_equal(a, b, sizeof(a));
}

/* A dataset so large that padding it to a multiple of the ranks does not fit
 * in 64 bits: -EOVERFLOW. len + n - 1 wrapped around and num_samples came out
 * 0, an empty epoch with no error. NULL arguments fail with a message. */
static void test_sampler_refuses_what_does_not_fit(void **state)
{
	struct ddp_sampler s;
	uint64_t out[2];

	assert_int_equal(ddp_sampler_init(&s, UINT64_MAX, 2, 0, 0, 0, 0), -EOVERFLOW);
	assert_non_null(strstr(ddp_errmsg(), "64 bits"));
	/* divisible: no padding, it fits */
	assert_int_equal(ddp_sampler_init(&s, UINT64_MAX, 3, 1, 0, 0, 0), 0);
	assert_true(s.num_samples == UINT64_MAX / 3 && s.total_size == UINT64_MAX);
	assert_int_equal(ddp_sampler_init(&s, UINT64_MAX - 1, 2, 0, 0, 0, 0), 0);
	assert_true(s.num_samples == UINT64_MAX / 2);
	/* drop_last truncates: it fits */
	assert_int_equal(ddp_sampler_init(&s, UINT64_MAX, 2, 1, 0, 0, 1), 0);
	assert_true(s.num_samples == UINT64_MAX / 2);
	assert_int_equal(ddp_sampler_init(&s, UINT64_MAX, 1, 0, 1, 0, 0), 0);
	assert_int_equal(ddp_sampler_indices(&s, out), -ENOMEM);
	assert_non_null(strstr(ddp_errmsg(), "permutation"));
	assert_int_equal(ddp_sampler_init(NULL, 10, 1, 0, 0, 0, 0), -EINVAL);
	assert_non_null(strstr(ddp_errmsg(), "NULL"));
	assert_int_equal(ddp_sampler_indices(NULL, out), -EINVAL);
	ddp_sampler_set_epoch(NULL, 1);
	assert_int_equal(ddp_sampler_init(&s, 10, 2, 0, 0, 0, 0), 0);
	assert_int_equal(ddp_sampler_indices(&s, NULL), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mt19937_matches_the_standard),
		cmocka_unit_test(test_randperm_matches_torch),
		cmocka_unit_test(test_randperm_is_a_permutation),
		cmocka_unit_test(test_sampler_sizes_follow_torch),
		cmocka_unit_test(test_sampler_indices_match_torch),
		cmocka_unit_test(test_ranks_partition_the_padded_epoch),
		cmocka_unit_test(test_epochs_reshuffle),
		cmocka_unit_test(test_sampler_refuses_what_does_not_fit),
	};
	return cmocka_run_group_tests_name("ddp_sampler", tests, NULL, NULL);
}
