/* copy: the bulk copies that write a large collective's result into the
 * caller's buffer.
 *
 * An ordinary store first reads the destination line into cache (read for
 * ownership) and, a result being far bigger than L2, evicts what the
 * collective still needs there: the staging slots its peers are filling. A
 * non-temporal store writes the whole line to memory without reading it and
 * leaves the cache alone. glibc's memcpy switches to such stores only past
 * three quarters of the L3 it is told of (99 MiB on the 260 MiB L3 a VM here
 * reports, most of which its neighbours use): measured here (bench/allreduce),
 * a 2-rank 64 MiB all_gather through the slots took 11 ms with them and 15 ms
 * without. Small results stay ordinary: the caller reads them soon, from cache.
 * Where the line falls counts what all of a node's ranks write at once
 * (DDPI_STREAM_MIN_BYTES), since they share the L3, and what each writes
 * (DDPI_STREAM_MIN_EACH: past its L2, with room for the next call's): at 4
 * ranks on 2 cores, a 16 MiB all_gather (64 MiB written) was 10% faster
 * streamed, a 16 MiB broadcast (48 MiB) 7% slower; at 2 ranks a 32 MiB
 * all_gather (64 MiB) took 4.6 ms streamed against 6.1 ms through the
 * kernel's single copy.
 *
 * SSE2 stores are part of x86-64 itself, so no CPU check; 16-byte stores are
 * enough if the loop around them is lean (lines() says what that took).
 * Elsewhere everything is memcpy. */
#include <stdint.h>
#include <string.h>

#include "ddp_internal.h"

#if DDPI_HAVE_STREAM
#include <emmintrin.h>
#endif

/* Whole 64-byte lines of src to dst (ordinary stores) and to sdst (streamed),
 * either may be NULL; sdst is 64-byte aligned. A whole line per iteration:
 * with a test per 16-byte store the loop was bound by its instructions, not
 * by memory (two processes streaming 64 MiB each took 5.5-6.5 ms against
 * 3.5-4.2 ms for this one). */
static void lines(char *dst, char *sdst, const char *src, size_t n)
{
#if DDPI_HAVE_STREAM
	for (size_t i = 0; i < n; i += 64) {
		const __m128i *s = (const __m128i *)(src + i);
		__m128i a = _mm_loadu_si128(s), b = _mm_loadu_si128(s + 1);
		__m128i c = _mm_loadu_si128(s + 2), d = _mm_loadu_si128(s + 3);
		if (dst) {
			__m128i *o = (__m128i *)(dst + i);
			_mm_storeu_si128(o, a), _mm_storeu_si128(o + 1, b);
			_mm_storeu_si128(o + 2, c), _mm_storeu_si128(o + 3, d);
		}
		if (sdst) {
			__m128i *o = (__m128i *)(sdst + i);
			_mm_stream_si128(o, a), _mm_stream_si128(o + 1, b);
			_mm_stream_si128(o + 2, c), _mm_stream_si128(o + 3, d);
		}
	}
	/* The streamed stores are weakly ordered: done before the copy returns,
	 * so that whoever the caller tells next (the user's thread, from the
	 * communication thread) sees them. */
	_mm_sfence();
#endif
}

void ddpi_copy2(void *dst, void *sdst, const void *src, size_t n)
{
	char *d = dst, *sd = sdst;
	const char *s = src;
	size_t head = sd ? (64 - ((uintptr_t)sd & 63)) & 63 : 0, body;

#if !DDPI_HAVE_STREAM
	sd = NULL;
#endif
	if (!sd || n < 2 * 64 + head) {
		if (d)
			memcpy(d, s, n);
		if (sdst)
			memcpy(sdst, s, n);
		return;
	}
	/* Up to the streamed destination's next cache line ordinarily, then
	 * whole lines, then the tail. */
	if (d)
		memcpy(d, s, head);
	memcpy(sd, s, head);
	n -= head, s += head, sd += head, d = d ? d + head : NULL;
	body = n & ~(size_t)63;
	lines(d, sd, s, body);
	if (d)
		memcpy(d + body, s + body, n - body);
	memcpy(sd + body, s + body, n - body);
}

void ddpi_copy(void *dst, const void *src, size_t n, int stream)
{
	if (stream)
		ddpi_copy2(NULL, dst, src, n);
	else
		memcpy(dst, src, n);
}
