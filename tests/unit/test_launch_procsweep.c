/* Unit tests for launcher/procsweep.c: a process is killed when its
 * environment has exactly the entry DDP_SHM_NONCE=<nonce> (not a longer
 * nonce, not the text inside another variable), and the flat temporary
 * directory goes with its files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "procsweep.h"

#define NONCE "0123456789abcdef"

static char buf[64 * 1024] __attribute__((aligned(8)));

/* A child that sleeps with env as its environment. */
static pid_t sleeper(char *const env[])
{
	pid_t pid = fork();

	if (pid == 0) {
		char *argv[] = {"sleep", "1000", NULL};

		execve("/bin/sleep", argv, env);
		_exit(127);
	}
	assert_true(pid > 0);
	return pid;
}

/* Killed by SIGKILL: its exit, waited for (alarm() bounds a test that fails). */
static bool was_killed(pid_t pid)
{
	int st;

	alarm(20);
	if (waitpid(pid, &st, 0) != pid)
		return false;
	alarm(0);
	return WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL;
}

/* Still running (then stopped here). */
static bool still_runs(pid_t pid)
{
	int st;
	bool runs = waitpid(pid, &st, WNOHANG) == 0;

	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	return runs;
}

static void test_marker(void **state)
{
	char m[64];

	assert_int_equal(procsweep_marker(m, sizeof(m), NONCE), 0);
	assert_string_equal(m, "DDP_SHM_NONCE=" NONCE);
	assert_int_equal(procsweep_marker(m, 20, NONCE), -ENAMETOOLONG);
}

static void test_only_the_exact_entry_is_killed(void **state)
{
	char *ours[] = {"A=1", "DDP_SHM_NONCE=" NONCE, "B=2", NULL};
	char *first[] = {"DDP_SHM_NONCE=" NONCE, NULL};
	char *longer[] = {"DDP_SHM_NONCE=" NONCE "0", NULL};
	char *inside[] = {"X=DDP_SHM_NONCE=" NONCE, NULL};
	char *other[] = {"DDP_SHM_NONCE=fedcba9876543210", NULL};
	pid_t p[5] = {sleeper(ours), sleeper(first), sleeper(longer), sleeper(inside),
		      sleeper(other)};
	char m[64], want[PATH_MAX];
	int i;

	assert_non_null(realpath("/bin/sleep", want));
	/* execve done: each /proc/PID/environ is the new one */
	for (i = 0; i < 5; i++) {
		char path[64], exe[PATH_MAX];
		ssize_t n;

		snprintf(path, sizeof(path), "/proc/%d/exe", (int)p[i]);
		while ((n = readlink(path, exe, sizeof(exe) - 1)) < 0 ||
		       (exe[n] = '\0', strcmp(exe, want) != 0))
			usleep(1000);
	}
	assert_int_equal(procsweep_marker(m, sizeof(m), NONCE), 0);
	assert_true(procsweep_kill_marked(m, 0, NULL, 0, buf, sizeof(buf)) >= 2);
	assert_true(was_killed(p[0]));
	assert_true(was_killed(p[1]));
	assert_true(still_runs(p[2]));
	assert_true(still_runs(p[3]));
	assert_true(still_runs(p[4]));
}

static void test_rmflat(void **state)
{
	char dir[] = "/tmp/procsweep-XXXXXX", p[128];
	int fd;

	assert_non_null(mkdtemp(dir));
	snprintf(p, sizeof(p), "%s/attempt_0.0.error.json", dir);
	fd = open(p, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	close(fd);
	procsweep_rmflat(dir, buf, sizeof(buf));
	assert_int_equal(access(dir, F_OK), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_marker),
		cmocka_unit_test(test_only_the_exact_entry_is_killed),
		cmocka_unit_test(test_rmflat),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
