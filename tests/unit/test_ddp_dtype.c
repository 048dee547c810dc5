/* Unit tests for libddp's dtype conversions and reduction kernels: float16 and
 * bfloat16 round to nearest even exactly like a float64 reference does (scalar
 * and vectorized paths), and reductions over many ranks' buffers give the
 * correctly rounded float64 result (or within one ulp where float32
 * accumulation itself must round). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_internal.h"

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static double f16_value(uint16_t h)
{
	int e = (h >> 10) & 0x1f, m = h & 0x3ff;
	double v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
	return (h & 0x8000) ? -v : v;
}

/* Reference: the float16 nearest to x (ties to the even encoding), by search
 * over the finite values; beyond 65520 it is infinity. */
static uint16_t ref_f16(double x)
{
	uint16_t sign = signbit(x) ? 0x8000 : 0;
	double a = fabs(x);
	if (a >= 65520.0)
		return sign | 0x7c00;
	int lo = 0, hi = 0x7bff; /* positive finite encodings are ordered by value */
	while (lo < hi) {
		int mid = (lo + hi + 1) / 2;
		if (f16_value((uint16_t)mid) <= a)
			lo = mid;
		else
			hi = mid - 1;
	}
	uint16_t best = (uint16_t)lo;
	if (lo < 0x7bff) {
		double d0 = a - f16_value((uint16_t)lo), d1 = f16_value((uint16_t)(lo + 1)) - a;
		if (d1 < d0 || (d1 == d0 && (lo & 1)))
			best = (uint16_t)(lo + 1);
	}
	return sign | best;
}

/* Reference bfloat16: x rounded to 8 significant bits in float64, then checked
 * against the float32 range. */
static uint16_t ref_bf16(double x)
{
	if (x == 0)
		return signbit(x) ? 0x8000 : 0;
	int e;
	double m = frexp(fabs(x), &e); /* m in [0.5, 1) */
	if (e - 1 < -126)	       /* subnormal bfloat16: fixed step 2^-133 */
		m = nearbyint(ldexp(fabs(x), 133)), e = -133;
	else
		m = nearbyint(ldexp(m, 8)), e -= 8; /* nearbyint: ties to even */
	double r = ldexp(m, e);
	float f = (float)r; /* exact: r has at most 8 significant bits */
	if (r >= 0x1.fffffep127 * (1 + 0x1p-9) || isinf(f))
		f = INFINITY;
	uint32_t u;
	memcpy(&u, &f, 4);
	return (uint16_t)((u >> 16) | (signbit(x) ? 0x8000 : 0));
}

static float random_f32(void)
{
	uint32_t u = (uint32_t)next();
	float f;
	/* Mostly values around half's and bfloat16's ranges, some anything. */
	if (u & 1)
		u = (u & 0x807fffff) | ((uint32_t)(100 + (next() % 45)) << 23);
	memcpy(&f, &u, 4);
	return isnan(f) ? 1.5f : f;
}

static void test_f16_roundtrip_every_value(void **state)
{
	for (uint32_t h = 0; h < 0x10000; h++) {
		float f = ddpi_f16_to_f32((uint16_t)h);
		uint16_t back = ddpi_f32_to_f16(f);
		if (((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff)) {
			assert_true(isnan(f));
			assert_true((back & 0x7c00) == 0x7c00 && (back & 0x3ff));
			continue;
		}
		assert_true((double)f == f16_value((uint16_t)h) || isinf(f));
		assert_int_equal(back, h);
	}
}

static void test_f16_rounding_matches_float64_reference(void **state)
{
	enum { N = 200000 };
	float *x = malloc(N * sizeof(float));
	uint16_t *bulk = malloc(N * sizeof(uint16_t));
	/* Ties and boundaries first: halfway points of neighbouring halves. */
	int k = 0;
	for (uint32_t h = 0; h < 0x7bff && k < N / 2; h += 7) {
		x[k++] = (float)((f16_value((uint16_t)h) + f16_value((uint16_t)(h + 1))) / 2);
		x[k++] = -(float)f16_value((uint16_t)h);
	}
	x[k++] = 65519.0f;
	x[k++] = 65520.0f;
	x[k++] = 0x1p-25f;
	x[k++] = 0x1.000002p-25f;
	while (k < N)
		x[k++] = random_f32();
	ddpi_f32_to_f16_n(bulk, x, N);
	for (int i = 0; i < N; i++) {
		uint16_t want = ref_f16((double)x[i]);
		if (ddpi_f32_to_f16(x[i]) != want || bulk[i] != want)
			fail_msg("f16(%a): scalar %04x bulk %04x want %04x", (double)x[i],
				 ddpi_f32_to_f16(x[i]), bulk[i], want);
	}
	free(x);
	free(bulk);
}

static void test_bf16_rounding_matches_float64_reference(void **state)
{
	enum { N = 200000 };
	float *x = malloc(N * sizeof(float));
	uint16_t *bulk = malloc(N * sizeof(uint16_t));
	int k = 0;
	for (uint32_t b = 0; b < 0x7f7f && k < N / 2; b += 5) { /* exact ties */
		uint32_t u = (b << 16) | 0x8000;
		memcpy(&x[k++], &u, 4);
	}
	x[k++] = 0x1.fffffep127f; /* rounds up to infinity */
	while (k < N)
		x[k++] = random_f32();
	ddpi_f32_to_bf16_n(bulk, x, N);
	for (int i = 0; i < N; i++) {
		uint16_t want = ref_bf16((double)x[i]);
		if (ddpi_f32_to_bf16(x[i]) != want || bulk[i] != want)
			fail_msg("bf16(%a): scalar %04x bulk %04x want %04x", (double)x[i],
				 ddpi_f32_to_bf16(x[i]), bulk[i], want);
		assert_true(ddpi_bf16_to_f32(want) == (float)ddpi_bf16_to_f32(bulk[i]));
	}
	uint32_t nan = 0x7f800001;
	float fn;
	memcpy(&fn, &nan, 4);
	assert_true(isnan(ddpi_bf16_to_f32(ddpi_f32_to_bf16(fn))));
	free(x);
	free(bulk);
}

/* Reduce nsrc random half buffers; compare with the float64 reference. */
static void half_reduce_case(enum ddp_dtype dt, enum ddp_op op, int nsrc, int narrow)
{
	enum { N = 5000 };
	uint16_t *src[8], out[N];
	const void *cs[8];
	int exact = 0, within = 0;

	for (int s = 0; s < nsrc; s++) {
		src[s] = malloc(N * 2);
		for (int i = 0; i < N; i++) {
			/* narrow: magnitudes in [2^-6, 2^3], so a float32 sum of up
			 * to 8 of them is exact and the result must be correctly rounded */
			double v = narrow ? ldexp(1 + (double)(next() % 1024) / 1024,
						  (int)(next() % 10) - 6)
					  : ldexp((double)(next() % 2048), (int)(next() % 20) - 20);
			if (next() & 1)
				v = -v;
			src[s][i] = dt == DDP_FLOAT16 ? ref_f16(v) : ref_bf16(v);
		}
		cs[s] = src[s];
	}
	ddpi_reduce(dt, op, out, cs, nsrc, N, nsrc);
	for (int i = 0; i < N; i++) {
		double acc = op == DDP_MIN ? INFINITY : op == DDP_MAX ? -INFINITY : 0;
		for (int s = 0; s < nsrc; s++) {
			double v = dt == DDP_FLOAT16 ? f16_value(src[s][i])
						     : ddpi_bf16_to_f32(src[s][i]);
			acc = op == DDP_MIN ? fmin(acc, v) : op == DDP_MAX ? fmax(acc, v) : acc + v;
		}
		if (op == DDP_AVG)
			acc /= nsrc;
		uint16_t want = dt == DDP_FLOAT16 ? ref_f16(acc) : ref_bf16(acc);
		if (out[i] == want) {
			exact++;
			continue;
		}
		/* One ulp of slack where float32 accumulation has already rounded. */
		int d = (int)(out[i] & 0x7fff) - (int)(want & 0x7fff);
		if ((out[i] & 0x8000) == (want & 0x8000) && (d == 1 || d == -1) &&
		    !(narrow && (op == DDP_SUM || op == DDP_MIN || op == DDP_MAX)))
			within++;
		else
			fail_msg("dtype %d op %d nsrc %d [%d]: got %04x want %04x (%.17g)", dt, op,
				 nsrc, i, out[i], want, acc);
	}
	assert_true(exact >= N * 99 / 100);
	for (int s = 0; s < nsrc; s++)
		free(src[s]);
}

static void test_half_reductions_round_like_float64(void **state)
{
	for (int dt = DDP_FLOAT16; dt <= DDP_BFLOAT16; dt++)
		for (int op = DDP_SUM; op <= DDP_MAX; op++)
			for (int n = 2; n <= 8; n *= 2) {
				half_reduce_case(dt, op, n, 1);
				half_reduce_case(dt, op, n, 0);
			}
}

/* The rounding rule on its edges, written out: NaNs of both signs stay NaN
 * and quiet, the largest finite float32 rounds up to infinity, ties go to
 * even. */
static void test_bf16_rounding_edges(void **state)
{
	static const struct {
		uint32_t f;
		uint16_t h;
	} cases[] = {
		{0x7f800001, 0x7fc0}, {0xff800001, 0xffc0}, {0x7fffffff, 0x7fff},
		{0xffffffff, 0xffff}, {0x7fc00000, 0x7fc0}, {0x7f7fffff, 0x7f80},
		{0xff7fffff, 0xff80}, {0x3f808000, 0x3f80}, {0x3f818000, 0x3f82},
		{0x3f808001, 0x3f81}, {0x80000000, 0x8000}, {0x00000001, 0x0000},
	};
	enum { NC = sizeof(cases) / sizeof(cases[0]), N = 9 * NC + 5 };
	float in[N];
	uint16_t bulk[N];

	for (size_t k = 0; k < NC; k++) {
		float f;
		memcpy(&f, &cases[k].f, 4);
		assert_int_equal(ddpi_f32_to_bf16(f), cases[k].h);
	}
	/* The bulk conversion's vector loop too (one element alone would only
	 * reach its scalar tail): every case at every lane, in one call. */
	for (size_t i = 0; i < N; i++)
		memcpy(&in[i], &cases[i % NC].f, 4);
	ddpi_f32_to_bf16_n(bulk, in, N);
	for (size_t i = 0; i < N; i++)
		assert_int_equal(bulk[i], cases[i % NC].h);
}

static int bf16_is_nan(uint16_t h)
{
	return (h & 0x7fff) > 0x7f80;
}

/* bfloat16 sources summed and averaged (reduce.c's kernels in registers, 2
 * to 4 sources): every element is the float32 sum, in source order (divided
 * by the divisor, in float32, for an average), rounded once, over any bits
 * (NaN, infinities, zeros of both signs, subnormals), into dst alone and into
 * dst aliasing the first, the second or the last source. The divisor differs
 * from the number of sources (an average over nodes divides by the world). */
static void test_bf16_sums_are_the_float32_sums_rounded(void **state)
{
	enum { N = 65536 + 37 };
	uint16_t *s[4], *want = malloc(N * 2), *out = malloc(N * 2);

	assert_non_null(want && out);
	for (int k = 0; k < 4; k++)
		assert_non_null(s[k] = malloc(N * 2));
	for (int op = DDP_SUM; op <= DDP_AVG; op++) /* adjacent */
		for (int nsrc = 2; nsrc <= 4; nsrc++)
			for (int round = 0; round < 4; round++) {
				int div = op == DDP_AVG ? nsrc + round : nsrc;
				for (int i = 0; i < N; i++) {
					s[0][i] = (uint16_t)i; /* every bit pattern */
					for (int k = 1; k < nsrc; k++)
						s[k][i] = (uint16_t)next();
					float acc = ddpi_bf16_to_f32(s[0][i]);
					for (int k = 1; k < nsrc; k++)
						acc += ddpi_bf16_to_f32(s[k][i]);
					if (op == DDP_AVG)
						acc /= (float)div;
					want[i] = ddpi_f32_to_bf16(acc);
				}
				const void *cs[] = {s[0], s[1], s[2], s[3]};
				/* round 1: dst is the first source, 2: the second, 3:
				 * the last (a rank's slice in shm_coll.c's reduce_slice
				 * is its own source, at any rank) */
				uint16_t *d = round == 1   ? s[0]
					      : round == 2 ? s[1]
					      : round == 3 ? s[nsrc - 1]
							   : out;
				ddpi_reduce(DDP_BFLOAT16, op, d, cs, nsrc, N, div);
				for (int i = 0; i < N; i++) {
					if (bf16_is_nan(want[i]))
						assert_true(bf16_is_nan(d[i]));
					else
						assert_int_equal(d[i], want[i]);
				}
			}
	for (int k = 0; k < 4; k++)
		free(s[k]);
	free(want), free(out);
}

/* Two float16 sources summed and averaged (reduce.c's F16C kernel where the
 * CPU has it): every element is the float32 sum (divided, for an average)
 * rounded once, as dtype.c's scalar code rounds it, over every bit pattern,
 * with dst aliasing either source. */
static void test_f16_pair_sums_are_the_float32_sums_rounded(void **state)
{
	enum { N = 65536 + 13 };
	uint16_t *a = malloc(N * 2), *b = malloc(N * 2), *want = malloc(N * 2);

	assert_non_null(a && b && want);
	for (int round = 0; round < 4; round++) {
		int op = round < 2 ? DDP_SUM : DDP_AVG, div = round == 3 ? 5 : 2;
		for (int i = 0; i < N; i++) {
			a[i] = (uint16_t)i;
			b[i] = (uint16_t)next();
			float acc = ddpi_f16_to_f32(a[i]) + ddpi_f16_to_f32(b[i]);
			want[i] = ddpi_f32_to_f16(op == DDP_AVG ? acc / (float)div : acc);
		}
		const void *cs[] = {a, b};
		uint16_t *d = round % 2 ? b : a; /* into the first source, then the second */
		ddpi_reduce(DDP_FLOAT16, op, d, cs, 2, N, div);
		for (int i = 0; i < N; i++) {
			if ((want[i] & 0x7fff) > 0x7c00)
				assert_true((d[i] & 0x7fff) > 0x7c00);
			else
				assert_int_equal(d[i], want[i]);
		}
	}
	free(a), free(b), free(want);
}

static void test_native_reductions_and_aliasing(void **state)
{
	enum { N = 3001 };
	float a[N], b[N], c[N];
	double d[N], e[N];
	int64_t i1[N], i2[N];
	for (int i = 0; i < N; i++) {
		a[i] = (float)i;
		b[i] = 0.5f * i;
		c[i] = -1.0f;
		d[i] = i;
		e[i] = 3;
		i1[i] = i;
		i2[i] = -2 * i + 1;
	}
	/* dst aliases the last source: blocks are read before being written. */
	const void *s3[] = {a, b, c};
	ddpi_reduce(DDP_FLOAT32, DDP_SUM, c, s3, 3, N, 1);
	for (int i = 0; i < N; i++)
		assert_true(c[i] == 1.5f * i - 1.0f);
	const void *sd[] = {d, e};
	ddpi_reduce(DDP_FLOAT64, DDP_AVG, d, sd, 2, N, 2);
	for (int i = 0; i < N; i++)
		assert_true(d[i] == (i + 3) / 2.0);
	const void *si[] = {i1, i2};
	ddpi_reduce(DDP_INT64, DDP_AVG, i1, si, 2, N, 2);
	for (int i = 0; i < N; i++)
		assert_int_equal(i1[i], (1 - i) / 2); /* truncated toward zero */
	ddpi_reduce(DDP_INT64, DDP_MIN, i2, si, 2, N, 2);
	ddpi_scale_div(DDP_FLOAT32, a, N, 4);
	assert_true(a[8] == 2.0f);
}

static void test_min_max_propagate_nan(void **state)
{
	float x[3] = {1, NAN, 3}, y[3] = {NAN, 2, 0}, out[3];
	const void *s[] = {x, y};
	ddpi_reduce(DDP_FLOAT32, DDP_MIN, out, s, 2, 3, 2);
	assert_true(isnan(out[0]) && isnan(out[1]) && out[2] == 0);
	ddpi_reduce(DDP_FLOAT32, DDP_MAX, out, s, 2, 3, 2);
	assert_true(isnan(out[0]) && isnan(out[1]) && out[2] == 3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_f16_roundtrip_every_value),
		cmocka_unit_test(test_f16_rounding_matches_float64_reference),
		cmocka_unit_test(test_bf16_rounding_matches_float64_reference),
		cmocka_unit_test(test_half_reductions_round_like_float64),
		cmocka_unit_test(test_bf16_rounding_edges),
		cmocka_unit_test(test_bf16_sums_are_the_float32_sums_rounded),
		cmocka_unit_test(test_f16_pair_sums_are_the_float32_sums_rounded),
		cmocka_unit_test(test_native_reductions_and_aliasing),
		cmocka_unit_test(test_min_max_propagate_nan),
	};
	return cmocka_run_group_tests_name("ddp_dtype", tests, NULL, NULL);
}
