/* agent_sig: signals told apart by sender (see agent_sig.h). */
#include "agent_sig.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proc_info.h"
#include "slurm.h"

/* Ancestors looked at for the step's slurmstepd (srun's wrappers between). */
#define STEPD_DEPTH 16

/* The handler only counts and wakes: both must be lock-free to be
 * async-signal-safe. */
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "atomic_uint is not lock-free");
_Static_assert(ATOMIC_POINTER_LOCK_FREE == 2, "atomic pointers are not lock-free");

struct agent_sig {
	int sigs[NSIG];
	struct sigaction old[NSIG];
	int nsigs;
	agent_sig_cb cb;
	void *arg;
	uv_async_t wake; /* the handler's news for the loop */
	bool wake_open;
	pid_t stepd;	/* this step's slurmstepd; 0: none (no srun step) */
	bool stepd_all; /* its signals reach the workers too (proctrack/linuxproc) */
	/* Deliveries the handler saw and the loop has not handled, by sender. */
	atomic_uint by_stepd[NSIG];
	atomic_uint by_other[NSIG];
};

/* The set each signal's deliveries are counted for, or NULL. */
static struct agent_sig *_Atomic owner[NSIG];
/* Handlers running now, on any thread (libuv's pool threads may take a
 * signal too): close waits for them, so none still uses a set it read
 * from owner[] once the set is closed and freed. */
static atomic_int in_handler;

static const char *env_of(const char *name)
{
	return getenv(name);
}

/* Under srun (a step id): the nearest ancestor that is slurmstepd, or 0. */
static pid_t find_stepd(void)
{
	struct proc_info pi;
	pid_t pid = getppid();
	char why[300];
	int i;

	if (getenv("SLURM_JOB_ID") == NULL ||
	    slurm_step(env_of, why, sizeof(why)) != SLURM_STEP_SRUN)
		return 0;
	for (i = 0; i < STEPD_DEPTH && pid > 1; i++) {
		if (proc_info_read(pid, &pi) != 0)
			return 0;
		if (strcmp(pi.comm, "slurmstepd") == 0)
			return pid;
		pid = pi.ppid;
	}
	return 0;
}

/* Async-signal-safe: counts the delivery by sender and wakes the loop. */
static void on_signal(int sig, siginfo_t *si, void *ctx)
{
	struct agent_sig *s;
	int saved = errno;

	(void)ctx;
	atomic_fetch_add(&in_handler, 1);
	if (sig > 0 && sig < NSIG && (s = atomic_load(&owner[sig])) != NULL) {
		/* si_code <= 0: sent by a process (kill, sigqueue), si_pid is its. */
		if (s->stepd > 0 && si != NULL && si->si_code <= 0 && si->si_pid == s->stepd)
			atomic_fetch_add(&s->by_stepd[sig], 1);
		else
			atomic_fetch_add(&s->by_other[sig], 1);
		uv_async_send(&s->wake);
	}
	atomic_fetch_sub(&in_handler, 1);
	errno = saved;
}

void agent_sig_drain(struct agent_sig *s)
{
	int i;

	/* cb may close the set (the agent ends): nsigs drops to 0. */
	for (i = 0; s != NULL && i < s->nsigs; i++) {
		int sig = s->sigs[i];
		unsigned n = atomic_exchange(&s->by_stepd[sig], 0);
		unsigned o = atomic_exchange(&s->by_other[sig], 0);

		while (n-- > 0)
			s->cb(s->arg, sig, s->stepd_all ? AGENT_SIG_STEPD_ALL : AGENT_SIG_STEPD);
		while (o-- > 0)
			s->cb(s->arg, sig, AGENT_SIG_ANYONE);
	}
}

static void on_wake(uv_async_t *h)
{
	agent_sig_drain(h->data);
}

static void on_closed(uv_handle_t *h)
{
	(void)h;
}

int agent_sig_open(uv_loop_t *loop, const int *sigs, int n, agent_sig_cb cb, void *arg,
		   struct agent_sig **out)
{
	struct agent_sig *s;
	struct sigaction sa;
	int i, rc;

	*out = NULL;
	if (n < 0 || n > NSIG)
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (s == NULL)
		return -ENOMEM;
	*out = s;
	s->cb = cb;
	s->arg = arg;
	/* Before any handler runs: it reads stepd. */
	s->stepd = find_stepd();
	s->stepd_all = s->stepd > 0 && slurm_proctrack_linuxproc(getenv("SLURM_CONF"));
	rc = uv_async_init(loop, &s->wake, on_wake);
	if (rc != 0)
		return rc;
	s->wake.data = s;
	s->wake_open = true;
	/* Waiting for a signal that may never come keeps nothing alive. */
	uv_unref((uv_handle_t *)&s->wake);
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_signal;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigfillset(&sa.sa_mask);
	for (i = 0; i < n; i++) {
		int sig = sigs[i];

		if (sig <= 0 || sig >= NSIG)
			return -EINVAL;
		atomic_store(&owner[sig], s);
		if (sigaction(sig, &sa, &s->old[s->nsigs]) != 0) {
			rc = -errno;
			atomic_store(&owner[sig], NULL);
			return rc;
		}
		s->sigs[s->nsigs++] = sig;
	}
	return 0;
}

/* What an ended set's stop signals do (agent_sig_exit_with): -1 nothing,
 * else _exit with it. */
static volatile sig_atomic_t exit_status = -1;

static void on_ended_stop(int sig)
{
	(void)sig;
	if (exit_status >= 0)
		_exit(exit_status);
}

void agent_sig_exit_with(int status)
{
	exit_status = status & 0xff;
}

/* how: 0 the old dispositions back, 1 ignored, 2 stop signals after the end. */
static void close_set(struct agent_sig *s, int how)
{
	/* SA_RESTART: the calls it interrupts go on, as with SIG_IGN. */
	struct sigaction ign = {.sa_handler = how == 2 ? on_ended_stop : SIG_IGN,
				.sa_flags = SA_RESTART};
	int i;

	if (s == NULL)
		return;
	/* The old disposition (or none) first: no later delivery is counted
	 * for s. */
	for (i = 0; i < s->nsigs; i++) {
		sigaction(s->sigs[i], how != 0 ? &ign : &s->old[i], NULL);
		atomic_store(&owner[s->sigs[i]], NULL);
	}
	s->nsigs = 0;
	/* A handler that read s before it left owner[] is done with it before
	 * the handle closes (a later one finds NULL). Not one of ours on this
	 * thread: close never runs inside a handler. */
	while (atomic_load(&in_handler) > 0)
		sched_yield();
	if (s->wake_open && !uv_is_closing((uv_handle_t *)&s->wake))
		uv_close((uv_handle_t *)&s->wake, on_closed);
}

void agent_sig_close(struct agent_sig *s)
{
	close_set(s, 0);
}

void agent_sig_end(struct agent_sig *s, bool stops)
{
	close_set(s, stops ? 2 : 1);
}

void agent_sig_destroy(struct agent_sig *s)
{
	free(s);
}
