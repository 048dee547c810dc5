/* Unit tests for launcher/output.c: whole lines with their prefix, partial
 * lines held back, endless lines cut, the tail flushed at end of stream. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "output.h"

static struct output_buf pending, out;

static int reset(void **state)
{
	output_buf_free(&pending);
	output_buf_free(&out);
	return 0;
}

/* Terminate out so it compares as a string (0, or -1 on ENOMEM). */
static int buf_nul(struct output_buf *b)
{
	if (b->len == b->cap) {
		char *p = realloc(b->p, b->cap + 1);

		if (p == NULL)
			return -1;
		b->p = p;
		b->cap++;
	}
	if (b->p != NULL)
		b->p[b->len] = '\0';
	return 0;
}

static const char *feed(const char *prefix, const char *data, int final)
{
	out.len = 0;
	assert_int_equal(
		output_lines(&pending, prefix, strlen(prefix), data, strlen(data), final, &out), 0);
	assert_int_equal(buf_nul(&out), 0);
	return out.p ? out.p : "";
}

static void test_whole_lines_pass_and_tail_waits(void **state)
{
	assert_string_equal(feed("", "one\ntwo\nthr", 0), "one\ntwo\n");
	assert_int_equal(pending.len, 3);
	assert_string_equal(feed("", "ee\nfo", 0), "three\n");
	assert_string_equal(feed("", "", 1), "fo\n");
	assert_int_equal(pending.len, 0);
	assert_string_equal(feed("", "", 1), "");
}

static void test_prefix_before_every_line(void **state)
{
	assert_string_equal(feed("[rank3]: ", "a\nb\nc", 0), "[rank3]: a\n[rank3]: b\n");
	assert_string_equal(feed("[rank3]: ", "\n\n", 0), "[rank3]: c\n[rank3]: \n");
}

static void test_line_split_over_many_reads(void **state)
{
	const char *parts[] = {"x", "y", "z", "", "w\n"};
	size_t i;

	for (i = 0; i < 4; i++)
		assert_string_equal(feed("p:", parts[i], 0), "");
	assert_string_equal(feed("p:", parts[4], 0), "p:xyzw\n");
}

static void test_endless_line_is_cut(void **state)
{
	size_t n = OUTPUT_MAX_LINE + 10;
	char *big = malloc(n + 1);

	memset(big, 'q', n);
	big[n] = '\0';
	feed("", big, 0);
	assert_int_equal(out.len, OUTPUT_MAX_LINE + 1); /* a cut line, newline added */
	assert_int_equal(out.p[OUTPUT_MAX_LINE], '\n');
	assert_int_equal(pending.len, 10);
	free(big);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_whole_lines_pass_and_tail_waits, reset),
		cmocka_unit_test_setup(test_prefix_before_every_line, reset),
		cmocka_unit_test_setup(test_line_split_over_many_reads, reset),
		cmocka_unit_test_setup(test_endless_line_is_cut, reset),
	};

	return cmocka_run_group_tests(tests, NULL, reset);
}
