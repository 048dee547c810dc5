/* agent_fwd: signals forwarded without stopping the job (see agent_fwd.h). */
#include "agent_fwd.h"

#include <stdlib.h>

#include "agent_int.h"
#include "signame.h"

struct agent_fwd {
	struct agent *a;
	uv_signal_t sigs[CLI_MAX_SIGNALS];
	int nsigs;
	struct agent_fwd_remote remote;
};

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
		for (i = 0; i < a->nproc; i++)
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

static void on_signal(uv_signal_t *h, int sig)
{
	struct agent_fwd *f = h->data;
	char name[32];
	int node = f->remote.received != NULL ? f->remote.received(f->remote.arg, sig) : -1;

	if (node >= 0) {
		agent_say("%s: merged with node %d's, which reached this node's workers already",
			  signame_of(sig, name, sizeof(name)), node);
		return;
	}
	agent_fwd_deliver(f->a, sig, NULL);
}

int agent_fwd_start(struct agent *a)
{
	struct agent_fwd *f;
	int i, rc;

	if (a->o->nfwd_signals == 0)
		return 0;
	f = calloc(1, sizeof(*f));
	if (f == NULL)
		return UV_ENOMEM;
	f->a = a;
	a->fwd = f;
	for (i = 0; i < a->o->nfwd_signals; i++) {
		uv_signal_t *s = &f->sigs[f->nsigs];

		rc = uv_signal_init(a->loop, s);
		if (rc != 0)
			return rc;
		s->data = f;
		f->nsigs++;
		/* Waiting for a signal that may never come keeps nothing alive. */
		uv_unref((uv_handle_t *)s);
		rc = uv_signal_start(s, on_signal, a->o->fwd_signals[i]);
		if (rc != 0)
			return rc;
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
	for (i = 0; i < f->nsigs; i++)
		if (!uv_is_closing((uv_handle_t *)&f->sigs[i]))
			uv_close((uv_handle_t *)&f->sigs[i], on_closed);
}

void agent_fwd_destroy(struct agent *a)
{
	free(a->fwd);
	a->fwd = NULL;
}
