/* Unit tests for the launcher's growable text (launcher/text.c), which the
 * failure report and the hang dump build their output in: appends keep the
 * text NUL-terminated, a formatted line is never cut however long, and a
 * buffer grows past its first allocation without losing what it held. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "text.h"

static void test_appends_stay_terminated(void **state)
{
	struct text t = {0};

	text_add(&t, "abcdef", 3);
	assert_string_equal(t.p, "abc");
	text_puts(&t, "-");
	text_printf(&t, "%d:%s", 42, "x");
	assert_string_equal(t.p, "abc-42:x");
	assert_int_equal(t.len, strlen(t.p));
	assert_false(t.oom);
	free(t.p);
}

static void test_a_long_formatted_line_is_not_cut(void **state)
{
	struct text t = {0};
	char big[5000];

	memset(big, 'y', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	text_puts(&t, "<");
	text_printf(&t, "%s>", big);
	assert_int_equal(t.len, 1 + strlen(big) + 1);
	assert_int_equal(t.p[0], '<');
	assert_int_equal(t.p[t.len - 1], '>');
	assert_int_equal(t.p[t.len], '\0');
	free(t.p);
}

static void test_it_grows_without_losing_what_it_held(void **state)
{
	struct text t = {0};
	size_t i;

	for (i = 0; i < 10000; i++)
		text_printf(&t, "%c", (char)('a' + i % 26));
	assert_int_equal(t.len, 10000);
	for (i = 0; i < 10000; i++)
		assert_int_equal(t.p[i], 'a' + i % 26);
	assert_true(t.cap > t.len);
	free(t.p);
}

static void test_an_empty_append_allocates_nothing_it_needs(void **state)
{
	struct text t = {0};

	text_printf(&t, "%s", "");
	text_add(&t, "", 0);
	assert_int_equal(t.len, 0);
	assert_true(t.p == NULL || t.p[0] == '\0');
	free(t.p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_appends_stay_terminated),
		cmocka_unit_test(test_a_long_formatted_line_is_not_cut),
		cmocka_unit_test(test_it_grows_without_losing_what_it_held),
		cmocka_unit_test(test_an_empty_append_allocates_nothing_it_needs),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
