/* Unit tests for tmpdir_find (launcher/tmpdir.h): Python's tempfile order,
 * $TMPDIR, $TEMP, $TMP, /tmp, ..., each passed over when it is not a
 * directory this process may write in, and the path made absolute. Each
 * test works in a fresh directory of its own under /tmp. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "logdir.h"
#include "tmpdir.h"

static char root[64];
static char subdir[PATH_MAX];
static char found[PATH_MAX];

static int setup(void **state)
{
	(void)state;
	unsetenv("TMPDIR");
	unsetenv("TEMP");
	unsetenv("TMP");
	snprintf(root, sizeof(root), "/tmp/ddprun_tmpdir_test_XXXXXX");
	if (mkdtemp(root) == NULL)
		return -1;
	snprintf(subdir, sizeof(subdir), "%s/d", root);
	return mkdir(subdir, 0700);
}

static int teardown(void **state)
{
	(void)state;
	unsetenv("TMPDIR");
	unsetenv("TEMP");
	unsetenv("TMP");
	return logdir_rmtree(root);
}

static void test_a_usable_tmpdir_is_taken(void **state)
{
	(void)state;
	setenv("TMPDIR", subdir, 1);
	assert_int_equal(tmpdir_find(found, sizeof(found)), 0);
	assert_string_equal(found, subdir);
}

/* torchrun's tempfile: TMPDIR, TEMP, TMP; a missing one, a file and an
 * empty value are passed over. */
static void test_unusable_variables_are_passed_over_in_pythons_order(void **state)
{
	char file[PATH_MAX];
	FILE *f;

	(void)state;
	snprintf(file, sizeof(file), "%s/file", root);
	f = fopen(file, "w");
	assert_non_null(f);
	fclose(f);
	setenv("TMPDIR", "/nonexistent/ddprun", 1);
	setenv("TEMP", file, 1);
	setenv("TMP", subdir, 1);
	assert_int_equal(tmpdir_find(found, sizeof(found)), 0);
	assert_string_equal(found, subdir);
	setenv("TMPDIR", "", 1);
	setenv("TEMP", subdir, 1);
	unsetenv("TMP");
	assert_int_equal(tmpdir_find(found, sizeof(found)), 0);
	assert_string_equal(found, subdir);
}

static void test_without_a_usable_variable_it_is_tmp(void **state)
{
	(void)state;
	setenv("TMPDIR", "/nonexistent/ddprun", 1);
	assert_int_equal(tmpdir_find(found, sizeof(found)), 0);
	assert_string_equal(found, "/tmp");
}

/* Write permission is what counts (root may write anywhere: not run then). */
static void test_a_directory_it_cannot_write_is_passed_over(void **state)
{
	(void)state;
	if (geteuid() == 0)
		skip();
	assert_int_equal(chmod(subdir, 0500), 0);
	setenv("TMPDIR", subdir, 1);
	assert_int_equal(tmpdir_find(found, sizeof(found)), 0);
	assert_string_equal(found, "/tmp");
	chmod(subdir, 0700);
}

/* os.path.abspath: a worker that changes directory still finds its files. */
static void test_a_relative_tmpdir_is_made_absolute(void **state)
{
	char cwd[PATH_MAX], want[PATH_MAX + 8];

	(void)state;
	assert_non_null(getcwd(cwd, sizeof(cwd)));
	assert_int_equal(chdir(root), 0);
	setenv("TMPDIR", "d", 1);
	assert_int_equal(tmpdir_find(found, sizeof(found)), 0);
	snprintf(want, sizeof(want), "%s/d", root);
	assert_string_equal(found, want);
	assert_int_equal(chdir(cwd), 0);
}

static void test_a_path_that_does_not_fit_is_passed_over(void **state)
{
	(void)state;
	setenv("TMPDIR", subdir, 1);
	assert_int_equal(tmpdir_find(found, strlen(subdir)), 0); /* no room for the NUL */
	assert_string_equal(found, "/tmp");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_a_usable_tmpdir_is_taken, setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_unusable_variables_are_passed_over_in_pythons_order, setup, teardown),
		cmocka_unit_test_setup_teardown(test_without_a_usable_variable_it_is_tmp, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_a_directory_it_cannot_write_is_passed_over,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_relative_tmpdir_is_made_absolute, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_a_path_that_does_not_fit_is_passed_over, setup,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
