/* Unit tests for launcher/proc_info.c's reading of a Python process's
 * faulthandler setting (the hang dump sends SIGABRT only to a process that
 * prints its stack then), checked against CPython 3.11, 3.13 and 3.14
 * (Debian 12's, trixie's, sid's): -X faulthandler and -X dev with any
 * value, PYTHONFAULTHANDLER and PYTHONDEVMODE when not empty and not
 * ignored (-E, -I), the first of each in the environment. The command
 * lines here gave the same answer from all three (faulthandler.is_enabled()
 * with and without PYTHONFAULTHANDLER=1). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "proc_info.h"

/* A command line or environment as /proc shows it: words separated by
 * '|' in the test, NUL-separated (and NUL-ended) for the parser. */
static size_t nul_text(const char *words, char *buf, size_t cap)
{
	size_t n = strlen(words);

	assert_true(n + 1 < cap);
	memcpy(buf, words, n + 1);
	for (size_t i = 0; i < n; i++)
		if (buf[i] == '|')
			buf[i] = '\0';
	return n + 1;
}

static enum proc_fh args_say(const char *words)
{
	char buf[512];
	size_t n = nul_text(words, buf, sizeof(buf));

	return proc_python_fh_args(buf, n);
}

static bool env_says(const char *words)
{
	char buf[512];
	size_t n = nul_text(words, buf, sizeof(buf));

	return proc_python_fh_env(buf, n);
}

#define ARGS(words, want)                                                             \
	do {                                                                          \
		enum proc_fh got = args_say(words);                                   \
		if (got != (want))                                                    \
			fail_msg("%s: %d, not %d (%s)", (words), got, (want), #want); \
	} while (0)

/* CPython's config_get_xoption tests the name only: every value is on,
 * -X faulthandler=0 included; the name must be whole. */
static void test_x_faulthandler_with_any_value_is_on(void **state)
{
	ARGS("python3|-X|faulthandler|t.py", PROC_FH_ON);
	ARGS("python3|-Xfaulthandler|t.py", PROC_FH_ON);
	ARGS("python3|-X|faulthandler=0|t.py", PROC_FH_ON);
	ARGS("python3|-Xfaulthandler=0|t.py", PROC_FH_ON);
	ARGS("python3|-X|faulthandler=|t.py", PROC_FH_ON);
	ARGS("python3|-X|faulthandler=off|t.py", PROC_FH_ON);
	ARGS("python3|-I|-X|faulthandler=0|t.py", PROC_FH_ON);
	ARGS("python3|-EXfaulthandler|t.py", PROC_FH_ON);
	ARGS("python3|-uX|faulthandler|-c|pass", PROC_FH_ON);
	ARGS("python3|-X|faulthandlerx|t.py", PROC_FH_ENV);
	ARGS("python3|-X|faulthandle|t.py", PROC_FH_ENV);
	ARGS("python3|-I|-X|faulthandlerx=1|t.py", PROC_FH_OFF);
}

/* Development mode turns faulthandler on, from -X dev (any value) or a
 * non-empty PYTHONDEVMODE. */
static void test_dev_mode_is_on(void **state)
{
	ARGS("python3|-X|dev|t.py", PROC_FH_ON);
	ARGS("python3|-I|-Xdev=0|t.py", PROC_FH_ON);
	ARGS("python3|-X|devx|t.py", PROC_FH_ENV);
	assert_true(env_says("PATH=/bin|PYTHONDEVMODE=1"));
	assert_true(env_says("PYTHONDEVMODE=0"));
	assert_false(env_says("PYTHONDEVMODE="));
}

/* -E and -I: the environment is ignored; the options after the script,
 * -c's or -m's are the program's; values of -W, -X and
 * --check-hash-based-pycs are no options. */
static void test_options_end_where_pythons_do(void **state)
{
	ARGS("python3|t.py", PROC_FH_ENV);
	ARGS("python3|-E|t.py", PROC_FH_OFF);
	ARGS("python3|-I|t.py", PROC_FH_OFF);
	ARGS("python3|-sI|t.py", PROC_FH_OFF);
	ARGS("python3|t.py|-X|faulthandler", PROC_FH_ENV);
	ARGS("python3|t.py|-I", PROC_FH_ENV);
	ARGS("python3|-c|pass|-X|faulthandler", PROC_FH_ENV);
	ARGS("python3|-Ic|pass|-X|faulthandler", PROC_FH_OFF);
	ARGS("python3|-m|mod|-X|faulthandler", PROC_FH_ENV);
	ARGS("python3|--|-X|faulthandler", PROC_FH_ENV);
	ARGS("python3|-|-X|faulthandler", PROC_FH_ENV);
	ARGS("python3|-W|-I|t.py", PROC_FH_ENV);
	ARGS("python3|-Wd|-X|faulthandler|t.py", PROC_FH_ON);
	ARGS("python3|-X|E|t.py", PROC_FH_ENV);
	ARGS("python3|--check-hash-based-pycs|always|-X|faulthandler|t.py", PROC_FH_ON);
	ARGS("python3|--check-hash-based-pycs|always|-I|t.py", PROC_FH_OFF);
	ARGS("python3|-X", PROC_FH_ENV);
	ARGS("python3|--check-hash-based-pycs", PROC_FH_ENV);
	ARGS("python3", PROC_FH_ENV);
	assert_int_equal(proc_python_fh_args("", 0), PROC_FH_OFF);
}

/* PYTHONFAULTHANDLER: any non-empty value is on ("0" too); getenv reads
 * the first of two. */
static void test_pythonfaulthandler_non_empty_is_on(void **state)
{
	assert_true(env_says("HOME=/|PYTHONFAULTHANDLER=1"));
	assert_true(env_says("PYTHONFAULTHANDLER=0"));
	assert_false(env_says("PYTHONFAULTHANDLER="));
	assert_false(env_says("HOME=/|XPYTHONFAULTHANDLER=1|PYTHONFAULTHANDLERX=1"));
	assert_false(env_says("PYTHONFAULTHANDLER=|PYTHONFAULTHANDLER=1"));
	assert_true(env_says("PYTHONFAULTHANDLER=1|PYTHONFAULTHANDLER="));
	assert_false(env_says("HOME=/"));
}

static bool waits(const char *wchan, int nthreads)
{
	struct proc_info pi = {.state = 'S', .nthreads = nthreads};

	snprintf(pi.wchan, sizeof(pi.wchan), "%s", wchan);
	return proc_waits_for_child(&pi);
}

/* The waits of a process that only waits for its child to end, whatever
 * suffix the compiler gave the kernel function; a wait for a signal only
 * where no other thread works meanwhile. */
static void test_waits_for_a_child(void **state)
{
	assert_true(waits("do_wait", 1));
	assert_true(waits("do_wait.isra.0", 8));
	assert_true(waits("sigsuspend.isra.0", 1));
	assert_true(waits("do_sigtimedwait.isra.0", 1));
	assert_false(waits("do_sigtimedwait.isra.0", 2)); /* a trainer's main thread */
	assert_false(waits("sigsuspend", 3));
	assert_false(waits("do_sigtimedwait", 0)); /* threads unknown */
	assert_false(waits("do_waitx", 1));
	assert_false(waits("do_wai", 1));
	assert_false(waits("hrtimer_nanosleep", 1));
	assert_false(waits("futex_wait_queue", 1));
	assert_false(waits("-", 1));
	assert_false(waits("", 1));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_x_faulthandler_with_any_value_is_on),
		cmocka_unit_test(test_dev_mode_is_on),
		cmocka_unit_test(test_options_end_where_pythons_do),
		cmocka_unit_test(test_pythonfaulthandler_non_empty_is_on),
		cmocka_unit_test(test_waits_for_a_child),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
