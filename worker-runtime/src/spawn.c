/* spawn: torch.multiprocessing.spawn for C. The parent gives each child the
 * environment a single-node launcher would (ddprun's own builder, workenv.h),
 * then watches them through pidfds;
 * the first failure stops the others (SIGTERM, grace, SIGKILL) and is reported
 * as torch reports it ("process 1 terminated with exit code 3").
 *
 * Start methods: fork runs fn in a copy of the parent (the child never returns
 * into the caller: it _exits with fn's value); spawn re-executes the program
 * with the same argv and DDP_SPAWN_RANK set, and the child's first ddp_spawn()
 * call runs fn(rank, arg) instead of spawning (C's answer to pickling fn). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ddp_internal.h"
#include "util.h"
#include "workenv.h"

#define SPAWN_RANK_ENV "DDP_SPAWN_RANK"

struct ddp_spawn_ctx {
	int nprocs;
	int *pids;
	int *pidfds; /* -1 where pidfd_open is unavailable */
	int *done;   /* reaped */
	int nleft;
	int failed_rank, exit_code, signo;
	int unknown_rank; /* first child whose status another waitpid took, or -1 */
	int holds_sigchld;
	int64_t grace_ms;
	/* The children's shared-memory segment (shm.c). Unlinked once every
	 * child attached, or by a child whose ddp_init failed; one stopped
	 * while it waited for the others (a child failed first) leaves it, so
	 * the parent unlinks it once the last child is reaped. */
	char shm_name[200];
};

static int spawn_counter;
static int spawn_child_ran;

/* With SIGCHLD ignored (or SA_NOCLDWAIT) the kernel reaps the children
 * itself and waitpid fails with ECHILD: their statuses would be lost. While
 * children of ddp_spawn run, SIGCHLD is made reapable (the program's handler
 * kept, SIG_IGN made SIG_DFL), and put back once the last of them is reaped
 * (or freed). Children get the program's disposition back before fn. */
static pthread_mutex_t sigchld_lock = PTHREAD_MUTEX_INITIALIZER;
static int sigchld_holders, sigchld_changed;
static struct sigaction sigchld_saved;

static void hold_sigchld(struct ddp_spawn_ctx *sc)
{
	pthread_mutex_lock(&sigchld_lock);
	if (sigchld_holders++ == 0 && sigaction(SIGCHLD, NULL, &sigchld_saved) == 0 &&
	    (sigchld_saved.sa_handler == SIG_IGN || (sigchld_saved.sa_flags & SA_NOCLDWAIT))) {
		struct sigaction sa = sigchld_saved;
		if (sa.sa_handler == SIG_IGN)
			sa.sa_handler = SIG_DFL;
		sa.sa_flags &= ~SA_NOCLDWAIT;
		sigchld_changed = sigaction(SIGCHLD, &sa, NULL) == 0;
	}
	pthread_mutex_unlock(&sigchld_lock);
	sc->holds_sigchld = 1;
}

static void release_sigchld(struct ddp_spawn_ctx *sc)
{
	if (!sc->holds_sigchld)
		return;
	sc->holds_sigchld = 0;
	pthread_mutex_lock(&sigchld_lock);
	if (--sigchld_holders == 0 && sigchld_changed) {
		sigaction(SIGCHLD, &sigchld_saved, NULL);
		sigchld_changed = 0;
	}
	pthread_mutex_unlock(&sigchld_lock);
}

void ddp_spawn_options_init(struct ddp_spawn_options *o)
{
	memset(o, 0, sizeof(*o));
	o->join = 1;
	o->start_method = DDP_START_FORK;
}

static int exit_code_of(int rc)
{
	return rc >= 0 && rc <= 255 ? rc : 1;
}

/* In the child, before fn or exec: torchrun's contract for one node. No
 * MASTER_ADDR/MASTER_PORT: libddp has no store server to offer (the store
 * lives in the launcher), and an address with nothing behind it would make
 * ddp_init wait for a store that never answers. DDP_STORE=0 says so: the
 * children meet through shared memory alone, their environment being
 * consistent by construction. What a launcher above this process set for it
 * (shm nonce, hang files, error file, signals) is passed on. */
static int child_env(int rank, int nprocs, const char *run_id, int daemon)
{
	struct workenv_job j = {
		.world = {.world_size = nprocs, .group_world_size = 1, .role_world_size = nprocs},
		.local_world_size = nprocs,
		.role = "default",
		.run_id = run_id,
		.shm_nonce = getenv(WORKENV_DDP_SHM_NONCE),
		.progress_file = getenv(WORKENV_DDP_PROGRESS_FILE),
		.timer_file = getenv(WORKENV_TORCHELASTIC_TIMER_FILE),
		.signals_to_handle = getenv(WORKENV_TORCHELASTIC_SIGNALS_TO_HANDLE),
	};
	char **env = workenv_build(environ, &j, rank, getenv(WORKENV_TORCHELASTIC_ERROR_FILE));

	if (env == NULL)
		return -ENOMEM;
	environ = env; /* this process's from now on, never freed */
	setenv("DDP_STORE", "0", 1);
	/* Non-daemon children outlive the parent: ddp_init must not undo that. */
	setenv("DDP_PDEATHSIG", daemon ? "1" : "0", 1);
	return 0;
}

/* argv of this process from /proc/self/cmdline (NULL-terminated, malloc'd). */
static char **self_argv(void)
{
	int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
	size_t cap = 4096, len = 0, n = 0;
	char *buf = malloc(cap), **argv;
	ssize_t r;

	if (fd < 0 || !buf) {
		if (fd >= 0)
			close(fd);
		free(buf);
		return NULL;
	}
	while ((r = read(fd, buf + len, cap - len - 1)) > 0) {
		len += (size_t)r;
		if (len + 1 == cap) {
			char *p = realloc(buf, cap * 2);
			if (!p)
				break;
			buf = p;
			cap *= 2;
		}
	}
	close(fd);
	buf[len] = '\0';
	for (size_t i = 0; i < len; i++)
		n += buf[i] == '\0';
	argv = n ? calloc(n + 2, sizeof(char *)) : NULL;
	if (!argv) {
		free(buf);
		return NULL;
	}
	for (size_t i = 0, k = 0; i < len && k < n; k++) {
		argv[k] = buf + i;
		i += strlen(buf + i) + 1;
	}
	return argv; /* argv[0] points at buf: freed together by the caller */
}

/* status NULL: the child is gone but another waitpid of this program (a
 * SIGCHLD handler's) took its status: it is not counted a success. */
static void reap_one(struct ddp_spawn_ctx *sc, int i, const int *status_p)
{
	int status = status_p ? *status_p : 0;

	sc->done[i] = 1;
	if (--sc->nleft == 0) {
		release_sigchld(sc);
		shm_unlink(sc->shm_name); /* ENOENT mostly: it went once all attached */
	}
	if (sc->pidfds[i] >= 0) {
		close(sc->pidfds[i]);
		sc->pidfds[i] = -1;
	}
	if (!status_p && sc->unknown_rank < 0)
		sc->unknown_rank = i;
	if (sc->failed_rank >= 0 || !status_p)
		return;
	if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
		sc->failed_rank = i;
		sc->exit_code = WEXITSTATUS(status);
		sc->signo = 0;
	} else if (WIFSIGNALED(status)) {
		sc->failed_rank = i;
		sc->exit_code = -1;
		sc->signo = WTERMSIG(status);
	}
}

/* Reaps whatever has exited; returns how many are still running. */
static int reap(struct ddp_spawn_ctx *sc)
{
	for (int i = 0; i < sc->nprocs; i++) {
		int status;
		if (sc->done[i])
			continue;
		pid_t p = waitpid(sc->pids[i], &status, WNOHANG);
		if (p == sc->pids[i])
			reap_one(sc, i, &status);
		else if (p < 0 && errno == ECHILD)
			reap_one(sc, i, NULL); /* reaped elsewhere: its status is unknown */
	}
	return sc->nleft;
}

/* Sleeps until a child exits or ms pass (ms < 0: forever). */
static void wait_event(struct ddp_spawn_ctx *sc, int ms)
{
	struct pollfd p[sc->nprocs];
	int n = 0, all_fds = 1;

	for (int i = 0; i < sc->nprocs; i++) {
		if (sc->done[i])
			continue;
		if (sc->pidfds[i] < 0)
			all_fds = 0;
		else
			p[n++] = (struct pollfd){.fd = sc->pidfds[i], .events = POLLIN};
	}
	if (!all_fds && (ms < 0 || ms > 10))
		ms = 10; /* no pidfds: poll waitpid often */
	poll(p, (nfds_t)n, ms);
}

static void stop_all(struct ddp_spawn_ctx *sc)
{
	int64_t end;

	/* SIGCONT too: a stopped child would never act on SIGTERM. */
	for (int i = 0; i < sc->nprocs; i++)
		if (!sc->done[i]) {
			kill(sc->pids[i], SIGTERM);
			kill(sc->pids[i], SIGCONT);
		}
	end = util_now_ms() + sc->grace_ms;
	while (reap(sc) > 0) {
		int64_t left = end - util_now_ms();
		if (left <= 0)
			break;
		wait_event(sc, (int)(left > 100 ? 100 : left));
	}
	for (int i = 0; i < sc->nprocs; i++)
		if (!sc->done[i])
			kill(sc->pids[i], SIGKILL);
	while (reap(sc) > 0)
		wait_event(sc, 100);
}

static int failure_error(const struct ddp_spawn_ctx *sc)
{
	if (sc->failed_rank == sc->unknown_rank)
		return ddpi_err(DDP_ECHILD,
				"ddp_spawn: process %d (pid %d) exited with a status that is "
				"unknown: another waitpid in this program (a SIGCHLD handler?) "
				"reaped it first",
				sc->failed_rank, sc->pids[sc->failed_rank]);
	if (sc->signo) {
		const char *abbrev = sigabbrev_np(sc->signo);
		return ddpi_err(DDP_ECHILD, "ddp_spawn: process %d terminated with signal SIG%s",
				sc->failed_rank, abbrev ? abbrev : "?");
	}
	return ddpi_err(DDP_ECHILD, "ddp_spawn: process %d terminated with exit code %d",
			sc->failed_rank, sc->exit_code);
}

int ddp_spawn_join(struct ddp_spawn_ctx *sc, int64_t timeout_ms)
{
	int64_t end = timeout_ms < 0 || timeout_ms > DDPI_TIMEOUT_MAX_MS
			      ? INT64_MAX
			      : util_now_ms() + timeout_ms;

	if (!sc)
		return ddpi_err(-EINVAL, "ddp_spawn_join: no context");
	for (;;) {
		int left = reap(sc);
		if (sc->failed_rank >= 0) {
			stop_all(sc);
			return failure_error(sc);
		}
		/* A status taken by another waitpid does not stop the others
		 * (it may have been 0); it fails the whole once they are done. */
		if (left == 0 && sc->unknown_rank >= 0) {
			sc->failed_rank = sc->unknown_rank;
			sc->exit_code = -1;
			sc->signo = 0;
			return failure_error(sc);
		}
		if (left == 0)
			return 1;
		int64_t now = util_now_ms();
		if (now >= end)
			return 0;
		wait_event(sc, end == INT64_MAX ? -1 : (int)(end - now > 1000 ? 1000 : end - now));
	}
}

int ddp_spawn_failure(const struct ddp_spawn_ctx *sc, int *rank, int *exit_code, int *signo)
{
	if (!sc)
		return ddpi_err(-ENOENT, "ddp_spawn_failure: no context (NULL)");
	if (sc->failed_rank < 0)
		return ddpi_err(-ENOENT, "ddp_spawn_failure: no process failed");
	if (rank)
		*rank = sc->failed_rank;
	if (exit_code)
		*exit_code = sc->exit_code;
	if (signo)
		*signo = sc->signo;
	return 0;
}

const int *ddp_spawn_pids(const struct ddp_spawn_ctx *sc)
{
	return sc ? sc->pids : NULL;
}

void ddp_spawn_free(struct ddp_spawn_ctx *sc)
{
	if (!sc)
		return;
	if (sc->nleft > 0)
		stop_all(sc);
	release_sigchld(sc);
	for (int i = 0; i < sc->nprocs; i++)
		if (sc->pidfds[i] >= 0)
			close(sc->pidfds[i]);
	free(sc->pids);
	free(sc->pidfds);
	free(sc->done);
	free(sc);
}

/* The re-executed child of the spawn start method: run fn and leave. */
static int run_spawned_child(int (*fn)(int, void *), void *arg, const char *v)
{
	int rank;

	spawn_child_ran = 1;
	if (util_parse_int(v, 0, 1 << 20, &rank) < 0) {
		fprintf(stderr, "ddp_spawn: bad %s='%s'\n", SPAWN_RANK_ENV, v);
		exit(1);
	}
	if (!fn) { /* the parent refused it; a hand-set variable must not crash */
		fprintf(stderr, "ddp_spawn: %s is set (a spawned child) but fn is NULL\n",
			SPAWN_RANK_ENV);
		exit(1);
	}
	unsetenv(SPAWN_RANK_ENV);
	exit(exit_code_of(fn(rank, arg)));
}

int ddp_spawn(int (*fn)(int rank, void *arg), void *arg, int nprocs,
	      const struct ddp_spawn_options *o, struct ddp_spawn_ctx **out)
{
	struct ddp_spawn_options defaults;
	struct ddp_spawn_ctx *sc;
	const char *v = getenv(SPAWN_RANK_ENV);
	char run_id[64], **argv = NULL;
	int rc;

	if (v && !spawn_child_ran)
		run_spawned_child(fn, arg, v);
	if (out)
		*out = NULL;
	if (!o) {
		ddp_spawn_options_init(&defaults);
		o = &defaults;
	}
	if (!fn || nprocs < 1 || (!o->join && !out))
		return ddpi_err(-EINVAL, "ddp_spawn: need fn, nprocs >= 1, and out without join");
	if (o->start_method != DDP_START_FORK && o->start_method != DDP_START_SPAWN)
		return ddpi_err(-EINVAL, "ddp_spawn: unknown start method %d",
				(int)o->start_method);
	if (o->start_method == DDP_START_SPAWN && !(argv = self_argv()))
		return ddpi_err(-ENOMEM, "ddp_spawn: cannot read /proc/self/cmdline");
	sc = calloc(1, sizeof(*sc));
	if (!sc || !(sc->pids = calloc((size_t)nprocs, sizeof(int))) ||
	    !(sc->pidfds = calloc((size_t)nprocs, sizeof(int))) ||
	    !(sc->done = calloc((size_t)nprocs, sizeof(int)))) {
		if (argv)
			free(argv[0]);
		free(argv);
		ddp_spawn_free(sc);
		return ddpi_err(-ENOMEM, "ddp_spawn: out of memory");
	}
	sc->nprocs = nprocs;
	sc->failed_rank = -1;
	sc->unknown_rank = -1;
	sc->grace_ms = o->grace_ms <= 0			   ? 5000
		       : o->grace_ms > DDPI_TIMEOUT_MAX_MS ? DDPI_TIMEOUT_MAX_MS
							   : o->grace_ms;
	for (int i = 0; i < nprocs; i++)
		sc->pidfds[i] = -1;
	snprintf(run_id, sizeof(run_id), "spawn-%d-%d", (int)getpid(), spawn_counter++);
	/* As the children name it: child_env gives restart 0, no port, node 0,
	 * and this process's nonce. */
	workenv_shm_name(sc->shm_name, sizeof(sc->shm_name), run_id, 0, 0, 0, (unsigned)getuid(),
			 getenv(WORKENV_DDP_SHM_NONCE) ? getenv(WORKENV_DDP_SHM_NONCE) : "");
	fflush(NULL); /* a child must not print the parent's buffered output again */
	hold_sigchld(sc);

	for (int r = 0; r < nprocs; r++) {
		pid_t parent = getpid();
		pid_t pid = fork();
		if (pid < 0) {
			rc = ddpi_err(-errno, "ddp_spawn: fork: %s", strerror(errno));
			/* Only the children forked so far: an unforked one's pid 0
			 * would make kill() signal this whole process group. */
			sc->nprocs = r;
			stop_all(sc);
			goto out_err;
		}
		if (pid == 0) {
			if (sigchld_changed) /* fn runs as the program set it up */
				sigaction(SIGCHLD, &sigchld_saved, NULL);
			/* The parent's holds are not this process's: a ddp_spawn
			 * in fn must make SIGCHLD reapable anew (it counted itself
			 * a later holder, and its own children's statuses were lost
			 * to an ignored SIGCHLD). Single-threaded here. */
			sigchld_holders = 0;
			sigchld_changed = 0;
			pthread_mutex_init(&sigchld_lock, NULL);
			if (o->daemon &&
			    (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent))
				_exit(1);
			if (child_env(r, nprocs, run_id, o->daemon) < 0) {
				fprintf(stderr, "ddp_spawn: out of memory\n");
				_exit(1);
			}
			if (o->start_method == DDP_START_SPAWN) {
				char rv[16];
				snprintf(rv, sizeof(rv), "%d", r);
				setenv(SPAWN_RANK_ENV, rv, 1);
				execv("/proc/self/exe", argv);
				fprintf(stderr, "ddp_spawn: exec /proc/self/exe: %s\n",
					strerror(errno));
				_exit(127);
			}
			rc = fn(r, arg);
			fflush(NULL);
			_exit(exit_code_of(rc));
		}
		sc->pids[r] = pid;
		sc->pidfds[r] = (int)syscall(SYS_pidfd_open, pid, 0);
		sc->nleft++;
	}
	if (argv)
		free(argv[0]);
	free(argv);
	if (!o->join) {
		*out = sc;
		return 0;
	}
	rc = ddp_spawn_join(sc, -1);
	if (rc == 1)
		rc = 0;
	if (out)
		*out = sc;
	else
		ddp_spawn_free(sc);
	return rc;
out_err:
	if (argv)
		free(argv[0]);
	free(argv);
	ddp_spawn_free(sc);
	return rc;
}
