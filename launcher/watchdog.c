/* watchdog: kill the worker groups if ddprun dies (see watchdog.h). */
#include "watchdog.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util.h"

#define WATCHDOG_MAX_GROUPS (1 << 20)

/* Messages are int32: pgid > 0 registers, -pgid forgets, 0 says goodbye. */
static void watchdog_main(int fd) __attribute__((noreturn));
static void watchdog_main(int fd)
{
	static const int ignored[] = {SIGINT,  SIGTERM, SIGHUP,	 SIGQUIT, SIGPIPE,
				      SIGUSR1, SIGUSR2, SIGTSTP, SIGTTIN, SIGTTOU};
	pid_t *groups = NULL;
	size_t n = 0, cap = 0, i;
	bool clean = false;
	int32_t buf[256];
	sigset_t none;
	int null;

	setsid();
	prctl(PR_SET_NAME, "ddprun-watchdog");
	for (i = 0; i < sizeof(ignored) / sizeof(ignored[0]); i++)
		signal(ignored[i], SIG_IGN);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	/* Keep no pipe of the caller's open: a test reading ddprun's output must
	 * see end-of-file when ddprun exits, not when the watchdog does. */
	null = open("/dev/null", O_RDWR);
	if (null >= 0) {
		dup2(null, 0);
		dup2(null, 1);
		dup2(null, 2);
	}
	/* Every descriptor but 0-2 and the pipe (fd > 2: ddprun keeps 0-2 open). */
	if (fd > 3)
		syscall(SYS_close_range, 3, fd - 1, 0);
	syscall(SYS_close_range, fd + 1, ~0U, 0);
	for (;;) {
		ssize_t r = read(fd, buf, sizeof(buf));

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		for (i = 0; i < (size_t)r / sizeof(buf[0]); i++) {
			int32_t m = buf[i];
			size_t k;

			if (m == 0) {
				clean = true;
				n = 0;
			} else if (m > 0) {
				if (n == cap) {
					size_t nc = cap ? cap * 2 : 64;
					pid_t *g = nc <= WATCHDOG_MAX_GROUPS
							   ? realloc(groups, nc * sizeof(*g))
							   : NULL;

					if (g == NULL) { /* cannot track it: kill now */
						kill(-m, SIGKILL);
						continue;
					}
					groups = g;
					cap = nc;
				}
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
		for (i = 0; i < n; i++)
			kill(-groups[i], SIGKILL);
	_exit(0);
}

int watchdog_start(struct watchdog *w)
{
	int p[2];
	sigset_t all, old;
	pid_t pid;
	int err;

	w->pid = 0;
	w->fd = -1;
	if (pipe2(p, O_CLOEXEC) != 0)
		return -errno;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	/* A real fork: it must outlive ddprun. (Exec'ing a fresh ddprun instead
	 * measured slower: its dynamic linking competes with the workers.) */
	pid = fork();
	if (pid == 0) {
		close(p[1]);
		watchdog_main(p[0]);
	}
	err = errno;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	close(p[0]);
	if (pid < 0) {
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
