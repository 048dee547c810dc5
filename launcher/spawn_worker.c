/* spawn_worker: start one worker in its own session (see spawn_worker.h). */
#include "spawn_worker.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util.h"

/* Arguments the "#!"-less fallback can carry on the child's stack. */
#define SH_MAX_ARGS 4096

static void child_fail(const char *path, const char *what, int err) __attribute__((noreturn));
static void child_fail(const char *path, const char *what, int err)
{
	const char *desc = strerrordesc_np(err);

	/* Only async-signal-safe calls from here on. */
	(void)!write(2, "ddprun: ", 8);
	(void)!write(2, what, strlen(what));
	(void)!write(2, " ", 1);
	(void)!write(2, path, strlen(path));
	(void)!write(2, ": ", 2);
	(void)!write(2, desc ? desc : "error", strlen(desc ? desc : "error"));
	(void)!write(2, "\n", 1);
	_exit(err == ENOENT ? 127 : 126);
}

static void child(const struct spawn_req *r, pid_t parent, const sigset_t *mask)
	__attribute__((noreturn));
static void child(const struct spawn_req *r, pid_t parent, const sigset_t *mask)
{
	int i, argc;

	/* Own session: own process group for group signals, and no controlling
	 * terminal, so background reads/writes never stop the worker. */
	if (setsid() < 0)
		child_fail(r->path, "setsid for", errno);
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
		child_fail(r->path, "PR_SET_PDEATHSIG for", errno);
	/* ddprun may have died before prctl took effect. */
	if (getppid() != parent)
		_exit(128 + SIGKILL);
	if (r->watch_fd >= 0) {
		int32_t pid = (int32_t)getpid();

		/* Atomic (< PIPE_BUF); before exec, so before any grandchild exists. */
		if (write(r->watch_fd, &pid, sizeof(pid)) != (ssize_t)sizeof(pid))
			child_fail(r->path, "registering with the watchdog", errno);
	}
	if (r->stdout_fd >= 0 && dup2(r->stdout_fd, 1) < 0)
		child_fail(r->path, "redirecting stdout of", errno);
	if (r->stderr_fd >= 0 && dup2(r->stderr_fd, 2) < 0)
		child_fail(r->path, "redirecting stderr of", errno);
	/* Nothing of ddprun's leaks into the worker (Popen's close_fds). */
	syscall(SYS_close_range, 3, ~0U, 0);
	for (i = 0; i < r->ndfl_sigs; i++)
		signal(r->dfl_sigs[i], SIG_DFL);
	/* ddprun raised its own descriptor limit; the worker gets the original. */
	if (r->nofile != NULL)
		setrlimit(RLIMIT_NOFILE, r->nofile);
	/* Before exec, so that every thread the worker makes inherits it. The
	 * set is within ddprun's own CPUs (numa.c); should a cpuset change in
	 * between refuse it, the worker runs unpinned rather than not at all. */
	if (r->affinity != NULL)
		(void)sched_setaffinity(0, sizeof(*r->affinity), r->affinity);
	/* Under Yama's ptrace_scope 1 the hang dump's stack tool, ddprun's
	 * child and not the worker's ancestor, may attach only if the worker
	 * names ddprun (whose descendants it then may be traced by). It holds
	 * across exec; not for the worker's own children. */
	if (r->ptracer > 0)
		(void)prctl(PR_SET_PTRACER, (unsigned long)r->ptracer, 0, 0, 0);
	sigprocmask(SIG_SETMASK, mask, NULL);
	execve(r->path, r->argv, r->envp);
	if (errno == ENOEXEC) {
		/* A script without "#!": run it with /bin/sh, as execvp does. */
		for (argc = 0; r->argv[argc] != NULL; argc++)
			;
		if (argc <= SH_MAX_ARGS) {
			char *sh_argv[argc + 2];

			sh_argv[0] = "sh";
			sh_argv[1] = (char *)r->path;
			for (i = 1; i <= argc; i++)
				sh_argv[i + 1] = r->argv[i];
			execve("/bin/sh", sh_argv, r->envp);
		}
	}
	child_fail(r->path, "cannot execute", errno);
}

/* The child runs here while the parent is suspended (CLONE_VFORK): one child
 * at a time, and the parent's stack is never touched. */
static char child_stack[64 * 1024] __attribute__((aligned(64)));

static pid_t spawn_vfork(int (*fn)(void *arg), void *arg)
{
	pid_t pid =
		clone(fn, child_stack + sizeof(child_stack), CLONE_VM | CLONE_VFORK | SIGCHLD, arg);

	return pid < 0 ? -errno : pid;
}

struct child_arg {
	const struct spawn_req *r;
	pid_t parent;
	sigset_t mask;
};

static int child_main(void *p)
{
	struct child_arg *c = p;

	child(c->r, c->parent, &c->mask);
}

pid_t spawn_worker(const struct spawn_req *r)
{
	struct child_arg c = {.r = r, .parent = getpid()};
	sigset_t all;
	pid_t pid;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &c.mask);
	pid = spawn_vfork(child_main, &c);
	pthread_sigmask(SIG_SETMASK, &c.mask, NULL);
	return pid;
}
