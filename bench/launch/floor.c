/* floor: the least any launcher can do: posix_spawn N copies of a program
 * and wait for them.   floor N PROGRAM [ARGS...] */
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

extern char **environ;

int main(int argc, char **argv)
{
	int n, i, status, rc = 0;

	if (argc < 3 || (n = atoi(argv[1])) < 1) {
		fprintf(stderr, "usage: floor N PROGRAM [ARGS...]\n");
		return 2;
	}
	for (i = 0; i < n; i++) {
		pid_t pid;

		if (posix_spawn(&pid, argv[2], NULL, NULL, argv + 2, environ) != 0) {
			perror("posix_spawn");
			return 1;
		}
	}
	for (i = 0; i < n; i++)
		if (wait(&status) > 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
			rc = 1;
	return rc;
}
