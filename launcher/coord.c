/* coord: the hooks the agent calls, the two store connections, the end of a
 * round (restart, stop) and leaving in order (see coord.h, coord_int.h). */
#include "coord_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hang.h"
#include "signame.h"
#include "store_async.h"
#include "store_proto.h"
#include "store_server.h"
#include "util.h"

const char *coord_key(struct coord *c, char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(buf, len, RDZV_KEY_ROUND_FMT, c->round);

	va_start(ap, fmt);
	vsnprintf(buf + n, len - (size_t)n, fmt, ap);
	va_end(ap);
	return buf;
}

const char **coord_keys_of(struct coord *c, int round, const char *first, size_t n, const char *fmt)
{
	size_t total = n + (first != NULL), i;
	const char **keys = malloc(total * (sizeof(char *) + COORD_KEY_MAX));
	char *s;
	int at;

	if (keys == NULL)
		return NULL;
	s = (char *)(keys + total);
	for (i = 0; i < total; i++, s += COORD_KEY_MAX) {
		at = snprintf(s, COORD_KEY_MAX, RDZV_KEY_ROUND_FMT, round);
		if (first != NULL && i == 0)
			snprintf(s + at, COORD_KEY_MAX - (size_t)at, "%s", first);
		else
			snprintf(s + at, COORD_KEY_MAX - (size_t)at, fmt,
				 (int)(i - (first != NULL)));
		keys[i] = s;
	}
	return keys;
}

const char **coord_keys(struct coord *c, const char *first, size_t n, const char *fmt)
{
	return coord_keys_of(c, c->round, first, n, fmt);
}

/* ---- connections --------------------------------------------------------------------- */

bool coord_said_at_once(const struct coord *c)
{
	return c->job->prefail_status != 0 ||
	       (!c->job->dynamic && c->job->node_rank >= c->job->max_nodes);
}

static void on_connect(struct store_async *h, int status, void *arg)
{
	struct coord *c = arg;

	if (c->probing) { /* node 0 whose port is taken: who holds it? */
		if (status < 0)
			coord_probe_failed(c);
		else if (h == c->A)
			coord_probe(c);
		return;
	}
	if (status < 0 && coord_said_at_once(c)) {
		/* The error was said; its status stays (a usage error's, 126, 127). */
		coord_fail(c, c->job->prefail_status ? c->job->prefail_status : 2,
			   "could not tell the other nodes: no rendezvous store at %s:%d",
			   c->store_host, c->store_port);
		return;
	}
	if (status < 0) {
		coord_fail(
			c, 1, "cannot reach the rendezvous store at %s:%d within %.0f s: %s%s",
			c->store_host, c->store_port, (double)c->connect_timeout_ms / 1000.0,
			store_strerror(status),
			c->host_deferred ? "; yet the port is taken on this host, by something "
					   "that does not answer as a store"
			: store_async_unanswered(h)
				? "; something there accepts connections but does not answer as a "
				  "store (another program on that port?)"
				: "");
		return;
	}
	if (h == c->W) {
		c->w_up = true;
		return;
	}
	c->a_up = true;
	if (store_async_local_addr(h, c->local_addr, sizeof(c->local_addr)) != 0 ||
	    store_async_peer_addr(h, c->peer_addr, sizeof(c->peer_addr)) != 0) {
		coord_fail(c, 1, "cannot read the addresses of the connection to the store");
		return;
	}
	if (c->phase == CP_START)
		coord_join(c);
}

static void on_lost(struct store_async *h, int reason, void *arg)
{
	struct coord *c = arg;

	if (h == c->A)
		c->a_up = false;
	else
		c->w_up = false;
	if (c->probing) {
		coord_probe_failed(c);
		return;
	}
	if (c->phase == CP_LEAVE || c->phase == CP_QUIT)
		return;
	if (c->phase == CP_REPORT) { /* the report is as complete as it gets */
		coord_report_local(c);
		return;
	}
	coord_fail(c, coord_local_status(c), "lost the rendezvous store at %s:%d (%s): %s",
		   c->store_host, c->store_port, store_strerror(reason), coord_fail_words(c));
}

int coord_conn_open(struct coord *c, const struct store_async_callbacks *cbs,
		    struct store_async **out)
{
	int rc = store_async_connect(c->loop, c->store_host, c->store_port, c->connect_timeout_ms,
				     cbs, out);

	if (rc != 0)
		return rc;
	rc = store_async_set_prefix(*out, c->prefix);
	if (rc != 0) {
		store_async_close(*out, NULL, NULL);
		*out = NULL;
	}
	return rc;
}

int coord_connect(struct coord *c)
{
	struct store_async_callbacks cbs = {on_connect, on_lost, c};
	int rc = coord_conn_open(c, &cbs, &c->A);

	return rc != 0 ? rc : coord_conn_open(c, &cbs, &c->W);
}

static void start(struct coord *c)
{
	uv_timer_init(c->loop, &c->hb_timer);
	uv_timer_init(c->loop, &c->timer);
	uv_timer_init(c->loop, &c->watch_timer);
	uv_timer_init(c->loop, &c->mon_timer);
	uv_timer_init(c->loop, &c->rj_timer);
	c->hb_timer.data = c->timer.data = c->watch_timer.data = c->mon_timer.data = c;
	c->rj_timer.data = c;
	c->timers_on = true;
	coord_start(c);
}

/* ---- the round -------------------------------------------------------------------------- */

void coord_round_start(struct coord *c)
{
	struct workenv_world w = {0};
	int i, first = 0, world = 0;
	char key[64], ranks[32];

	for (i = 0; i < c->nnodes; i++) {
		/* torchrun's role ranks: its --role's workers only, in group
		 * rank order (the descriptors hold each node's role as given). */
		bool mine = strcmp(c->nodes[i].role, c->nodes[c->rank].role) == 0;

		if (i < c->rank)
			first += c->nodes[i].nproc;
		world += c->nodes[i].nproc;
		if (mine && i < c->rank)
			w.role_rank_offset += c->nodes[i].nproc;
		if (mine)
			w.role_world_size += c->nodes[i].nproc;
	}
	w.group_rank = c->rank;
	w.group_world_size = c->nnodes;
	w.rank_offset = first;
	w.world_size = world;
	w.use_agent_store = true;
	w.restart_count = c->restart_count;
	if (c->job->dynamic) { /* group rank 0's store of this round */
		w.master_addr = c->nodes[0].addr;
		w.master_port = c->nodes[0].worker_port;
	} else { /* the rendezvous store, as this node reaches it */
		w.master_addr = c->peer_addr;
		w.master_port = c->store_port;
	}
	/* Only group rank 0's workers' store is used this round. */
	if (c->job->dynamic && c->rank != 0 && c->wstore != NULL)
		coord_wstore_close(c, NULL);
	c->phase = CP_RUN;
	c->in_round = true;
	c->owe_round = -1;
	c->end_known = false;
	c->report_missing = 0;
	c->at_barrier = false;
	{ /* a participant now: its death ends the round */
		char why[RDZV_WHY_MAX + 32];

		snprintf(why, sizeof(why), "lost:%d:the agent on host %.200s exited", c->rank,
			 c->host);
		store_async_on_close_set(c->A, coord_key(c, key, sizeof(key), RDZV_R_END), why,
					 strlen(why), NULL, NULL);
	}
	coord_watch_end(c);
	coord_live_start(c);
	coord_hang_round(c);
	coord_fwd_round(c);
	if (c->job->nproc == 1)
		snprintf(ranks, sizeof(ranks), "rank %d", first);
	else
		snprintf(ranks, sizeof(ranks), "ranks %d-%d", first, first + c->job->nproc - 1);
	agent_say(strchr(w.master_addr, ':')
			  ? "round %d: node %d of %d (host %.200s), %s of %d, store [%s]:%d"
			  : "round %d: node %d of %d (host %.200s), %s of %d, store %s:%d",
		  c->round, c->rank, c->nnodes, c->host, ranks, world, w.master_addr,
		  w.master_port);
	agent_rendezvous_done(c->agent, 0, &w);
}

static void on_end_values(int status, size_t n, const void *const *vals, const size_t *lens,
			  void *arg)
{
	struct coord *c = arg;
	int count;

	if (status != 0 || n != 2)
		return;
	if (c->phase == CP_LATE && lens[1] > 0 && rdzv_meta_decode(vals[1], lens[1], &count) == 0)
		c->restart_count = count;
	coord_on_end(c, vals[0], lens[0]);
}

static void on_end_waited(int status, void *arg)
{
	struct coord *c = arg;
	char k0[64], k1[64];
	const char *keys[2] = {coord_key(c, k0, sizeof(k0), RDZV_R_END),
			       coord_key(c, k1, sizeof(k1), RDZV_R_META)};

	if (status != 0 || (c->phase != CP_RUN && c->phase != CP_LATE))
		return;
	store_async_multi_get(c->W, keys, 2, on_end_values, c);
}

void coord_watch_end(struct coord *c)
{
	char key[64];
	const char *keys[1] = {coord_key(c, key, sizeof(key), RDZV_R_END)};

	store_async_wait(c->W, keys, 1, 0, on_end_waited, c);
}

void coord_describe_end(const struct coord *c, const struct rdzv_end *e, char *buf, size_t len)
{
	char sname[32];

	if (e->kind == RDZV_END_REJOIN && e->node < 0)
		snprintf(buf, len, "a node is waiting to join");
	else if (e->kind == RDZV_END_REJOIN && e->node == c->rank)
		snprintf(buf, len,
			 "this node (node %d) was taken for lost before round %d started: the "
			 "others did not see its descriptor in time (%s)",
			 e->node, c->round, e->why);
	else if (e->kind == RDZV_END_REJOIN)
		snprintf(buf, len, "node %d lost before round %d started (%s)", e->node, c->round,
			 e->why);
	else if (e->kind == RDZV_END_LOST)
		snprintf(buf, len, "node %d lost (%s)", e->node, e->why);
	else if (e->rank >= 0)
		snprintf(buf, len,
			 "rank %d (local rank %d) on node %d (host %.200s) failed with exit "
			 "status %d%s%.200s%s",
			 e->rank, e->local_rank, e->node, e->host, e->status,
			 e->caused_by[0] ? " (because " : "", e->caused_by,
			 e->caused_by[0] ? ")" : "");
	else if (e->signal > 0)
		snprintf(buf, len, "node %d (host %.200s) received %s", e->node, e->host,
			 signame_of(e->signal, sname, sizeof(sname)));
	else if (e->status == HANG_EXIT) /* coord_hang.c */
		snprintf(buf, len, "node %d (host %.200s) found the job hung (--hang-timeout)",
			 e->node, e->host);
	else
		snprintf(buf, len, "node %d (host %.200s) failed (exit status %d)", e->node,
			 e->host, e->status);
}

void coord_mark_ended(struct coord *c)
{
	char v[16];

	snprintf(v, sizeof(v), "%d", c->round);
	if (c->A != NULL)
		store_async_compare_set(c->A, RDZV_KEY_ENDED, "", 0, v, strlen(v), NULL, NULL);
}

/* Tell the next round its restart count before anyone can read it (every
 * mover computes the same). */
static void announce_next(struct coord *c)
{
	char key[64], cur[16], next[16], *meta = rdzv_meta_encode(c->next_count);

	snprintf(key, sizeof(key), RDZV_KEY_ROUND_FMT RDZV_R_META, c->next_round);
	if (meta != NULL)
		store_async_compare_set(c->A, key, "", 0, meta, strlen(meta), NULL, NULL);
	free(meta);
	/* Static rounds follow from the end alone; the key is for ddpstore status. */
	snprintf(cur, sizeof(cur), "%d", c->round);
	snprintf(next, sizeof(next), "%d", c->next_round);
	store_async_compare_set(c->A, RDZV_KEY_ROUND, c->round == 0 ? "" : cur,
				c->round == 0 ? 0 : strlen(cur), next, strlen(next), NULL, NULL);
}

/* ---- between attempts (static) -------------------------------------------------------- */

static void on_next_closed_value(int status, const void *val, size_t len, void *arg)
{
	struct coord *c = arg;
	char msg[600];
	int n = 0, st = 1;

	/* Joining, the join's own wait reads it; a signal here ends the round
	 * itself (on_signal). */
	if (status != 0 || c->phase != CP_MOVE || coord_signalled(c))
		return;
	if (rdzv_closed_decode(val, len, &n, &st, msg, sizeof(msg)) == 1) {
		/* Out of the last round already, as a node that has come to the
		 * next one is: none counts out of the last one any more, so the
		 * store's host must not wait for them to (it waited its linger
		 * and --shutdown-timeout). Every node still here waits on this
		 * closed value, answered as it was set. */
		c->in_round = false;
		coord_fail(c, st, "error: %s", msg);
	}
}

static void on_next_closed(int status, void *arg)
{
	struct coord *c = arg;
	char key[64];

	if (status != 0 || c->phase != CP_MOVE)
		return;
	snprintf(key, sizeof(key), RDZV_KEY_ROUND_FMT RDZV_R_CLOSED, c->next_round);
	store_async_get(c->W, key, on_next_closed_value, c);
}

/* The round ended for a restart and this node's workers are stopping (up
 * to --shutdown-timeout): the next round cannot close without any node, so
 * a node lost meanwhile ends it for everyone (its death, coord_guard_join;
 * its silence: the heartbeats go on, on the next round's keys, and the
 * store's host watches them, coord_live.c), and this node learns it now,
 * not once its workers have stopped (by then the store's host may have
 * left). Before this, a node killed or cut off meanwhile left the others
 * waiting join_timeout. */
static void move_static(struct coord *c)
{
	char key[64];
	const char *keys[1] = {key};

	coord_guard_join(c, c->next_round);
	coord_live_start(c);
	snprintf(key, sizeof(key), RDZV_KEY_ROUND_FMT RDZV_R_CLOSED, c->next_round);
	store_async_wait(c->W, keys, 1, 0, on_next_closed, c);
}

void coord_on_end(struct coord *c, const void *val, size_t len)
{
	struct rdzv_end e;
	bool restart = false;
	int status = 0, next = c->restart_count;
	char what[RDZV_WHY_MAX + RDZV_HOST_MAX + 64];

	if (rdzv_end_decode(val, len, &e) != 0) {
		coord_fail(c, 1, "error: round %d's end value in the store is malformed", c->round);
		return;
	}
	c->end = e;
	c->end_known = true;
	/* A verdict gathered here waits for no lost node's positions. */
	if (e.kind == RDZV_END_LOST)
		coord_hang_node_gone(c, e.node);
	/* Named lost, or never heard from: the others do not wait for this
	 * node to count out of the round (coord_left_expected). */
	if ((e.kind == RDZV_END_LOST || e.kind == RDZV_END_REJOIN) && e.node >= 0 &&
	    e.node == c->rank && !c->in_round && c->owe_round == c->round)
		c->owe_round = -1;
	coord_live_stop(c);
	/* This node is leaving (a signal here: its own end is published or on
	 * its way). Halting again would take that for a second signal and
	 * hurry: its "left" would never count, and the store's host would wait
	 * its whole linger for it. */
	if (c->phase == CP_LEAVE || c->signal_seen)
		return;
	if (e.kind == RDZV_END_OK) {
		coord_mark_ended(c);
		c->status = 0;
		if (c->phase == CP_LATE) { /* nothing ran here: no success to report */
			/* A spare, or a new job's node on a taken run id: which
			 * one, only the user knows. */
			agent_say("error: the job with --rdzv-id %s ran round %d with %d node%s "
				  "without this one and finished: this node waited as a spare and "
				  "was not needed (if it belongs to a new job, --rdzv-id %s is "
				  "taken: give that job another)",
				  c->job->run_id, c->round, c->nnodes, c->nnodes == 1 ? "" : "s",
				  c->job->run_id);
			c->status = 1;
		}
		coord_leave(c);
		return;
	}
	if (e.kind == RDZV_END_REJOIN) {
		restart = true;
	} else if (e.kind == RDZV_END_FAIL) {
		status = e.status;
		restart = !e.final && c->restart_count < c->job->max_restarts;
		next++;
	} else {
		status = COORD_EXIT_LOST;
		restart = c->job->dynamic && c->restart_count < c->job->max_restarts;
		next++;
	}
	coord_describe_end(c, &e, what, sizeof(what));
	if (restart && e.kind == RDZV_END_REJOIN)
		agent_say("%s: every node rejoins in round %d", what, c->round + 1);
	else if (restart)
		agent_say("%s: restarting every node (restart %d of %d)", what, next,
			  c->job->max_restarts);
	else if (c->phase == CP_RUN)
		agent_say("%s: %s", what,
			  c->agent != NULL ? agent_stop_words(c->agent) : "stopping the workers");
	else
		agent_say("%s: the job ends", what);
	if (restart) {
		/* Dynamic: the next round's nodes read its closed value only as
		 * they count in, so the store's host waits for them to count
		 * out (a static node waits on it: on_next_closed_value). */
		if (c->job->dynamic && (c->in_round || c->owe_round == c->round)) {
			c->owe_expected = coord_left_expected(c);
			c->owe_round = c->round;
		}
		c->next_round = c->round + 1;
		c->next_count = next;
		announce_next(c);
		if (c->phase == CP_LATE || c->phase == CP_JOIN) { /* no workers here: straight on */
			if (c->phase == CP_JOIN) /* a member: the next round waits for it */
				coord_rejoin_move(c);
			c->round = c->next_round;
			c->restart_count = c->next_count;
			coord_join(c);
			return;
		}
		c->phase = CP_MOVE;
		if (!c->job->dynamic)
			move_static(c);
		else
			coord_rejoin_move(c);
		agent_restart(c->agent); /* rendezvous() follows */
		return;
	}
	c->status = status;
	coord_mark_ended(c);
	if (c->phase == CP_LATE || c->phase == CP_JOIN) { /* no worker ran here: no report */
		coord_publish_failures(c); /* a member's, empty: the others' reports wait */
		coord_leave(c);
		return;
	}
	c->phase = CP_HALT;
	agent_halt(c->agent, status, /* finished() follows */
		   e.kind == RDZV_END_FAIL && e.signal == 0 &&
			   (e.rank >= 0 || e.status != HANG_EXIT)); /* a worker's 124 is no hang */
}

/* ---- hooks ------------------------------------------------------------------------------ */

static void after_wstore_closed(void *arg)
{
	struct coord *c = arg;

	if (c->phase == CP_MOVE)
		coord_join(c);
}

static void hook_rendezvous(struct agent *a, int restart_count, void *arg)
{
	struct coord *c = arg;

	c->agent = a;
	if (c->phase == CP_START) {
		start(c);
		return;
	}
	if (c->phase != CP_MOVE)
		return;
	c->round = c->next_round;
	c->restart_count = c->next_count;
	/* A fresh workers' store per round: no stale keys from the last one. */
	if (c->wstore != NULL) {
		coord_wstore_close(c, after_wstore_closed);
		return;
	}
	coord_join(c);
}

static void publish_fail(struct coord *c, const struct rdzv_end *e, store_async_bytes_cb cb)
{
	char key[64], *v = rdzv_end_encode(e);

	if (v == NULL || c->A == NULL ||
	    store_async_compare_set(c->A, coord_key(c, key, sizeof(key), RDZV_R_END), "", 0, v,
				    strlen(v), cb, c) != 0) {
		free(v);
		if (cb != NULL)
			cb(-ENOTCONN, NULL, 0, c);
		return;
	}
	free(v);
}

/* This node's failure (its workers' status, no rank) as the round's end,
 * unless it has one. */
static void publish_node_fail(struct coord *c, int status)
{
	struct rdzv_end e = {.kind = RDZV_END_FAIL, .rank = -1, .local_rank = -1};

	if (c->phase != CP_RUN || c->end_known)
		return;
	e.node = c->rank;
	snprintf(e.host, sizeof(e.host), "%s", c->host);
	e.pid = (int)getpid();
	e.status = status;
	/* A hang ended from here alone (hang_ask_failed): final, as the
	 * verdict's end is, or a restart left would start the hung job again. */
	e.final = c->agent != NULL && hang_declared(c->agent);
	e.time_us = report_now_us();
	publish_fail(c, &e, NULL);
}

static void hook_failed(struct agent *a, const struct report_entry *root, int status, void *arg)
{
	struct coord *c = arg;
	struct rdzv_end e = {.kind = RDZV_END_FAIL};

	c->agent = a;
	if (c->phase != CP_RUN || c->end_known)
		return;
	e.node = c->rank;
	snprintf(e.host, sizeof(e.host), "%s", c->host);
	e.rank = root->global_rank;
	e.local_rank = root->local_rank;
	e.pid = (int)root->pid;
	e.status = status;
	e.time_us = root->time_us;
	if (root->caused_by != NULL)
		snprintf(e.caused_by, sizeof(e.caused_by), "%s", root->caused_by);
	publish_fail(c, &e, NULL);
}

static void leave_after(int status, const void *val, size_t len, void *arg)
{
	coord_leave(arg);
}

/* The signal's end is out: whatever failed here goes to the report too. */
static void publish_then_leave(int status, const void *val, size_t len, void *arg)
{
	struct coord *c = arg;

	coord_publish_failures(c);
	coord_leave(c);
}

/* A signal ends the job everywhere: say so where the others look now. */
static void on_signal(struct coord *c, int status)
{
	struct rdzv_end e = {.kind = RDZV_END_FAIL, .rank = -1, .local_rank = -1};
	char key[64], msg[RDZV_HOST_MAX + 96], sname[32], *v;
	int sig = status > 128 ? status - 128 : 0;

	/* A hang declared before the signal decided the status (124), and
	 * this node waits for its end: the end says it received the signal
	 * (else "found the job hung", which another node did). */
	if (c->agent != NULL && hang_declared(c->agent) && agent_signal(c->agent) > 0)
		sig = agent_signal(c->agent);

	c->status = status;
	if (c->A == NULL || !c->a_up) {
		coord_leave(c);
		return;
	}
	/* Running, or a member of a dynamic round that closed and has not
	 * started yet (the others wait for the descriptors, this one's came):
	 * the round's end says it. */
	if (c->phase == CP_RUN || (c->job->dynamic && c->phase == CP_JOIN && c->rank >= 0)) {
		e.node = c->rank;
		snprintf(e.host, sizeof(e.host), "%s", c->host);
		e.pid = (int)getpid();
		e.status = status;
		e.signal = sig;
		e.final = true;
		e.time_us = report_now_us();
		/* Hurried (the store went silent meanwhile): the end goes out
		 * before the close, unanswered. */
		publish_fail(c, &e, c->hurry ? NULL : publish_then_leave);
		if (c->phase == CP_JOIN)
			coord_join_wake_members(c);
		if (c->hurry)
			coord_leave(c);
		return;
	}
	if (c->phase != CP_JOIN && c->phase != CP_MOVE) {
		/* After the round's end (halting, reporting): the others'
		 * reports wait, up to --shutdown-timeout, for this node's list. */
		coord_publish_failures(c);
		coord_leave(c);
		return;
	}
	if (c->job->dynamic && c->phase == CP_JOIN && c->server == NULL) {
		/* An open dynamic round goes on without this node (leaving
		 * marks it gone, as its death would); not without the store's
		 * host, whose store goes once the others left it: they would
		 * wait for nodes (and it for them to leave) until its linger
		 * ran out. */
		coord_leave(c);
		return;
	}
	/* Between rounds: the next round's joiners end at once. A dynamic
	 * node has no rank until its round closes. */
	if (c->rank >= 0)
		snprintf(msg, sizeof(msg),
			 "node %d (host %.200s) received %s during the rendezvous", c->rank,
			 c->host, signame_of(sig, sname, sizeof(sname)));
	else
		snprintf(msg, sizeof(msg),
			 "the rendezvous store's host (%.200s) received %s during the rendezvous",
			 c->host, signame_of(sig, sname, sizeof(sname)));
	v = rdzv_closed_error(status, msg);
	snprintf(key, sizeof(key), RDZV_KEY_ROUND_FMT RDZV_R_CLOSED,
		 c->phase == CP_MOVE ? c->next_round : c->round);
	/* Static: the others, parked on that closed value, read it as it is
	 * set, and count out of no round any more (on_next_closed_value). */
	if (!c->job->dynamic)
		c->in_round = false;
	if (v == NULL ||
	    store_async_compare_set(c->A, key, "", 0, v, strlen(v), leave_after, c) != 0)
		coord_leave(c);
	free(v);
}

static void hook_finished(struct agent *a, int status, void *arg)
{
	struct coord *c = arg;

	c->agent = a;
	if (c->phase == CP_LEAVE) {
		/* A further signal while the others are given time to leave
		 * (not Slurm's repeat of its own: the agent says nothing of
		 * that, agent.h): stop waiting. */
		if (agent_signalled(a))
			coord_hurry(c);
		return;
	}
	if (agent_signalled(a) && !(c->phase == CP_HALT && !c->signal_seen)) {
		if (!c->signal_seen) {
			c->signal_seen = true;
			on_signal(c, status);
		} else { /* another signal: hurry */
			c->hurry = true;
			coord_leave(c);
		}
		return;
	}
	/* The round had ended (a failure, here or elsewhere) when the workers
	 * stopped: a signal meanwhile is one more failure, at its time, and the
	 * report still comes (it went, and node 0's log lost the job's
	 * explanation to an impatient Ctrl-C). A second signal hurries. */
	if (agent_signalled(a))
		c->signal_seen = true;
	switch (c->phase) {
	case CP_RUN:
		if (status == 0) {
			coord_barrier(c);
		} else if (!coord_hang_await_end(c)) {
			/* failed() published it, unless the workers never started */
			publish_node_fail(c, status);
		}
		break;
	case CP_HALT:
		c->phase = CP_REPORT;
		/* A hang's verdict being gathered here comes first (its nodes'
		 * positions are read from the store the report may close); this
		 * node's failures go out now, the others' reports wait for them. */
		coord_publish_failures(c);
		if (!coord_hang_defer(c, coord_report))
			coord_report(c);
		break;
	case CP_START:
	case CP_QUIT:
		coord_leave(c);
		break;
	default:
		break;
	}
}

/* ---- lifecycle -------------------------------------------------------------------------- */

int coord_create(uv_loop_t *loop, const struct job *job, struct coord **out, char *err,
		 size_t errlen)
{
	struct coord *c = calloc(1, sizeof(*c));
	int rc;

	if (c == NULL)
		return -ENOMEM;
	c->loop = loop;
	c->job = job;
	c->conf = &job->rdzv;
	c->rank = -1;
	c->mon_round = -1;
	c->owe_round = -1;
	c->rj.prev_rank = -1;
	coord_rejoin_reset(c);
	snprintf(c->host, sizeof(c->host), "%s", job->hostname);
	rdzv_key_job(c->prefix, sizeof(c->prefix), job->run_id);
	c->connect_timeout_ms = c->conf->join_timeout_ms;
	if (job->dynamic)
		rc = util_parse_endpoint(job->rdzv_endpoint, c->store_host, sizeof(c->store_host),
					 CLI_RDZV_PORT, &c->store_port);
	else /* --master-addr is a host; the port is --master-port's */
		rc = util_parse_hostport(job->master_addr, c->store_host, sizeof(c->store_host),
					 job->master_port, &c->store_port);
	if (rc != 0) {
		snprintf(err, errlen, "invalid %s '%.200s': expected HOST[:PORT]",
			 job->dynamic ? "--rdzv-endpoint" : "--master-addr",
			 job->dynamic ? job->rdzv_endpoint : job->master_addr);
		free(c);
		return -EINVAL;
	}
	if (!job->dynamic)
		c->store_port = job->master_port;
	if (job->prefail_status != 0 && c->connect_timeout_ms > COORD_BAD_RANK_CONNECT_MS)
		c->connect_timeout_ms = COORD_BAD_RANK_CONNECT_MS; /* only to tell the others */
	if (!job->dynamic && job->node_rank >= job->max_nodes) {
		/* Said at once; the other nodes are told through the store, but
		 * only for a while if nothing listens. */
		agent_say("error: --node-rank %d%s%s%s is not below --nnodes %d%s%s%s (telling the "
			  "other nodes)",
			  job->node_rank, CLI_FROM(job->node_rank_from), job->max_nodes,
			  CLI_FROM(job->nnodes_from));
		if (c->connect_timeout_ms > COORD_BAD_RANK_CONNECT_MS)
			c->connect_timeout_ms = COORD_BAD_RANK_CONNECT_MS;
	}
	if (c->store_port == 0) {
		snprintf(err, errlen, "%s: several nodes need a fixed port, not 0",
			 job->dynamic ? "--rdzv-endpoint" : job->master_port_src);
		free(c);
		return -EINVAL;
	}
	*out = c;
	return 0;
}

void coord_hooks(struct coord *c, struct agent_coord *hooks)
{
	hooks->rendezvous = hook_rendezvous;
	hooks->failed = hook_failed;
	hooks->finished = hook_finished;
	hooks->arg = c;
}

void coord_destroy(struct coord *c)
{
	if (c == NULL)
		return;
	coord_hang_destroy(c);
	coord_fwd_destroy(c);
	free(c->nodes);
	free(c->arrivals);
	coord_silence_free(&c->mon);
	coord_rejoin_reset(c);
	free(c);
}
