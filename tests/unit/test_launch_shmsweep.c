/* Unit tests for launcher/shmsweep.c: after an attempt, exactly this agent's
 * leftover segments go (named "ddp-...-a<its nonce>"), whatever the run id,
 * and nothing of another job's, even one with the same run id. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "logdir.h"
#include "shmsweep.h"
#include "workenv.h"

static char dir[] = "/tmp/shmsweep-XXXXXX";

static int setup(void **state)
{
	strcpy(dir, "/tmp/shmsweep-XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	return logdir_rmtree(dir);
}

static void touch(const char *name)
{
	char p[512];
	int fd;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	fd = open(p, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	close(fd);
}

static int exists(const char *name)
{
	char p[512];

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return access(p, F_OK) == 0;
}

static void note(const char *name, void *arg)
{
	char *seen = arg;

	strcat(seen, name);
	strcat(seen, ";");
}

static void test_only_this_agents_segments_go(void **state)
{
	static const char *const mine[] = {
		"ddp-none-r0-p29500-n0-u1000-a0123abcd", /* the default run id */
		"ddp-job-r3-p1-n7-u0-a0123abcd",	 /* any attempt, port, node */
		"ddp-a0123abcd-r0-p1-n0-u0-a0123abcd",	 /* a run id that looks like a nonce */
	};
	static const char *const theirs[] = {
		"ddp-none-r0-p29500-n0-u1000-affff0000",  /* same run id, another ddprun */
		"ddp-none-r0-p29500-n0-u1000",		  /* not under ddprun */
		"ddp-none-r0-p29500-n0-u1000-a0123abcde", /* a longer nonce */
		"ddp-none-r0-p29500-n0-u1000-a123abcd",	  /* a shorter one */
		"ddp-none-r0-p29500-n0-u1000-b0123abcd",  /* not after -a */
		"ddp-a0123abcd-r0-p1-n0-u0",		  /* the nonce elsewhere */
		"other-a0123abcd",			  /* not libddp's */
		"a0123abcd",
	};
	char seen[1024] = "";
	size_t i;

	for (i = 0; i < sizeof(mine) / sizeof(mine[0]); i++)
		touch(mine[i]);
	for (i = 0; i < sizeof(theirs) / sizeof(theirs[0]); i++)
		touch(theirs[i]);
	assert_int_equal(shmsweep_remove(dir, "0123abcd", note, seen), 3);
	for (i = 0; i < sizeof(mine) / sizeof(mine[0]); i++) {
		assert_false(exists(mine[i]));
		assert_non_null(strstr(seen, mine[i]));
	}
	for (i = 0; i < sizeof(theirs) / sizeof(theirs[0]); i++)
		assert_true(exists(theirs[i]));
	/* nothing left of ours: a second sweep is a no-op */
	assert_int_equal(shmsweep_remove(dir, "0123abcd", NULL, NULL), 0);
}

/* The sweep matches what libddp names its segments (workenv_shm_name, one
 * format for both sides): this agent's nonce, any run id (even one with
 * bytes a file name cannot hold), and not another agent's. */
static void test_it_removes_the_names_libddp_makes(void **state)
{
	char a[256], b[256], c[256];

	workenv_shm_name(a, sizeof(a), "my job/1", 2, 29500, 3, 1000, "0123abcd");
	workenv_shm_name(b, sizeof(b), "my job/1", 2, 29500, 3, 1000, "ffff0000");
	workenv_shm_name(c, sizeof(c), "my job/1", 2, 29500, 3, 1000, "");
	assert_string_equal(a, "/ddp-my_job_1-r2-p29500-n3-u1000-a0123abcd");
	touch(a + 1); /* shm_open's names start with '/'; /dev/shm's entries do not */
	touch(b + 1);
	touch(c + 1);
	assert_int_equal(shmsweep_remove(dir, "0123abcd", NULL, NULL), 1);
	assert_false(exists(a + 1));
	assert_true(exists(b + 1));
	assert_true(exists(c + 1));
}

static void test_an_empty_nonce_matches_nothing(void **state)
{
	touch("ddp-none-r0-p1-n0-u0-a");
	touch("ddp-none-r0-p1-n0-u0");
	assert_int_equal(shmsweep_remove(dir, "", NULL, NULL), 0);
	assert_true(exists("ddp-none-r0-p1-n0-u0-a"));
}

static void test_a_missing_directory_is_nothing_to_do(void **state)
{
	char p[512];

	snprintf(p, sizeof(p), "%s/absent", dir);
	assert_int_equal(shmsweep_remove(p, "0123abcd", NULL, NULL), 0);
	touch("file");
	snprintf(p, sizeof(p), "%s/file", dir);
	assert_int_equal(shmsweep_remove(p, "0123abcd", NULL, NULL), -ENOTDIR);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_only_this_agents_segments_go, setup, teardown),
		cmocka_unit_test_setup_teardown(test_it_removes_the_names_libddp_makes, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_an_empty_nonce_matches_nothing, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_a_missing_directory_is_nothing_to_do, setup,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
