/* coord_fwd: --forward-signals across nodes (see agent_fwd.h).
 *
 * The round's deliveries are a log in the store, under
 * "ddprun/<run_id>/r<r>/":
 *   fwd/<k>   k = 1, 2, ...: "<sig>:<R>", delivery k, of signal number sig,
 *             first received by node rank R; or "over" (the round is over:
 *             the waits parked on it end)
 * Every agent walks the log in order: a WAIT parked on the first slot it
 * has not processed (on a connection of its own, F), then a GET of it on
 * the coordinator's A. A receipt on this node (agent_fwd.c has sent it to
 * the local workers already) is appended: CAS "" -> "<sig>:<R>" of that
 * same first unprocessed slot; a slot that another node filled first is
 * processed first, and the CAS tried on the next one.
 *
 * Once per delivery on every node, whichever nodes the signal reached:
 * Slurm sends --signal=USR1@T (without B:) and scancel --signal to every
 * node's ddprun at about the same time, kill(1) to one. A receipt here
 * merges into another node's delivery of the same signal:
 *  - when that delivery's slot is found while the receipt waits to be
 *    appended (both came at once), or
 *  - when the receipt comes less than FWD_MERGE_MS after that delivery
 *    reached this node's workers (it came later here),
 * and into at most one: the local workers got the signal once, and
 * nothing is appended. The cost: two deliveries of one signal to different
 * nodes less than FWD_MERGE_MS apart count as one (ddprun(1), SIGNALS). */
#include "coord_int.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_fwd.h"
#include "store_async.h"
#include "store_proto.h"

#define FWD_MERGE_MS 2000
#define FWD_QUEUE    64 /* receipts waiting to be appended */

struct coord_fwd {
	struct coord *c;
	struct store_async *F;
	bool up;
	int round;	  /* the round walked */
	int next;	  /* the first slot not processed here */
	int parked_round; /* round of the wait parked on F; -1: none */
	int parked_k;
	bool busy;	      /* a GET or CAS of a slot in flight on A */
	int queue[FWD_QUEUE]; /* receipts here, to append in order */
	int nq;
	int credit[NSIG];     /* other nodes' deliveries a receipt may merge into */
	uint64_t until[NSIG]; /* ... until this loop time */
	int from[NSIG];	      /* ... the last one's node */
};

/* One operation's context: the round and slot it is about. */
struct op {
	struct coord_fwd *f;
	int round, k;
};

static void step(struct coord_fwd *f);

static struct op *op_new(struct coord_fwd *f, int round, int k)
{
	struct op *o = malloc(sizeof(*o));

	if (o != NULL)
		*o = (struct op){f, round, k};
	return o;
}

static int queued(const struct coord_fwd *f, int sig)
{
	int i;

	for (i = 0; i < f->nq; i++)
		if (f->queue[i] == sig)
			return i;
	return -1;
}

static void unqueue(struct coord_fwd *f, int i)
{
	memmove(&f->queue[i], &f->queue[i + 1], (size_t)(f->nq - i - 1) * sizeof(f->queue[0]));
	f->nq--;
}

/* Another node's delivery of sig: merged with a receipt here waiting to be
 * appended, or sent to the local workers now (and a later receipt here may
 * merge into it). */
static void others(struct coord_fwd *f, int sig, int node)
{
	struct coord *c = f->c;
	char from[32];
	int i = queued(f, sig);

	if (i >= 0) {
		unqueue(f, i);
		return;
	}
	snprintf(from, sizeof(from), "node %d", node);
	agent_fwd_deliver(c->agent, sig, from);
	f->credit[sig]++;
	f->until[sig] = uv_now(c->loop) + FWD_MERGE_MS;
	f->from[sig] = node;
}

/* Slot o->k's value: this node's own entry (the CAS took), or another's. */
static void on_slot(int status, const void *val, size_t len, void *arg)
{
	struct op *o = arg;
	struct coord_fwd *f = o->f;
	struct coord *c = f->c;
	char s[32];
	int sig, node;

	f->busy = false;
	if (status == 0 && o->round == f->round && o->k == f->next && len > 0 && len < sizeof(s)) {
		memcpy(s, val, len);
		s[len] = '\0';
		f->next++;
		if (sscanf(s, "%d:%d", &sig, &node) == 2 && sig > 0 && sig < NSIG) {
			/* Only this node writes its rank, and only by the CAS
			 * of its oldest receipt: the one in flight. */
			if (node == c->rank && f->nq > 0 && f->queue[0] == sig)
				unqueue(f, 0);
			else if (node != c->rank)
				others(f, sig, node);
		}
	}
	free(o);
	step(f);
}

/* Process slot next: append the oldest receipt there (CAS), or read it. */
static void fetch(struct coord_fwd *f)
{
	struct coord *c = f->c;
	struct op *o;
	char key[64], v[32];
	int rc;

	if (c->A == NULL || !c->a_up || f->round != c->round)
		return; /* leaving, or the round is over */
	o = op_new(f, f->round, f->next);
	if (o == NULL)
		return;
	coord_key(c, key, sizeof(key), "fwd/%d", f->next);
	if (f->nq > 0) {
		snprintf(v, sizeof(v), "%d:%d", f->queue[0], c->rank);
		rc = store_async_compare_set(c->A, key, "", 0, v, strlen(v), on_slot, o);
	} else {
		rc = store_async_get(c->A, key, on_slot, o);
	}
	if (rc != 0) {
		free(o);
		return;
	}
	f->busy = true;
}

static void on_ready(int status, void *arg)
{
	struct op *o = arg;
	struct coord_fwd *f = o->f;
	bool now = status == 0 && o->round == f->round && o->k == f->next;

	if (o->round == f->parked_round)
		f->parked_round = -1;
	free(o);
	if (status != 0)
		return; /* the connection's loss, or its close */
	if (now && !f->busy)
		fetch(f); /* the slot waited for is there */
	else
		step(f); /* a later slot, or the next round's */
}

/* Park F on slot next of the current round (once per round). */
static void park(struct coord_fwd *f)
{
	char key[64];
	const char *keys[1] = {key};
	struct op *o;

	if (f->F == NULL || !f->up || f->parked_round == f->round)
		return;
	o = op_new(f, f->round, f->next);
	if (o == NULL)
		return;
	snprintf(key, sizeof(key), "r%d/fwd/%d", f->round, f->next);
	if (store_async_wait(f->F, keys, 1, 0, on_ready, o) != 0) {
		free(o);
		return;
	}
	f->parked_round = f->round;
	f->parked_k = f->next;
}

static void step(struct coord_fwd *f)
{
	struct coord *c = f->c;

	if (f->busy || c->A == NULL || !c->a_up || c->phase != CP_RUN || f->round != c->round)
		return;
	if (f->nq > 0)
		fetch(f);
	else
		park(f);
}

/* agent_fwd_remote.received (see agent_fwd.h). */
static int received(void *arg, int sig)
{
	struct coord_fwd *f = arg;
	struct coord *c = f->c;

	if (c->phase != CP_RUN || c->A == NULL || !c->a_up || f->round != c->round)
		return -1; /* between rounds: this node alone */
	if (f->credit[sig] > 0 && uv_now(c->loop) < f->until[sig]) {
		f->credit[sig]--;
		return f->from[sig];
	}
	f->credit[sig] = 0;
	if (f->nq == FWD_QUEUE) {
		agent_say("warning: too many signals at once: this one reaches this node's "
			  "workers only");
		return -1;
	}
	f->queue[f->nq++] = sig;
	step(f);
	return -1;
}

static void on_connect(struct store_async *a, int status, void *arg)
{
	struct coord_fwd *f = arg;

	if (status != 0) {
		agent_say("warning: --forward-signals: cannot reach the store (%s): signals "
			  "that reach other nodes will not reach this node's workers",
			  store_strerror(status));
		return;
	}
	f->up = true;
	step(f);
}

static void on_lost(struct store_async *a, int reason, void *arg)
{
	struct coord_fwd *f = arg;

	f->up = false; /* coord.c's connections say what the loss means */
	f->parked_round = -1;
}

void coord_fwd_round(struct coord *c)
{
	struct coord_fwd *f = c->fwd;
	struct agent_fwd_remote r;

	if (c->job->nfwd_signals == 0)
		return;
	if (f == NULL) {
		struct store_async_callbacks cbs;

		f = calloc(1, sizeof(*f));
		if (f == NULL)
			return;
		f->c = c;
		f->parked_round = -1;
		cbs = (struct store_async_callbacks){on_connect, on_lost, f};
		if (coord_conn_open(c, &cbs, &f->F) != 0) {
			free(f);
			return;
		}
		c->fwd = f;
	} else if (f->parked_round >= 0 && f->parked_round != c->round && c->A != NULL) {
		/* End the last round's parked waits (every node's), then park anew. */
		char key[64];

		snprintf(key, sizeof(key), "r%d/fwd/%d", f->parked_round, f->parked_k);
		store_async_compare_set(c->A, key, "", 0, "over", 4, NULL, NULL);
		f->parked_round = -1;
	}
	f->round = c->round;
	f->next = 1;
	f->nq = 0;
	memset(f->credit, 0, sizeof(f->credit));
	r.received = received;
	r.arg = f;
	agent_fwd_set_remote(c->agent, &r);
	step(f);
}

void coord_fwd_close(struct coord *c)
{
	struct coord_fwd *f = c->fwd;

	if (f == NULL)
		return;
	if (c->agent != NULL)
		agent_fwd_set_remote(c->agent, NULL);
	if (f->F != NULL) {
		c->open++;
		store_async_close(f->F, coord_closed_one, c);
		f->F = NULL;
	}
	f->up = false;
}

void coord_fwd_destroy(struct coord *c)
{
	free(c->fwd);
	c->fwd = NULL;
}
