/* watchdog: kill the worker groups if ddprun dies (see watchdog.h). */
#include "watchdog.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "procsweep.h"
#include "shmsweep.h"
#include "util.h"

#define WATCHDOG_MAX_GROUPS (1 << 20)
#define WATCHDOG_STACK	    (64 * 1024)
#define WATCHDOG_DIR_MAX    4000 /* a directory message fits in PIPE_BUF */
#define MSG_DIR		    INT32_MIN

/* What the watchdog knows besides the groups: its own mapping, filled before
 * the clone (the nonce) or through the pipe (the directory). */
struct wd_state {
	int fd;
	char nonce[SHMSWEEP_NONCE_LEN + 8];
	char marker[SHMSWEEP_NONCE_LEN + 32]; /* "" when there is no nonce */
	char dir[WATCHDOG_DIR_MAX + 4];	      /* "" until ddprun sends it */
	char scratch[64 * 1024] __attribute__((aligned(8)));
};

/* The watchdog shares ddprun's memory (clone with CLONE_VM, its own stack):
 * a fork copied ddprun's page tables, and every page ddprun then wrote cost
 * it a copy-on-write fault; together about 2.5 ms of a 9 ms launch here.
 * Sharing memory binds the child: it runs beside ddprun's threads, so it
 * calls only system calls through syscall() (no malloc, no stdio, no lazily
 * bound function of its own: syscall() is bound before the clone) and keeps
 * every signal blocked (ddprun's handlers, copied, must never run in it).
 * Its only shared writes are errno's, on failures that come only once
 * ddprun is gone. Its table of groups is its own mapping. */

/* ddprun died: kill its workers' groups, then what escaped them, then
 * remove what nobody else will (shared memory, the temporary directory). */
PROCSWEEP_RAW static void clean_up(struct wd_state *st, const int32_t *groups, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		syscall(SYS_kill, -groups[i], SIGKILL);
	if (st->marker[0] != '\0') {
		procsweep_kill_marked(st->marker, 0, NULL, 0, st->scratch, sizeof(st->scratch));
		shmsweep_remove("/dev/shm", st->nonce, NULL, NULL);
	}
	if (st->dir[0] != '\0')
		procsweep_rmflat(st->dir, st->scratch, sizeof(st->scratch));
}

/* Messages are int32: pgid > 0 registers, -pgid forgets, 0 says goodbye;
 * MSG_DIR, a length and that many bytes (padded to 4) name the directory. */
PROCSWEEP_RAW static int watchdog_main(void *arg)
{
	struct wd_state *st = arg;
	int fd = st->fd;
	size_t n = 0, i, cap = WATCHDOG_MAX_GROUPS;
	bool clean = false;
	int32_t buf[256];
	int32_t *groups;
	long null, dir_len = -1, dir_at = 0; /* -1: no directory message under way */

	syscall(SYS_setsid);
	/* Not "ddprun-...": `pkill -9 ddprun` (a pattern on the name) would
	 * kill both, and the workers' children would outlive them. */
	syscall(SYS_prctl, PR_SET_NAME, "ddp-watchdog", 0, 0, 0);
	/* Keep no pipe of the caller's open: a test reading ddprun's output must
	 * see end-of-file when ddprun exits, not when the watchdog does. */
	null = syscall(SYS_openat, AT_FDCWD, "/dev/null", O_RDWR);
	if (null >= 0) {
		for (i = 0; i < 3; i++)
			if ((long)i != null)
				syscall(SYS_dup3, (int)null, (int)i, 0);
		if (null > 2)
			syscall(SYS_close, (int)null);
	}
	/* Every descriptor but 0-2 and the pipe (fd > 2: ddprun keeps 0-2 open). */
	if (fd > 3)
		syscall(SYS_close_range, 3, fd - 1, 0);
	syscall(SYS_close_range, fd + 1, ~0U, 0);
	/* Reserved, not committed: pages appear as groups are registered. */
	groups = (int32_t *)syscall(SYS_mmap, NULL, cap * sizeof(*groups), PROT_READ | PROT_WRITE,
				    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (groups == MAP_FAILED)
		cap = 0;
	for (;;) {
		long r = syscall(SYS_read, fd, buf, sizeof(buf));

		if (r <= 0)
			break; /* every signal is blocked: no EINTR */
		for (i = 0; i < (size_t)r / sizeof(buf[0]); i++) {
			int32_t m = buf[i];
			size_t k;

			if (dir_len == -2) { /* the length */
				dir_len = m >= 0 && m <= WATCHDOG_DIR_MAX ? m : 0;
				dir_at = 0;
				st->dir[0] = '\0';
				continue;
			}
			if (dir_len >= 0 && dir_at < dir_len) {
				for (k = 0; k < 4; k++)
					if (dir_at < dir_len)
						st->dir[dir_at++] = ((const char *)&buf[i])[k];
				if (dir_at == dir_len) {
					st->dir[dir_at] = '\0';
					dir_len = -1;
				}
				continue;
			}
			dir_len = -1;
			if (m == MSG_DIR) {
				dir_len = -2;
			} else if (m == 0) {
				clean = true;
				n = 0;
			} else if (m > 0) {
				if (n == cap) /* cannot track it: kill now */
					syscall(SYS_kill, -m, SIGKILL);
				else
					groups[n++] = m;
			} else {
				for (k = 0; k < n; k++) {
					if (groups[k] == -m) {
						groups[k] = groups[--n];
						break;
					}
				}
			}
		}
	}
	if (!clean)
		clean_up(st, groups, n);
	syscall(SYS_exit, 0);
	return 0;
}

/* Valgrind aborts the whole program on a clone that is neither a thread nor
 * a fork (its preloaded libraries give it away). */
static bool under_valgrind(void)
{
	const char *p = getenv("LD_PRELOAD");

	return p && strstr(p, "/vgpreload_");
}

int watchdog_start(struct watchdog *w, const char *nonce)
{
	struct wd_state *st;
	int p[2];
	sigset_t all, old;
	void *stack;
	pid_t pid;
	int err;

	w->pid = 0;
	w->fd = -1;
	/* Never unmapped, as the stack: the watchdog uses it after ddprun exited. */
	st = mmap(NULL, sizeof(*st), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (st == MAP_FAILED)
		return -errno;
	if (nonce != NULL && strlen(nonce) < sizeof(st->nonce) &&
	    procsweep_marker(st->marker, sizeof(st->marker), nonce) == 0)
		strcpy(st->nonce, nonce);
	else
		st->marker[0] = '\0';
	if (pipe2(p, O_CLOEXEC) != 0) {
		err = errno;
		munmap(st, sizeof(*st));
		return -err;
	}
	st->fd = p[0];
	stack = mmap(NULL, WATCHDOG_STACK, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (stack == MAP_FAILED) {
		err = errno;
		close(p[0]);
		close(p[1]);
		munmap(st, sizeof(*st));
		return -err;
	}
	syscall(SYS_getpid); /* bind syscall() here, not in the child */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	/* Not CLONE_FILES: the child closes its own copies of ddprun's files. */
	pid = under_valgrind() ? -1
			       : clone(watchdog_main, (char *)stack + WATCHDOG_STACK,
				       CLONE_VM | SIGCHLD, st);
	if (pid < 0) { /* the same child, forked */
		munmap(stack, WATCHDOG_STACK);
		stack = MAP_FAILED;
		pid = fork();
		if (pid == 0)
			watchdog_main(st);
	}
	err = errno;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	close(p[0]);
	if (pid < 0) {
		if (stack != MAP_FAILED)
			munmap(stack, WATCHDOG_STACK);
		munmap(st, sizeof(*st));
		close(p[1]);
		return -err;
	}
	w->pid = pid;
	w->fd = p[1];
	return 0;
}

static void send_msg(struct watchdog *w, int32_t m)
{
	if (w->fd >= 0 && util_write_all(w->fd, &m, sizeof(m)) != 0) {
		/* The watchdog is gone; nothing more to tell it. */
		close(w->fd);
		w->fd = -1;
	}
}

void watchdog_tmpdir(struct watchdog *w, const char *dir)
{
	int32_t msg[2 + WATCHDOG_DIR_MAX / 4 + 1] = {MSG_DIR};
	size_t len = strlen(dir);

	if (w->fd < 0 || len > WATCHDOG_DIR_MAX)
		return; /* (a longer $TMPDIR: the directory may stay after kill -9) */
	msg[1] = (int32_t)len;
	memcpy(&msg[2], dir, len);
	/* One write below PIPE_BUF: no worker's registration comes between. */
	if (util_write_all(w->fd, msg, (2 + (len + 3) / 4) * sizeof(msg[0])) != 0) {
		close(w->fd);
		w->fd = -1;
	}
}

void watchdog_forget(struct watchdog *w, pid_t pgid)
{
	send_msg(w, -(int32_t)pgid);
}

void watchdog_stop(struct watchdog *w)
{
	send_msg(w, 0);
	if (w->fd >= 0)
		close(w->fd);
	w->fd = -1;
	/* Not waited for: it exits by itself once it reads the goodbye, and
	 * whoever adopts it reaps it. */
	w->pid = 0;
}
