/* ddp_spawn_prog: ddp_spawn driven from the command line, for tests.
 *   ddp_spawn_prog [--spawn-method] [--daemon] [--no-join] [--forks K] N MODE [ARG]
 * --forks K: fork() fails with EAGAIN after K successful calls (this program's
 * fork replaces libc's for libddp too), as at RLIMIT_NPROC.
 * Modes (fn(rank)):
 *   ok           every rank calls ddp_init, all_reduces its rank, prints the sum
 *                and (stdout of rank 0) the MASTER_ADDR and DDP_STORE it was given
 *   exit R C     rank R exits with code C after 0.2 s; others sleep 30 s
 *   signal R     rank R kills itself with SIGKILL; others sleep 30 s
 *   sleep        every rank prints its pid and sleeps 30 s (daemon tests)
 *   env          every rank writes its environment to $ENV_DUMP_DIR/env.RANK
 * Prints "spawn ok" or "spawn failed: <ddp_errmsg>" and the failure triple. */
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ddp.h"

static int forks_left = -1; /* --forks: successful forks left (-1: no limit) */

pid_t fork(void)
{
	static pid_t (*real_fork)(void);

	if (forks_left == 0) {
		errno = EAGAIN;
		return -1;
	}
	if (!real_fork)
		*(void **)&real_fork = dlsym(RTLD_NEXT, "fork");
	if (forks_left > 0)
		forks_left--;
	return real_fork();
}

struct args {
	const char *mode;
	int a, b;
};

static int fn(int rank, void *p)
{
	struct args *a = p;

	if (!strcmp(a->mode, "ok")) {
		struct ddp_ctx *ctx;
		if (ddp_init(NULL, &ctx) < 0) {
			fprintf(stderr, "rank %d: %s\n", rank, ddp_errmsg());
			return 1;
		}
		int v = rank;
		if (ddp_all_reduce(ctx, &v, 1, DDP_INT32, DDP_SUM) < 0)
			return 1;
		ddp_print_force(ctx, "sum %d (rank %d of %d, pid %d)\n", v, ddp_rank(ctx),
				ddp_world_size(ctx), (int)getpid());
		const char *ma = getenv("MASTER_ADDR"), *st = getenv("DDP_STORE");
		printf("env MASTER_ADDR=%s DDP_STORE=%s\n", ma ? ma : "(unset)",
		       st ? st : "(unset)");
		return ddp_finalize(ctx) < 0;
	}
	if (!strcmp(a->mode, "env")) {
		char path[4096];
		FILE *f;

		snprintf(path, sizeof(path), "%s/env.%d", getenv("ENV_DUMP_DIR"), rank);
		f = fopen(path, "w");
		if (f == NULL)
			return 1;
		for (char **e = environ; *e != NULL; e++)
			fprintf(f, "%s\n", *e);
		return fclose(f) != 0;
	}
	if (!strcmp(a->mode, "exit")) {
		if (rank == a->a) {
			usleep(200000);
			return a->b;
		}
		sleep(30);
		return 0;
	}
	if (!strcmp(a->mode, "signal")) {
		if (rank == a->a)
			raise(SIGKILL);
		sleep(30);
		return 0;
	}
	printf("child %d pid %d\n", rank, (int)getpid());
	fflush(stdout);
	sleep(30);
	return 0;
}

int main(int argc, char **argv)
{
	struct ddp_spawn_options o;
	struct ddp_spawn_ctx *sc = NULL;
	struct args a = {0};
	int i = 1, n, rc;

	ddp_spawn_options_init(&o);
	for (; i < argc && !strncmp(argv[i], "--", 2); i++) {
		if (!strcmp(argv[i], "--spawn-method"))
			o.start_method = DDP_START_SPAWN;
		else if (!strcmp(argv[i], "--daemon"))
			o.daemon = 1;
		else if (!strcmp(argv[i], "--no-join"))
			o.join = 0;
		else if (!strcmp(argv[i], "--forks") && i + 1 < argc)
			forks_left = atoi(argv[++i]);
	}
	if (argc - i < 2)
		return 2;
	n = atoi(argv[i]);
	a.mode = argv[i + 1];
	a.a = argc - i > 2 ? atoi(argv[i + 2]) : 0;
	a.b = argc - i > 3 ? atoi(argv[i + 3]) : 0;
	o.grace_ms = 2000;
	rc = ddp_spawn(fn, &a, n, &o, &sc);
	if (rc == 0 && !o.join) {
		printf("parent pid %d\n", (int)getpid());
		fflush(stdout);
		do
			rc = ddp_spawn_join(sc, 100);
		while (rc == 0);
		if (rc == 1)
			rc = 0;
	}
	if (rc < 0) {
		int fr = -1, code = -1, sig = 0;
		/* ddp_errmsg is valid until the next libddp call: ddp_spawn_failure
		 * fails too (-ENOENT) when no child did (fork failed). */
		printf("spawn failed: %s\n", ddp_errmsg());
		ddp_spawn_failure(sc, &fr, &code, &sig);
		printf("failure rank=%d code=%d signal=%d\n", fr, code, sig);
		ddp_spawn_free(sc);
		return 1;
	}
	printf("spawn ok\n");
	ddp_spawn_free(sc);
	return 0;
}
