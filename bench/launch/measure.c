/* measure: run a command R times, one after another; print the median wall
 * time in milliseconds and the largest peak RSS in KiB (wait4's ru_maxrss:
 * the command's own peak, or a reaped descendant's if larger).
 *   measure R COMMAND [ARGS...]      prints "MEDIAN_MS MAX_RSS_KIB FAILS" */
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>

extern char **environ;

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	int reps, i, fails = 0;
	long rss = 0;
	double *ms;

	if (argc < 3 || (reps = atoi(argv[1])) < 1) {
		fprintf(stderr, "usage: measure R COMMAND [ARGS...]\n");
		return 2;
	}
	ms = calloc((size_t)reps, sizeof(*ms));
	if (ms == NULL)
		return 1;
	for (i = 0; i < reps; i++) {
		struct timespec t0, t1;
		struct rusage ru;
		int status;
		pid_t pid;

		clock_gettime(CLOCK_MONOTONIC, &t0);
		if (posix_spawnp(&pid, argv[2], NULL, NULL, argv + 2, environ) != 0) {
			perror(argv[2]);
			return 1;
		}
		if (wait4(pid, &status, 0, &ru) != pid)
			return 1;
		clock_gettime(CLOCK_MONOTONIC, &t1);
		ms[i] = (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
			(double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
		if (ru.ru_maxrss > rss)
			rss = ru.ru_maxrss;
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			fails++;
	}
	qsort(ms, (size_t)reps, sizeof(*ms), cmp);
	printf("%.3f %ld %d\n", reps % 2 ? ms[reps / 2] : (ms[reps / 2 - 1] + ms[reps / 2]) / 2,
	       rss, fails);
	free(ms);
	return 0;
}
