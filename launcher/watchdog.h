/* watchdog: a small helper process that kills the workers' process groups if
 * ddprun dies without doing it (kill -9, OOM killer).
 *
 * PR_SET_PDEATHSIG only reaches a worker itself; its children (DataLoader
 * processes, `sh -c 'a & b'`) would live on. Each worker registers its group
 * through a pipe before it execs (spawn_worker.c); ddprun holds the only other write
 * end. When the pipe reaches end-of-file without a clean goodbye, the watchdog
 * SIGKILLs every registered group, then every process that escaped the groups
 * but carries the job's DDP_SHM_NONCE (procsweep.h), removes the job's
 * leftover shared memory (shmsweep.h) and the temporary error-file directory.
 * It runs in its own session, blocks every
 * signal it can (only SIGKILL ends it), and holds no other descriptor of
 * ddprun's. It shares ddprun's memory instead of copying it (watchdog.c). */
#ifndef DDP_WATCHDOG_H
#define DDP_WATCHDOG_H

#include <sys/types.h>

struct watchdog {
	pid_t pid; /* 0: not running */
	int fd;	   /* write end; give it to spawn_req.watch_fd */
};

/* Start the watchdog (before the first worker); nonce: the workers'
 * DDP_SHM_NONCE (may be NULL). 0 or a negative errno. */
int watchdog_start(struct watchdog *w, const char *nonce);
/* The temporary directory to remove if ddprun dies: call before any worker
 * starts (the message must not interleave with their registrations). */
void watchdog_tmpdir(struct watchdog *w, const char *dir);
/* The group is gone (its leader was reaped and the group is empty): forget it,
 * so a later reuse of that number is never signalled. */
void watchdog_forget(struct watchdog *w, pid_t pgid);
/* Clean exit: the watchdog forgets every group and exits (not waited for). */
void watchdog_stop(struct watchdog *w);

#endif
