/* dtype: element sizes and names, and float16/bfloat16 <-> float32
 * conversions with IEEE round-to-nearest-even (what PyTorch and the hardware
 * do). Bulk conversions use F16C when the CPU has it; the scalar code gives the
 * same bits (quiet NaNs keep the top payload bits, as vcvtps2ph does). */
#include <string.h>

#include "ddp_internal.h"

#if DDPI_HAVE_F16C
#include <cpuid.h>
#include <immintrin.h>
#endif

size_t ddp_dtype_size(enum ddp_dtype dt)
{
	switch (dt) {
	case DDP_FLOAT32:
	case DDP_INT32:
		return 4;
	case DDP_FLOAT64:
	case DDP_INT64:
		return 8;
	case DDP_FLOAT16:
	case DDP_BFLOAT16:
		return 2;
	}
	return 0;
}

int ddpi_dtype_valid(enum ddp_dtype dt)
{
	return ddp_dtype_size(dt) != 0;
}

int ddpi_op_valid(enum ddp_op op)
{
	return op == DDP_SUM || op == DDP_AVG || op == DDP_MIN || op == DDP_MAX;
}

const char *ddpi_dtype_name(enum ddp_dtype dt)
{
	static const char *const names[] = {"float32",	"float64", "float16",
					    "bfloat16", "int32",   "int64"};
	return ddpi_dtype_valid(dt) ? names[dt] : "invalid";
}

uint16_t ddpi_f32_to_f16(float f)
{
	uint32_t x = ddpi_f32_bits(f);
	uint32_t sign = (x >> 16) & 0x8000, a = x & 0x7fffffff;

	if (a > 0x7f800000) /* NaN: quiet, top payload bits kept */
		return sign | 0x7e00 | ((a >> 13) & 0x1ff);
	if (a >= 0x477ff000) /* >= 65520 (and inf) rounds to inf */
		return sign | 0x7c00;
	if (a >= 0x38800000) { /* normal half: rebias the exponent by 127 - 15 */
		uint32_t r = a - (112u << 23);
		r += 0x0fff + ((r >> 13) & 1);
		return sign | (r >> 13);
	}
	if (a <= 0x33000000) /* <= 2^-25: rounds to zero (the tie goes to even) */
		return sign;
	/* Subnormal half: count in units of 2^-24, rounding half to even. */
	uint32_t e = a >> 23, m = (a & 0x7fffff) | 0x800000;
	uint32_t shift = 126 - e, q = m >> shift;
	uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
	if (rem > half || (rem == half && (q & 1)))
		q++;
	return sign | q;
}

float ddpi_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;

	if (e == 0x1f)
		return ddpi_bits_f32(sign | 0x7f800000 | (m << 13));
	if (e)
		return ddpi_bits_f32(sign | ((e + 112) << 23) | (m << 13));
	/* Zero or subnormal: m * 2^-24 is exact in float. */
	float v = (float)m * 0x1p-24f;
	return sign ? -v : v;
}

#if DDPI_HAVE_F16C
/* F16C and AVX in CPUID, and the OS saving the YMM registers (XGETBV): what
 * the kernels need, asked of the CPU directly (clang 14 knows no "f16c" for
 * __builtin_cpu_supports). */
static int cpu_has_f16c(void)
{
	unsigned a, b, c, d, lo, hi;

	if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE) || !(c & bit_AVX) ||
	    !(c & bit_F16C))
		return 0;
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	return (lo & 6) == 6; /* XMM and YMM state */
}
#endif

int ddpi_cpu_f16c(void)
{
#if !DDPI_HAVE_F16C
	return 0;
#else
	static int cached = -1;
	if (cached < 0)
		cached = cpu_has_f16c();
	return cached;
#endif
}

#if DDPI_HAVE_F16C

__attribute__((target("avx,f16c"))) static void f16_to_f32_f16c(float *dst, const uint16_t *src,
								size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m128i h = _mm_loadu_si128((const __m128i *)(src + i));
		_mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
	}
	for (; i < n; i++)
		dst[i] = ddpi_f16_to_f32(src[i]);
}

__attribute__((target("avx,f16c"))) static void f32_to_f16_f16c(uint16_t *dst, const float *src,
								size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256 v = _mm256_loadu_ps(src + i);
		_mm_storeu_si128((__m128i *)(dst + i),
				 _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
	}
	for (; i < n; i++)
		dst[i] = ddpi_f32_to_f16(src[i]);
}
#endif

void ddpi_f16_to_f32_n(float *dst, const uint16_t *src, size_t n)
{
#if DDPI_HAVE_F16C
	if (ddpi_cpu_f16c()) {
		f16_to_f32_f16c(dst, src, n);
		return;
	}
#endif
	for (size_t i = 0; i < n; i++)
		dst[i] = ddpi_f16_to_f32(src[i]);
}

void ddpi_f32_to_f16_n(uint16_t *dst, const float *src, size_t n)
{
#if DDPI_HAVE_F16C
	if (ddpi_cpu_f16c()) {
		f32_to_f16_f16c(dst, src, n);
		return;
	}
#endif
	for (size_t i = 0; i < n; i++)
		dst[i] = ddpi_f32_to_f16(src[i]);
}

/* bfloat16 is plain integer work that the compiler vectorizes, when told to:
 * at -O2 these loops were scalar, and a bfloat16 all_reduce took 3x the time
 * of a float32 one of the same bytes. */
DDPI_CLONES DDPI_VEC void ddpi_bf16_to_f32_n(float *restrict dst, const uint16_t *restrict src,
					     size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = ddpi_bf16_to_f32(src[i]);
}

DDPI_CLONES DDPI_VEC void ddpi_f32_to_bf16_n(uint16_t *restrict dst, const float *restrict src,
					     size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = ddpi_f32_to_bf16(src[i]);
}
