/* Unit tests for libddp's bulk copies (copy.c): ddpi_copy and ddpi_copy2 give
 * memcpy's bytes at every alignment of source and destinations and every
 * length around the streamed path's cache lines (head, whole lines, tail),
 * with either destination absent, and write nothing outside them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "ddp_internal.h"

#define GUARD 80
#define MAXN  (3 * 4096 + 200)

static unsigned char src_buf[MAXN + 2 * GUARD], a_buf[MAXN + 2 * GUARD], b_buf[MAXN + 2 * GUARD];

static void fill(unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)((i * 2654435761u >> 7) + seed);
}

/* buf (a whole a_buf/b_buf) holds src's n bytes at off and 0xA5 elsewhere:
 * one comparison with the buffer that should result. */
static void expect_copied(const unsigned char *buf, size_t off, const unsigned char *src, size_t n)
{
	static unsigned char want[sizeof(a_buf)];

	memset(want, 0xA5, sizeof(want));
	if (n)
		memcpy(want + off, src, n);
	assert_memory_equal(buf, want, sizeof(want));
}

static const size_t lens[] = {0,   1,	15,  63,  64,  65,   127,  128,	 129,
			      191, 192, 255, 256, 257, 4095, 4096, 4097, MAXN};

static void test_copy_streamed_and_not_match_memcpy(void **state)
{
	(void)state;
	fill(src_buf, sizeof(src_buf), 7);
	for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++)
		for (size_t so = 0; so < 64; so += 7)
			for (size_t dof = 0; dof < 64; dof += 5)
				for (int stream = 0; stream < 2; stream++) {
					size_t n = lens[l];
					memset(a_buf, 0xA5, sizeof(a_buf));
					ddpi_copy(a_buf + GUARD + dof, src_buf + GUARD + so, n,
						  stream);
					expect_copied(a_buf, GUARD + dof, src_buf + GUARD + so, n);
				}
}

/* which: 0 both destinations, 1 only the streamed one, 2 only the ordinary one. */
static void check_copy2(size_t n, size_t so, size_t ao, size_t bo, int which)
{
	unsigned char *a = which == 1 ? NULL : a_buf + GUARD + ao;
	unsigned char *b = which == 2 ? NULL : b_buf + GUARD + bo;
	const unsigned char *src = src_buf + GUARD + so;

	memset(a_buf, 0xA5, sizeof(a_buf));
	memset(b_buf, 0xA5, sizeof(b_buf));
	ddpi_copy2(a, b, src, n);
	expect_copied(a_buf, GUARD + ao, src, a ? n : 0);
	expect_copied(b_buf, GUARD + bo, src, b ? n : 0);
}

static void test_copy2_writes_both_destinations_in_one_pass(void **state)
{
	(void)state;
	fill(src_buf, sizeof(src_buf), 3);
	for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++)
		for (size_t so = 0; so < 64; so += 11)
			for (size_t ao = 0; ao < 64; ao += 13)
				for (size_t bo = 0; bo < 64; bo += 3)
					for (int which = 0; which < 3; which++)
						check_copy2(lens[l], so, ao, bo, which);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_copy_streamed_and_not_match_memcpy),
		cmocka_unit_test(test_copy2_writes_both_destinations_in_one_pass),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
