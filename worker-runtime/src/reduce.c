/* reduce: the element-wise reduction kernels of every collective.
 *
 * Work goes block by block: a block of the first source is loaded into an
 * accumulator that stays in L1, every other source is combined into it in
 * index order, and the block is written out once. So each source is read once,
 * the destination written once, the destination may alias a source, and every
 * rank that reduces the same inputs gets the same bits. float16/bfloat16 are
 * widened to float32 for the block and rounded once at the end.
 *
 * The loops are simple so the compiler vectorizes them; the hot ones are
 * compiled for AVX2 and AVX-512 too and picked at load time (DDPI_CLONES). */
#include <string.h>

#include "ddp_internal.h"

#if DDPI_HAVE_F16C
#include <immintrin.h>
#endif

#define BLK 1024 /* elements per block: 8 KiB accumulators at most */

/* out = a op b for n elements. out may be a or b (element i is read before
 * it is written), so no restrict on it; the compiler checks overlap at run
 * time, and vectorizes an exact alias too. NaN propagates through min/max
 * (torch semantics): a NaN in b wins, a NaN in a stays because every
 * comparison with it fails. */
#define DEFINE_KERNEL_WITH(T, NAME, EXTRA, EXPR)                                              \
	DDPI_CLONES DDPI_VEC static void NAME(T *out, const T *a, const T *b, size_t n EXTRA) \
	{                                                                                     \
		for (size_t i = 0; i < n; i++)                                                \
			out[i] = (EXPR);                                                      \
	}
#define DEFINE_KERNEL(T, NAME, EXPR) DEFINE_KERNEL_WITH(T, NAME, , EXPR)
/* A kernel's extra parameter: the divisor of an average. */
#define WITH_DIVISOR , float d

/* U: the type the sum is done in. For the integers, the unsigned one: a
 * signed sum that overflows is undefined behaviour, an unsigned one wraps,
 * and its conversion back (GCC and clang: modulo 2^N) gives the two's
 * complement wrap-around the kernels always gave, still vectorized. */
#define DEFINE_COMBINE(T, U, NAME)                                                           \
	DEFINE_KERNEL(T, NAME##_sum, (T)((U)a[i] + (U)b[i]))                                 \
	DEFINE_KERNEL(T, NAME##_min, (b[i] < a[i] || b[i] != b[i]) ? b[i] : a[i])            \
	DEFINE_KERNEL(T, NAME##_max, (b[i] > a[i] || b[i] != b[i]) ? b[i] : a[i])            \
	DDPI_CLONES DDPI_VEC static void NAME##_div(T *acc, T d, size_t n)                   \
	{                                                                                    \
		for (size_t i = 0; i < n; i++)                                               \
			acc[i] /= d;                                                         \
	}                                                                                    \
	static void NAME##_combine(enum ddp_op op, T *out, const T *a, const T *b, size_t n) \
	{                                                                                    \
		if (op == DDP_MIN)                                                           \
			NAME##_min(out, a, b, n);                                            \
		else if (op == DDP_MAX)                                                      \
			NAME##_max(out, a, b, n);                                            \
		else                                                                         \
			NAME##_sum(out, a, b, n);                                            \
	}

DEFINE_COMBINE(float, float, f32)
DEFINE_COMBINE(double, double, f64)
DEFINE_COMBINE(int32_t, uint32_t, i32)
DEFINE_COMBINE(int64_t, uint64_t, i64)

/* One block of a natively typed reduction: sources are combined pairwise
 * through an L1 accumulator, the last combination writing dst directly
 * (every source's block has been read by then, so dst may alias any of
 * them). */
#define NATIVE_BLOCK(T, NAME)                                                      \
	do {                                                                       \
		T acc[BLK], *d = (T *)dst + off;                                   \
		const T *prev = (const T *)src[0] + off;                           \
		if (nsrc == 1 && d != prev)                                        \
			memmove(d, prev, m * sizeof(T));                           \
		for (int k = 1; k < nsrc; k++) {                                   \
			T *out = k == nsrc - 1 ? d : acc;                          \
			NAME##_combine(op, out, prev, (const T *)src[k] + off, m); \
			prev = out;                                                \
		}                                                                  \
		if (op == DDP_AVG && avg_div > 1)                                  \
			NAME##_div(d, (T)avg_div, m);                              \
	} while (0)

/* The commonest half-precision blocks, bfloat16 sources summed or averaged
 * (the reducer's buckets), in registers: the same float32 sums in the same
 * order, the same division and the same rounding as half_block's, without
 * its conversions through L1. Two sources (two ranks of a node, each step of
 * the ring) in one pass; more through a float32 accumulator: acc = s0 + s1,
 * acc += sk, out = round(acc + last) (an average divides acc before it
 * rounds). out may be a source, as in DEFINE_KERNEL. The average
 * has kernels of its own: a division in the sum's loop would cost more than
 * its memory (2 ranks, 64 MiB of bfloat16: 21 ms averaged through
 * half_block's conversions, against 14 ms summed). */
#define BF16_PAIR_SUM ddpi_bf16_to_f32(a[i]) + ddpi_bf16_to_f32(b[i])
DEFINE_KERNEL(uint16_t, bf16_sum2, ddpi_f32_to_bf16(BF16_PAIR_SUM))
DEFINE_KERNEL_WITH(uint16_t, bf16_avg2, WITH_DIVISOR, ddpi_f32_to_bf16((BF16_PAIR_SUM) / d))

#if DDPI_HAVE_F16C
/* Two float16 sources summed in registers with F16C (ddpi_cpu_f16c()), and
 * divided by d (1: a sum): the conversions and rounding of dtype.c's bulk
 * path, eight at a time; the tail element by element, the same bits. out
 * may be a or b: each group is loaded before it is stored. */
__attribute__((target("avx,f16c"))) static void f16_sum2(uint16_t *out, const uint16_t *a,
							 const uint16_t *b, size_t n, float d)
{
	__m256 dv = _mm256_set1_ps(d);
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i)));
		__m256 y = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i)));
		__m256 v = _mm256_add_ps(x, y);
		if (d != 1.0f) /* an average: x / 1 is x, but the division costs */
			v = _mm256_div_ps(v, dv);
		__m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
		_mm_storeu_si128((__m128i *)(out + i), h);
	}
	for (; i < n; i++)
		out[i] = ddpi_f32_to_f16((ddpi_f16_to_f32(a[i]) + ddpi_f16_to_f32(b[i])) / d);
}
#endif

DDPI_CLONES DDPI_VEC static void bf16_add2(float *restrict acc, const uint16_t *a,
					   const uint16_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		acc[i] = ddpi_bf16_to_f32(a[i]) + ddpi_bf16_to_f32(b[i]);
}

DDPI_CLONES DDPI_VEC static void bf16_add(float *restrict acc, const uint16_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		acc[i] += ddpi_bf16_to_f32(b[i]);
}

DDPI_CLONES DDPI_VEC static void bf16_round_add(uint16_t *out, const float *restrict acc,
						const uint16_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		out[i] = ddpi_f32_to_bf16(acc[i] + ddpi_bf16_to_f32(b[i]));
}

/* d: 1 for a sum, the divisor of an average. */
static void bf16_sum_block(uint16_t *dst, const void *const *src, int nsrc, size_t off, size_t m,
			   float d)
{
	float acc[BLK];
	const uint16_t *last = (const uint16_t *)src[nsrc - 1] + off;

	dst += off;
	if (nsrc == 2) {
		if (d == 1.0f)
			bf16_sum2(dst, (const uint16_t *)src[0] + off, last, m);
		else
			bf16_avg2(dst, (const uint16_t *)src[0] + off, last, m, d);
		return;
	}
	bf16_add2(acc, (const uint16_t *)src[0] + off, (const uint16_t *)src[1] + off, m);
	for (int k = 2; k < nsrc - 1; k++)
		bf16_add(acc, (const uint16_t *)src[k] + off, m);
	if (d == 1.0f) {
		bf16_round_add(dst, acc, last, m);
		return;
	}
	/* Every source is read before dst, which may be one, is written. */
	bf16_add(acc, last, m);
	f32_div(acc, d, m);
	ddpi_f32_to_bf16_n(dst, acc, m);
}

static void half_block(enum ddp_dtype dt, enum ddp_op op, void *dst, const void *const *src,
		       int nsrc, size_t off, size_t m, int avg_div)
{
	float acc[BLK], tmp[BLK];
	int bf = dt == DDP_BFLOAT16;
	int sum = op == DDP_SUM || op == DDP_AVG;
	float d = op == DDP_AVG && avg_div > 1 ? (float)avg_div : 1.0f;

	if (bf && nsrc >= 2 && sum) {
		bf16_sum_block(dst, src, nsrc, off, m, d);
		return;
	}
#if DDPI_HAVE_F16C
	if (!bf && nsrc == 2 && sum && ddpi_cpu_f16c()) {
		f16_sum2((uint16_t *)dst + off, (const uint16_t *)src[0] + off,
			 (const uint16_t *)src[1] + off, m, d);
		return;
	}
#endif

	if (bf)
		ddpi_bf16_to_f32_n(acc, (const uint16_t *)src[0] + off, m);
	else
		ddpi_f16_to_f32_n(acc, (const uint16_t *)src[0] + off, m);
	for (int k = 1; k < nsrc; k++) {
		if (bf)
			ddpi_bf16_to_f32_n(tmp, (const uint16_t *)src[k] + off, m);
		else
			ddpi_f16_to_f32_n(tmp, (const uint16_t *)src[k] + off, m);
		f32_combine(op, acc, acc, tmp, m);
	}
	if (op == DDP_AVG && avg_div > 1)
		f32_div(acc, (float)avg_div, m);
	if (bf)
		ddpi_f32_to_bf16_n((uint16_t *)dst + off, acc, m);
	else
		ddpi_f32_to_f16_n((uint16_t *)dst + off, acc, m);
}

void ddpi_reduce(enum ddp_dtype dt, enum ddp_op op, void *dst, const void *const *src, int nsrc,
		 size_t n, int avg_div)
{
	for (size_t off = 0; off < n; off += BLK) {
		size_t m = n - off < BLK ? n - off : BLK;
		switch (dt) {
		case DDP_FLOAT32:
			/* acc is written by the first combination (through out) */
			// cppcheck-suppress legacyUninitvar
			NATIVE_BLOCK(float, f32);
			break;
		case DDP_FLOAT64:
			/* acc is written by the first combination (through out) */
			// cppcheck-suppress legacyUninitvar
			NATIVE_BLOCK(double, f64);
			break;
		case DDP_INT32:
			/* acc is written by the first combination (through out) */
			// cppcheck-suppress legacyUninitvar
			NATIVE_BLOCK(int32_t, i32);
			break;
		case DDP_INT64:
			/* acc is written by the first combination (through out) */
			// cppcheck-suppress legacyUninitvar
			NATIVE_BLOCK(int64_t, i64);
			break;
		case DDP_FLOAT16:
		case DDP_BFLOAT16:
			half_block(dt, op, dst, src, nsrc, off, m, avg_div);
			break;
		}
	}
}

void ddpi_scale_div(enum ddp_dtype dt, void *buf, size_t n, int div)
{
	const void *src[1] = {buf};

	if (div > 1)
		ddpi_reduce(dt, DDP_AVG, buf, src, 1, n, div);
}
