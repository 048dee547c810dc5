/* ddp_spawn_prog: ddp_spawn driven from the command line, for tests.
 *   ddp_spawn_prog [--spawn-method] [--daemon] [--no-join] [--forks K]
 *                  [--sigchld ign|reaper] N MODE [ARG]
 * --forks K: fork() fails with EAGAIN after K successful calls (this program's
 * fork replaces libc's for libddp too), as at RLIMIT_NPROC.
 * --sigchld: SIGCHLD ignored, or a handler that reaps every child
 * (waitpid(-1)), set before ddp_spawn; "sigchld child ign|other" (a child
 * of ign: the disposition fn runs with) and "sigchld after ign|other" then
 * tell the disposition.
 * Modes (fn(rank)):
 *   ok           every rank calls ddp_init, all_reduces its rank, prints the sum
 *                and (stdout of rank 0) the MASTER_ADDR and DDP_STORE it was given
 *   exit R C     rank R exits with code C after 0.2 s; others sleep 30 s
 *   init R C     rank R exits with code C after 0.2 s; the others wait in
 *                ddp_init for it (DDP_TIMEOUT) until they are stopped
 *   quick C      every rank exits with code C after 0.2 s
 *   nested C     every rank runs a ddp_spawn of one process that returns C,
 *                and prints "nested rc RC: its error or ok" on stderr
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
#include <sys/wait.h>
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

static const char *sigchld_now(void)
{
	struct sigaction sa;

	sigaction(SIGCHLD, NULL, &sa);
	return sa.sa_handler == SIG_IGN ? "ign" : "other";
}

static void reaper(int sig)
{
	int saved = errno;

	(void)sig;
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
	errno = saved;
}

static int inner(int rank, void *p)
{
	(void)rank;
	return ((struct args *)p)->a;
}

static int fn(int rank, void *p)
{
	struct args *a = p;

	if (!strcmp(a->mode, "nested")) {
		struct ddp_spawn_options o;
		struct ddp_spawn_ctx *sc = NULL;
		int rc;

		ddp_spawn_options_init(&o);
		rc = ddp_spawn(inner, a, 1, &o, &sc);
		fprintf(stderr, "nested rc %d: %s\n", rc, rc ? ddp_errmsg() : "ok");
		ddp_spawn_free(sc);
		return 0;
	}

	if (!strcmp(a->mode, "quick")) {
		if (rank == 0)
			fprintf(stderr, "sigchld child %s\n", sigchld_now());
		usleep(200000);
		return a->a;
	}

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
	if (!strcmp(a->mode, "init") && rank != a->a) {
		struct ddp_ctx *ctx;

		return ddp_init(NULL, &ctx) < 0 ? 1 : ddp_finalize(ctx) < 0;
	}
	if (!strcmp(a->mode, "exit") || !strcmp(a->mode, "init")) {
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
		else if (!strcmp(argv[i], "--sigchld") && i + 1 < argc) {
			struct sigaction sa;
			memset(&sa, 0, sizeof(sa));
			sa.sa_handler = !strcmp(argv[++i], "ign") ? SIG_IGN : reaper;
			sa.sa_flags = SA_RESTART;
			sigaction(SIGCHLD, &sa, NULL);
		}
	}
	if (argc - i < 2)
		return 2;
	n = atoi(argv[i]);
	a.mode = argv[i + 1];
	a.a = argc - i > 2 ? atoi(argv[i + 2]) : 0;
	a.b = argc - i > 3 ? atoi(argv[i + 3]) : 0;
	o.grace_ms = 2000;
	rc = ddp_spawn(fn, &a, n, &o, &sc);
	printf("sigchld after %s\n", sigchld_now());
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
