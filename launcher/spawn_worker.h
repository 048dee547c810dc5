/* spawn_worker: start one worker with vfork-style clone + exec.
 *
 * clone(CLONE_VM | CLONE_VFORK) as posix_spawn does: no page tables copied,
 * no copy-on-write faults in ddprun afterwards (a plain fork costs more than
 * the exec of a small worker), ddprun suspended until the child has exec'd.
 * The child only makes system calls and writes to its own stack.
 *
 * The child becomes the leader of its own session and process group (pgid ==
 * pid, as torchrun's start_new_session), asks the kernel for SIGKILL when
 * ddprun dies (PR_SET_PDEATHSIG, then re-checks that ddprun is still its
 * parent), registers its group with the watchdog (which kills the group's
 * grandchildren if ddprun is SIGKILLed), puts stdout/stderr in place, closes
 * every other descriptor, restores the signal state ddprun was started with,
 * and execs. Signals are blocked in ddprun around fork so that no handler of
 * ddprun's ever runs in the child. A failed exec prints one line on the
 * worker's stderr and exits 127 (not found) or 126. */
#ifndef DDP_SPAWN_WORKER_H
#define DDP_SPAWN_WORKER_H

#include <sched.h>
#include <sys/resource.h>
#include <sys/types.h>

struct spawn_req {
	const char *path;    /* executable, already resolved */
	char *const *argv;   /* NULL-terminated */
	char *const *envp;   /* NULL-terminated */
	int stdout_fd;	     /* becomes fd 1; -1: inherit ddprun's */
	int stderr_fd;	     /* becomes fd 2; -1: inherit ddprun's */
	int watch_fd;	     /* watchdog registration pipe; -1: none */
	const int *dfl_sigs; /* signals to reset to SIG_DFL before exec */
	int ndfl_sigs;
	const struct rlimit *nofile; /* RLIMIT_NOFILE to give back; NULL: keep */
	const cpu_set_t *affinity;   /* --numa-binding's CPUs (numa.h); NULL: keep */
	pid_t ptracer;		     /* > 0: named the worker's ptracer (Yama) */
};

/* The pid of the new worker, or a negative errno (clone failed). */
pid_t spawn_worker(const struct spawn_req *r);

#endif
