/* measure: run commands R times each, round robin (so that a change in the
 * machine's load hits them all alike); for each, print the median wall time
 * in milliseconds and the largest peak RSS in KiB (wait4's ru_maxrss: the
 * command's own peak, or a reaped descendant's if larger), one line each:
 *   measure R COMMAND [ARGS...] [-- COMMAND [ARGS...]]...
 *   -> "MEDIAN_MS MAX_RSS_KIB FAILS" per command
 * Output of the commands goes to /dev/null. FAILS counts runs that did not
 * exit 0. */
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>

extern char **environ;

#define MAX_CMDS 8

struct cmd {
	char **argv;
	double *ms;
	long rss;
	int fails;
};

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static int run_once(struct cmd *c, int i, posix_spawn_file_actions_t *fa)
{
	struct timespec t0, t1;
	struct rusage ru;
	int status;
	pid_t pid;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (posix_spawnp(&pid, c->argv[0], fa, NULL, c->argv, environ) != 0) {
		perror(c->argv[0]);
		return -1;
	}
	if (wait4(pid, &status, 0, &ru) != pid)
		return -1;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	c->ms[i] = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
	if (ru.ru_maxrss > c->rss)
		c->rss = ru.ru_maxrss;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		c->fails++;
	return 0;
}

int main(int argc, char **argv)
{
	posix_spawn_file_actions_t fa;
	struct cmd cmds[MAX_CMDS];
	int reps, n = 0, i, k;

	if (argc < 3 || (reps = atoi(argv[1])) < 1) {
		fprintf(stderr, "usage: measure R COMMAND [ARGS...] [-- COMMAND [ARGS...]]...\n");
		return 2;
	}
	for (i = 2; i < argc && n < MAX_CMDS; n++) {
		cmds[n] =
			(struct cmd){.argv = argv + i, .ms = calloc((size_t)reps, sizeof(double))};
		if (cmds[n].ms == NULL)
			return 1;
		while (i < argc && strcmp(argv[i], "--") != 0)
			i++;
		if (i < argc)
			argv[i++] = NULL; /* ends this command's argv */
	}
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	for (i = 0; i < reps; i++)
		for (k = 0; k < n; k++)
			if (run_once(&cmds[k], i, &fa) != 0)
				return 1;
	for (k = 0; k < n; k++) {
		double *ms = cmds[k].ms;

		qsort(ms, (size_t)reps, sizeof(*ms), cmp);
		printf("%.3f %ld %d\n",
		       reps % 2 ? ms[reps / 2] : (ms[reps / 2 - 1] + ms[reps / 2]) / 2, cmds[k].rss,
		       cmds[k].fails);
		free(ms);
	}
	return 0;
}
