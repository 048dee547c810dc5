/* agent_fwd: signals forwarded without stopping the job (see agent_fwd.h). */
#include "agent_fwd.h"

#include <stdlib.h>

#include "agent_int.h"
#include "agent_sig.h"
#include "signame.h"

struct agent_fwd {
	struct agent *a;
	struct agent_sig *sig; /* the forwarded signals, told apart by sender */
	struct agent_fwd_remote remote;
};

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

/* The step's slurmstepd has signalled the workers too (agent_sig.h). */
static void from_slurm(struct agent_fwd *f, int sig)
{
	char name[32];

	agent_say("%s from Slurm: proctrack/linuxproc signals every process of the step, "
		  "this node's workers included; not sent again (the job goes on)",
		  signame_of(sig, name, sizeof(name)));
}

static void on_delivery(void *arg, int sig, enum agent_sig_from from)
{
	if (from == AGENT_SIG_STEPD_ALL)
		from_slurm(arg, sig);
	else
		received(arg, sig);
}

int agent_fwd_start(struct agent *a)
{
	struct agent_fwd *f;

	if (a->job->nfwd_signals == 0)
		return 0;
	f = calloc(1, sizeof(*f));
	if (f == NULL)
		return UV_ENOMEM;
	f->a = a;
	a->fwd = f;
	return agent_sig_open(a->loop, a->job->fwd_signals, a->job->nfwd_signals, on_delivery, f,
			      &f->sig);
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
	if (a->fwd == NULL)
		return;
	a->fwd->remote = (struct agent_fwd_remote){0};
	agent_sig_end(a->fwd->sig, false);
}

void agent_fwd_destroy(struct agent *a)
{
	if (a->fwd != NULL)
		agent_sig_destroy(a->fwd->sig);
	free(a->fwd);
	a->fwd = NULL;
}
