/* agent_fwd: signals forwarded without stopping the job (see agent_fwd.h). */
#include "agent_fwd.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent_int.h"
#include "proc_info.h"
#include "signame.h"
#include "slurm.h"

/* Ancestors looked at for the step's slurmstepd (srun's wrappers between). */
#define STEPD_DEPTH 16

struct agent_fwd {
	struct agent *a;
	int sigs[CLI_MAX_SIGNALS];
	struct sigaction old[CLI_MAX_SIGNALS];
	int nsigs;
	uv_async_t wake; /* the handler's news for the loop */
	bool wake_open;
	pid_t stepd; /* this step's slurmstepd; 0: not under srun */
	/* Deliveries the handler saw and the loop has not handled, by sender. */
	atomic_uint by_slurm[NSIG];
	atomic_uint by_other[NSIG];
	struct agent_fwd_remote remote;
};

/* The one agent whose signals the process-wide handler counts. */
static struct agent_fwd *_Atomic active;

static void on_closed(uv_handle_t *h)
{
	(void)h;
}

void agent_fwd_deliver(struct agent *a, int sig, const char *from)
{
	char name[32];
	int i, n = 0;

	signame_of(sig, name, sizeof(name));
	if (a->state == AS_RUNNING || a->state == AS_STOPPING)
		for (i = 0; i < a->job->nproc; i++)
			if (a->w[i].running) {
				agent_worker_signal(&a->w[i], sig);
				n++;
			}
	if (n == 0)
		agent_say("%s%s%s: no worker is running here", name, from ? " from " : "",
			  from ? from : "");
	else
		agent_say("%s%s%s: forwarded to %d worker%s (the job goes on)", name,
			  from ? " from " : "", from ? from : "", n, n == 1 ? "" : "s");
}

/* A delivery from anyone but Slurm: this node's workers, then the others'. */
static void received(struct agent_fwd *f, int sig)
{
	char name[32];
	int node = f->remote.received != NULL ? f->remote.received(f->remote.arg, sig) : -1;

	if (node >= 0) {
		agent_say("%s: merged with node %d's, which reached this node's workers already",
			  signame_of(sig, name, sizeof(name)), node);
		return;
	}
	agent_fwd_deliver(f->a, sig, NULL);
}

/* slurmstepd signals every process of its step (proctrack/linuxproc and
 * proctrack/cgroup: all it tracks, the workers too) on every node of it:
 * scancel --signal, sbatch --signal=SIG@T, and srun passing on what it got.
 * Sent again, each worker would get it twice. */
static void from_slurm(struct agent_fwd *f, int sig)
{
	char name[32];

	agent_say("%s from Slurm: Slurm signals every process of the step, this node's "
		  "workers included; not sent again (the job goes on)",
		  signame_of(sig, name, sizeof(name)));
}

static void on_wake(uv_async_t *h)
{
	struct agent_fwd *f = h->data;
	int i;

	for (i = 0; i < f->nsigs; i++) {
		int sig = f->sigs[i];
		unsigned s = atomic_exchange(&f->by_slurm[sig], 0);
		unsigned o = atomic_exchange(&f->by_other[sig], 0);

		if (s > 0)
			from_slurm(f, sig);
		while (o-- > 0)
			received(f, sig);
	}
}

/* Async-signal-safe: counts the delivery by sender and wakes the loop. */
static void on_signal(int sig, siginfo_t *si, void *ctx)
{
	struct agent_fwd *f = atomic_load(&active);
	int saved = errno;

	(void)ctx;
	if (f != NULL && sig > 0 && sig < NSIG) {
		/* si_code <= 0: sent by a process (kill, sigqueue), si_pid is its. */
		if (f->stepd > 0 && si != NULL && si->si_code <= 0 && si->si_pid == f->stepd)
			atomic_fetch_add(&f->by_slurm[sig], 1);
		else
			atomic_fetch_add(&f->by_other[sig], 1);
		uv_async_send(&f->wake);
	}
	errno = saved;
}

static const char *env_of(const char *name)
{
	return getenv(name);
}

/* Under srun (SLURM_STEP_ID set): the nearest ancestor that is slurmstepd,
 * or 0. A batch script has no step id: its slurmstepd signals the script
 * only (scancel --batch, --signal=B:SIG@T), never ddprun's workers. Nor
 * does proctrack/pgid's: there a signal from it is sent on as any other. */
static pid_t find_stepd(void)
{
	struct proc_info pi;
	pid_t pid = getppid();
	int i;

	if (getenv("SLURM_JOB_ID") == NULL || slurm_step_id(env_of) == NULL ||
	    slurm_proctrack_pgid(getenv("SLURM_CONF")))
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

int agent_fwd_start(struct agent *a)
{
	struct agent_fwd *f;
	struct sigaction sa;
	int i, rc;

	if (a->job->nfwd_signals == 0)
		return 0;
	f = calloc(1, sizeof(*f));
	if (f == NULL)
		return UV_ENOMEM;
	f->a = a;
	a->fwd = f;
	f->stepd = find_stepd();
	rc = uv_async_init(a->loop, &f->wake, on_wake);
	if (rc != 0)
		return rc;
	f->wake.data = f;
	f->wake_open = true;
	/* Waiting for a signal that may never come keeps nothing alive. */
	uv_unref((uv_handle_t *)&f->wake);
	atomic_store(&active, f);
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_signal;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigfillset(&sa.sa_mask);
	for (i = 0; i < a->job->nfwd_signals; i++) {
		f->sigs[f->nsigs] = a->job->fwd_signals[i];
		if (sigaction(f->sigs[f->nsigs], &sa, &f->old[f->nsigs]) != 0)
			return -errno;
		f->nsigs++;
	}
	return 0;
}

void agent_fwd_set_remote(struct agent *a, const struct agent_fwd_remote *r)
{
	if (a->fwd == NULL)
		return;
	if (r != NULL)
		a->fwd->remote = *r;
	else
		a->fwd->remote = (struct agent_fwd_remote){0};
}

void agent_fwd_close(struct agent *a)
{
	struct agent_fwd *f = a->fwd;
	int i;

	if (f == NULL)
		return;
	f->remote = (struct agent_fwd_remote){0};
	/* As uv_signal_stop would: the dispositions ddprun started with. */
	for (i = 0; i < f->nsigs; i++)
		sigaction(f->sigs[i], &f->old[i], NULL);
	f->nsigs = 0;
	atomic_store(&active, NULL);
	if (f->wake_open && !uv_is_closing((uv_handle_t *)&f->wake))
		uv_close((uv_handle_t *)&f->wake, on_closed);
}

void agent_fwd_destroy(struct agent *a)
{
	free(a->fwd);
	a->fwd = NULL;
}
