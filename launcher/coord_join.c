/* coord_join: join round c->round and wait for it to close (see coord.h).
 *
 * Static: check the job's settings against the first node's (config), claim
 * r<r>/node/<node rank> (a claim that returns another node's descriptor is a
 * duplicate rank), count in; the node that brings the count to --nnodes
 * closes the round (a restart's round: node 0, once it emptied the store of
 * the dead workers' keys). Dynamic: count in first (the count is the node's
 * arrival number k, its rank k-1), publish the descriptor; the round closes
 * at MAX, or when a last-call timer that runs from MIN arrivals expires;
 * nodes beyond the closed count are late. Errors anyone finds are published
 * as the round's closed value, so that every node waiting ends with them. */
#include "coord_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store_async.h"
#include "store_proto.h"
#include "store_server.h"
#include "util.h"

static void wait_closed(struct coord *c);

static void my_desc(struct coord *c, struct rdzv_node *n, int rank, int worker_port)
{
	memset(n, 0, sizeof(*n));
	snprintf(n->host, sizeof(n->host), "%s", c->host);
	snprintf(n->addr, sizeof(n->addr), "%s",
		 c->job->local_addr ? c->job->local_addr : c->local_addr);
	n->nproc = c->job->nproc;
	n->pid = (int)getpid();
	n->node_rank = rank;
	n->worker_port = worker_port;
	snprintf(n->role, sizeof(n->role), "%s", c->job->role);
	snprintf(n->protocol, sizeof(n->protocol), "%s", RDZV_PROTOCOL);
}

static void set_closed(struct coord *c, int n)
{
	char key[64], v[16];

	snprintf(v, sizeof(v), "%d", n);
	store_async_compare_set(c->A, coord_key(c, key, sizeof(key), RDZV_R_CLOSED), "", 0, v,
				strlen(v), NULL, NULL);
}

/* ---- closed: a count, or an error for everyone ------------------------------------- */

static void on_no_desc_end(int status, const void *val, size_t len, void *arg)
{
	struct coord *c = arg;

	if (status == 0 && c->phase == CP_JOIN)
		coord_on_end(c, val, len);
}

/* How long a member waits for the round's descriptors: a dynamic node counts
 * in before its descriptor is out, but one that never sends it (no_desc) is
 * waited for no longer than a silent node; a static node's came before it
 * counted in. */
static int64_t desc_wait_ms(const struct coord *c)
{
	int64_t ms = c->conf->join_timeout_ms;

	if (c->job->dynamic && c->conf->heartbeat_timeout_ms < ms)
		ms = c->conf->heartbeat_timeout_ms;
	return ms;
}

/* Dynamic: member m counted in but its descriptor never came. It died in
 * between, before the close of its connection could mark it gone (its
 * registration, after the count, never reached the store), or it stopped
 * there. No worker started anywhere: the round ends as a rejoin that
 * names it (the next round does not wait for it; no restart counted),
 * first writer wins. */
static void no_desc(struct coord *c, int m)
{
	struct rdzv_end e = {.kind = RDZV_END_REJOIN, .node = m};
	char key[64], *v;

	snprintf(e.why, sizeof(e.why), "it counted in but sent no descriptor within %g s",
		 (double)desc_wait_ms(c) / 1000.0);
	v = rdzv_end_encode(&e);
	if (v == NULL || store_async_compare_set(c->A, coord_key(c, key, sizeof(key), RDZV_R_END),
						 "", 0, v, strlen(v), on_no_desc_end, c) != 0)
		coord_fail(c, 1, "error: out of memory");
	else
		coord_join_wake_members(c); /* whose waits began a little later */
	free(v);
}

void coord_join_wake_members(struct coord *c)
{
	char key[64];
	int i;

	/* Empty where none came (never over one that did): a member's wait
	 * for the descriptors ends, and it reads the end with them. A node
	 * whose descriptor comes later overwrites it, the round being over. */
	for (i = 0; c->job->dynamic && c->rank >= 0 && c->arrivals != NULL && c->A != NULL &&
		    i < c->nnodes;
	     i++)
		store_async_compare_set(
			c->A, coord_key(c, key, sizeof(key), RDZV_R_NODE, c->arrivals[i] - 1), "",
			0, "", 0, NULL, NULL);
}

/* vals: meta, the nnodes descriptors, the round's end. */
static void on_descs(int status, size_t n, const void *const *vals, const size_t *lens, void *arg)
{
	struct coord *c = arg;
	size_t i;
	int count;

	if (status != 0 || c->phase != CP_JOIN || n != (size_t)c->nnodes + 2)
		return;
	/* Ended before it started (no_desc, here or by a node whose wait ended
	 * first: this one's descriptor may be the one that came late; or a
	 * signal's): no worker starts for it. */
	if (lens[n - 1] > 0 && c->job->dynamic) {
		coord_on_end(c, vals[n - 1], lens[n - 1]);
		return;
	}
	n--;
	if (lens[0] > 0 && rdzv_meta_decode(vals[0], lens[0], &count) == 0)
		c->restart_count = count;
	for (i = 1; i < n; i++) {
		if (lens[i] == 0 && c->job->dynamic) { /* read after the wait timed out */
			no_desc(c, (int)i - 1);
			return;
		}
		if (rdzv_node_decode(vals[i], lens[i], &c->nodes[i - 1]) != 0) {
			coord_fail(c, 1, "error: node %zu's descriptor in the store is malformed",
				   i - 1);
			return;
		}
		c->nodes[i - 1].node_rank = (int)i - 1; /* dynamic: it held the arrival */
	}
	coord_round_start(c);
}

/* Keys "meta", then the participants' "node/<i>" (static i = node rank,
 * dynamic i = arrival - 1: closed lists the arrivals), then "end". */
static const char **desc_keys(struct coord *c)
{
	const char **keys = coord_keys(c, RDZV_R_META, (size_t)c->nnodes + 1, RDZV_R_NODE);
	int i;

	for (i = 0; keys != NULL && c->job->dynamic && i < c->nnodes; i++)
		coord_key(c, (char *)keys[i + 1], COORD_KEY_MAX, RDZV_R_NODE, c->arrivals[i] - 1);
	if (keys != NULL)
		coord_key(c, (char *)keys[c->nnodes + 1], COORD_KEY_MAX, RDZV_R_END);
	return keys;
}

static void on_descs_present(int status, void *arg)
{
	struct coord *c = arg;
	const char **keys;

	if (c->phase != CP_JOIN)
		return;
	if (status == -ETIMEDOUT && !c->job->dynamic) {
		coord_fail(c, 1, "error: the round closed but not every node's descriptor arrived");
		return;
	}
	if (status != 0 && status != -ETIMEDOUT)
		return;
	keys = desc_keys(c);
	if (keys == NULL || store_async_multi_get(c->W, keys, (size_t)c->nnodes + 2, on_descs, c))
		coord_fail(c, 1, "error: out of memory");
	free(keys);
}

static void fetch_descs(struct coord *c)
{
	struct rdzv_node *nodes = realloc(c->nodes, (size_t)c->nnodes * sizeof(*nodes));
	const char **keys = desc_keys(c);

	if (nodes == NULL || keys == NULL) {
		free(keys);
		if (nodes != NULL)
			c->nodes = nodes;
		coord_fail(c, 1, "error: out of memory");
		return;
	}
	c->nodes = nodes;
	if (store_async_wait(c->W, keys + 1, (size_t)c->nnodes, desc_wait_ms(c), on_descs_present,
			     c) != 0)
		coord_fail(c, 1, "error: out of memory");
	free(keys);
}

static void late(struct coord *c)
{
	char key[64];

	c->phase = CP_LATE;
	if (c->wstore != NULL)
		coord_wstore_close(c, NULL);
	if (c->nnodes < c->job->max_nodes)
		agent_say("round %d closed with %d nodes without this one: waiting for the next "
			  "round",
			  c->round, c->nnodes);
	else /* the job may be another one that took this run id */
		agent_say(
			"round %d is full (%d nodes, --nnodes %d:%d) and runs without this one: "
			"waiting for the next round, as a spare for a restart (if this node "
			"belongs to a new job, --rdzv-id %s is taken: stop it and choose another)",
			c->round, c->nnodes, c->job->min_nodes, c->job->max_nodes, c->job->run_id);
	/* Room left: the running nodes make room by rejoining (no restart counted). */
	if (c->nnodes < c->job->max_nodes)
		store_async_compare_set(c->A, coord_key(c, key, sizeof(key), RDZV_R_END), "", 0,
					"rejoin", 6, NULL, NULL);
	coord_watch_end(c);
}

/* This node published an error it must end with (coord_publish_error,
 * must_fail: it cannot join), and val is the round's closed value that came
 * back. An error (its own, the round was open; or another node's that came
 * first): every node waiting ends with it, this one too. A count: the round
 * closed without this node, which never counted in, and its nodes run on
 * undisturbed; this one ends alone, saying so. Open or closed, the problem
 * is stated by one message, the one the others would read. */
static void refused(struct coord *c, const void *val, size_t len)
{
	char msg[600], job[64] = "";
	int n = 0, st = 1, rc = rdzv_closed_decode(val, len, &n, &st, msg, sizeof(msg));

	if (rc == 1) {
		coord_fail(c, st, "error: %s", msg);
		return;
	}
	if (rc < 0 || c->k > 0) { /* a dynamic node that counted in may be in the round */
		coord_fail(c, c->pub_status, "error: %s", c->pub_msg);
		return;
	}
	if (!c->job->dynamic)
		snprintf(job, sizeof(job), " (--nnodes %d)", n);
	snprintf(msg, sizeof(msg),
		 "the job at %.200s:%d already runs with its %d nodes%s and goes on without "
		 "this one",
		 c->store_host, c->store_port, n, job);
	if (coord_said_at_once(c)) /* the error was the first line: only the outcome */
		coord_fail(c, c->pub_status, "%s", msg);
	else
		coord_fail(c, c->pub_status, "error: %s; %s", c->pub_msg, msg);
}

static void handle_closed(struct coord *c, const void *val, size_t len)
{
	char msg[600];
	int n = 0, st = 1, rc;

	if (c->phase != CP_JOIN)
		return;
	uv_timer_stop(&c->timer); /* a last call */
	uv_timer_stop(&c->watch_timer);
	uv_timer_stop(&c->rj_timer);
	if (c->pub_must_fail) {
		refused(c, val, len);
		return;
	}
	rc = rdzv_closed_decode(val, len, &n, &st, msg, sizeof(msg));
	if (rc < 0) {
		coord_fail(c, 1, "error: round %d's closed value in the store is malformed",
			   c->round);
		return;
	}
	if (rc == 1) {
		coord_fail(c, st, "error: %s", msg);
		return;
	}
	if (!c->job->dynamic && n != c->nnodes) {
		coord_fail(c, 2, "error: round %d closed with %d nodes, but --nnodes is %d",
			   c->round, n, c->nnodes);
		return;
	}
	/* The value is the store's, which anyone who reaches it can write: a
	 * count outside --nnodes MIN:MAX would size what follows. */
	if (c->job->dynamic && (n < c->job->min_nodes || n > c->job->max_nodes)) {
		coord_fail(c, 1,
			   "error: round %d closed with %d nodes, outside --nnodes %d:%d: the "
			   "store's value is not this job's",
			   c->round, n, c->job->min_nodes, c->job->max_nodes);
		return;
	}
	c->nnodes = n;
	if (c->job->dynamic) {
		int *arr = realloc(c->arrivals, (size_t)n * sizeof(*arr)), i;

		if (arr == NULL) {
			coord_fail(c, 1, "error: out of memory");
			return;
		}
		c->arrivals = arr;
		if (rdzv_closed_members(val, len, arr, n) != 0) {
			coord_fail(c, 1, "error: round %d's closed value in the store is malformed",
				   c->round);
			return;
		}
		for (i = 0; i < n && arr[i] != c->k; i++)
			;
		if (i == n) {
			late(c);
			return;
		}
		c->rank = i;
		/* A member now: it counts out of this round as it leaves, if
		 * the round ends before it starts (coord_leave.c). */
		c->owe_round = c->round;
		c->owe_expected = n;
	}
	fetch_descs(c);
}

static void on_closed_value(int status, const void *val, size_t len, void *arg)
{
	struct coord *c = arg;

	if (status == 0)
		handle_closed(c, val, len);
}

static void on_published(int status, const void *val, size_t len, void *arg)
{
	struct coord *c = arg;

	if (status != 0) {
		if (status != -ECANCELED)
			coord_fail(c, c->pub_status, "error: %s", c->pub_msg);
		return;
	}
	if (c->pub_must_fail && c->phase == CP_START) /* node 0's probe (coord_start.c) */
		refused(c, val, len);
	else
		handle_closed(c, val, len);
}

void coord_publish_error(struct coord *c, int status, bool must_fail, const char *msg)
{
	char key[64], *v = rdzv_closed_error(status, msg);

	c->pub_status = status;
	c->pub_must_fail = must_fail;
	snprintf(c->pub_msg, sizeof(c->pub_msg), "%s", msg);
	if (v == NULL ||
	    store_async_compare_set(c->A, coord_key(c, key, sizeof(key), RDZV_R_CLOSED), "", 0, v,
				    strlen(v), on_published, c) != 0)
		coord_fail(c, status, "error: %s", msg);
	free(v);
}

/* ---- dynamic: closing without the nodes that left ------------------------------ */

/* The arrivals that have not left (gone/<i> absent) take part, the nodes
 * of the round before first (from/, as they said when they came: one whose
 * workers stopped slowly keeps its place before nodes that came meanwhile),
 * then the others by arrival, MAX at most: close with them if there are
 * MAX, or (last call) at least MIN. Ranks follow arrivals. The wait for
 * closed that is parked on W sees it; the first closer wins. vals: gone/
 * of the n arrivals, then nfrom from/ values. */
static void close_live(struct coord *c, size_t n, size_t nfrom, const void *const *vals,
		       const size_t *lens, bool last_call)
{
	int max = c->job->max_nodes, live = 0, *arr = malloc((size_t)max * sizeof(*arr));
	char *take = calloc(n + 1, 2), *first, key[64], *v;
	size_t i;
	int pass;

	if (arr == NULL || take == NULL)
		goto out;
	first = take + n + 1; /* the round before's nodes */
	for (i = 0; i < nfrom; i++) {
		int k = coord_rejoin_came(vals[n + i], lens[n + i]);

		if (k >= 1 && (size_t)k <= n)
			first[k - 1] = 1;
	}
	for (pass = 1; pass >= 0; pass--) /* the round before's, then the others */
		for (i = 0; i < n && live < max; i++)
			if (lens[i] == 0 && first[i] == pass) {
				take[i] = 1;
				live++;
			}
	for (i = 0, live = 0; i < n; i++)
		if (take[i])
			arr[live++] = (int)i + 1;
	if (live >= max || (last_call && live >= c->job->min_nodes)) {
		v = rdzv_closed_encode(arr, live);
		if (v != NULL)
			store_async_compare_set(c->A, coord_key(c, key, sizeof(key), RDZV_R_CLOSED),
						"", 0, v, strlen(v), NULL, NULL);
		free(v);
	}
out:
	free(arr);
	free(take);
}

/* One read of the gone/ and from/ keys (read_gone). */
struct gone_read {
	struct coord *c;
	size_t nfrom;
	bool last_call;
};

static void on_gone(int status, size_t n, const void *const *vals, const size_t *lens, void *arg)
{
	struct gone_read *g = arg;
	struct coord *c = g->c;

	if (status == 0 && c->phase == CP_JOIN && n > g->nfrom)
		close_live(c, n - g->nfrom, g->nfrom, vals, lens, g->last_call);
	free(g);
}

/* gone/0..n-1, then the round before's from/ (coord_rejoin.c): close. */
static void read_gone(struct coord *c, int64_t n, bool last_call)
{
	size_t nfrom = c->rj.n > 0 ? (size_t)c->rj.n : 0, i;
	const char **gone, **from = NULL, **keys;
	struct gone_read *g;

	if (n < 1)
		return;
	gone = coord_keys(c, NULL, (size_t)n, RDZV_R_GONE);
	if (nfrom > 0)
		from = coord_keys(c, NULL, nfrom, RDZV_R_FROM);
	keys = malloc(((size_t)n + nfrom) * sizeof(*keys));
	g = malloc(sizeof(*g));
	if (gone == NULL || (nfrom > 0 && from == NULL) || keys == NULL || g == NULL) {
		free(g);
		coord_fail(c, 1, "error: out of memory");
		goto out;
	}
	for (i = 0; i < (size_t)n; i++)
		keys[i] = gone[i];
	for (i = 0; i < nfrom; i++)
		keys[n + i] = from[i];
	*g = (struct gone_read){.c = c, .nfrom = nfrom, .last_call = last_call};
	if (store_async_multi_get(c->A, keys, (size_t)n + nfrom, on_gone, g) != 0) {
		free(g);
		coord_fail(c, 1, "error: out of memory");
	}
out:
	free(keys);
	free(gone);
	free(from);
}

static void on_count_full(int status, int64_t n, void *arg)
{
	struct coord *c = arg;

	if (status == 0 && c->phase == CP_JOIN)
		read_gone(c, n, false);
}

/* The last call is over: close with the nodes that came and stayed. */
static void on_last_count(int status, int64_t n, void *arg)
{
	struct coord *c = arg;

	if (status == 0 && c->phase == CP_JOIN)
		read_gone(c, n, true);
}

static void close_check(struct coord *c, bool last_call)
{
	char key[64];

	store_async_add(c->A, coord_key(c, key, sizeof(key), RDZV_R_COUNT), 0,
			last_call ? on_last_count : on_count_full, c);
}

/* Full, or the last call over (this node's, or join_timeout with enough
 * nodes), and the round before's nodes came (coord_rejoin.c). */
void coord_join_close(struct coord *c)
{
	close_check(c, c->last_call_over);
}

/* join_timeout passed without the round closing: name who came (and who
 * did not). */
static void on_timeout_survey(struct coord *c)
{
	char msg[1200], text[1000], tail[64];

	if (c->phase != CP_JOIN)
		return;
	if (c->job->dynamic && c->sv.joined >= c->job->min_nodes) {
		/* Enough nodes after all (no last call ran here): close with
		 * those that stayed, once the round before's came, and wait
		 * again. */
		c->last_call_over = true;
		coord_rejoin_await(c);
		wait_closed(c);
		return;
	}
	tail[0] = '\0';
	if (c->job->dynamic)
		snprintf(tail, sizeof(tail), ", needs at least %d", c->job->min_nodes);
	coord_survey_text(c, tail, text, sizeof(text));
	if (c->job->dynamic)
		snprintf(msg, sizeof(msg), "the rendezvous timed out after %g s: %s",
			 (double)c->conf->join_timeout_ms / 1000.0, text);
	else
		snprintf(msg, sizeof(msg), "the rendezvous timed out after %g s in round %d: %s",
			 (double)c->conf->join_timeout_ms / 1000.0, c->round, text);
	coord_publish_error(c, 1, false, msg);
}

static void on_closed_waited(int status, void *arg)
{
	struct coord *c = arg;
	char key[64];

	if (c->phase != CP_JOIN)
		return;
	if (status == -ETIMEDOUT) {
		coord_survey(c, false, on_timeout_survey);
		return;
	}
	if (status == 0)
		store_async_get(c->W, coord_key(c, key, sizeof(key), RDZV_R_CLOSED),
				on_closed_value, c);
}

static void wait_closed(struct coord *c)
{
	char key[64];
	const char *keys[1] = {coord_key(c, key, sizeof(key), RDZV_R_CLOSED)};

	store_async_wait(c->W, keys, 1, c->conf->join_timeout_ms, on_closed_waited, c);
}

/* ---- static ------------------------------------------------------------------------------ */

/* A restart's round (round > 0) closes at node 0, which hosts the store the
 * static workers use: PyTorch 2.x's env:// (agent store) puts no
 * /worker/attempt_N prefix on its keys (1.13 did), so the new workers would
 * read the dead attempt's (gloo's peer addresses) and fail to connect. A
 * node joins only once its workers have exited (agent.c: attempt_over) and
 * starts new ones only once the round closed, so when the count reaches
 * --nnodes no worker of the job runs anywhere: node 0 empties the store but
 * for ddprun's own keys, then closes. It polls the count (W is parked on
 * closed, which still ends the wait: join_timeout, an error, a node lost). */
#define RESTART_POLL_MS 50

static void on_poll_timer(uv_timer_t *t);

static void restart_count_seen(struct coord *c, int64_t k)
{
	if (k < c->nnodes) {
		uv_timer_start(&c->timer, on_poll_timer, RESTART_POLL_MS, 0);
		return;
	}
	if (store_server_clear(c->server, RDZV_KEY_ROOT_STORED) != 0) {
		coord_publish_error(c, 1, true, "out of memory");
		return;
	}
	set_closed(c, c->nnodes);
}

static void on_poll_count(int status, int64_t k, void *arg)
{
	struct coord *c = arg;

	if (status == 0 && c->phase == CP_JOIN)
		restart_count_seen(c, k);
}

static void on_poll_timer(uv_timer_t *t)
{
	struct coord *c = t->data;
	char key[64];

	if (c->phase == CP_JOIN)
		store_async_add(c->A, coord_key(c, key, sizeof(key), RDZV_R_COUNT), 0,
				on_poll_count, c);
}

static void on_static_count(int status, int64_t k, void *arg)
{
	struct coord *c = arg;

	if (status != 0 || c->phase != CP_JOIN)
		return;
	if (c->round == 0 && k == c->nnodes)
		set_closed(c, c->nnodes);
	else if (c->round > 0 && c->server != NULL) /* node 0 */
		restart_count_seen(c, k);
	wait_closed(c);
	if (k < c->nnodes)
		coord_watch_start(c);
}

static void on_claim(int status, const void *val, size_t len, void *arg)
{
	struct coord *c = arg;
	struct rdzv_node mine, other;
	char msg[600], key[64];

	if (status != 0 || c->phase != CP_JOIN)
		return;
	my_desc(c, &mine, c->rank, 0);
	if (rdzv_node_decode(val, len, &other) == 0 && other.pid == mine.pid &&
	    strcmp(other.host, mine.host) == 0) {
		store_async_add(c->A, coord_key(c, key, sizeof(key), RDZV_R_COUNT), 1,
				on_static_count, c);
		return;
	}
	snprintf(msg, sizeof(msg),
		 "node rank %d is claimed twice: by host %.200s (pid %d) and by host %.200s (pid "
		 "%d)",
		 c->rank, other.host, other.pid, mine.host, mine.pid);
	coord_publish_error(c, 2, true, msg);
}

/* A node whose program cannot run ends the round it would join, so that
 * every node stops with its status at once (job.h: prefail_status). */
static bool prefailed(struct coord *c)
{
	if (c->job->prefail_status == 0)
		return false;
	coord_publish_error(c, c->job->prefail_status, true, c->job->prefail_msg);
	return true;
}

static void static_claim(struct coord *c)
{
	struct rdzv_node n;
	char key[64], *v;

	if (prefailed(c))
		return;

	my_desc(c, &n, c->rank, 0);
	v = rdzv_node_encode(&n);
	if (v == NULL ||
	    store_async_compare_set(c->A, coord_key(c, key, sizeof(key), RDZV_R_NODE, c->rank), "",
				    0, v, strlen(v), on_claim, c) != 0)
		coord_fail(c, 1, "error: out of memory");
	free(v);
}

/* ---- dynamic ----------------------------------------------------------------------------- */

static void on_last_call(uv_timer_t *t)
{
	struct coord *c = t->data;

	if (c->phase != CP_JOIN)
		return;
	c->last_call_over = true;
	coord_rejoin_await(c);
}

static void counted_in(struct coord *c);

static void on_count_in_delayed(uv_timer_t *t)
{
	struct coord *c = t->data;

	if (c->phase == CP_JOIN)
		counted_in(c);
}

/* Test hook (tests/e2e/test_multinode_dynamic.py): DDPRUN_TEST_COUNT_IN_DELAY_MS
 * holds back that long what a dynamic node sends after it first counted in
 * (its gone/ registration, its descriptor), as a node stopped right there
 * would (SIGSTOP, a debugger): too short a window to hit from outside. 0:
 * none. */
static uint64_t test_count_in_delay_ms(const struct coord *c)
{
	const char *v = getenv("DDPRUN_TEST_COUNT_IN_DELAY_MS");

	return v != NULL && c->round == 0 ? strtoull(v, NULL, 10) : 0;
}

static void on_dynamic_count(int status, int64_t k, void *arg)
{
	struct coord *c = arg;
	char key[64], why[RDZV_HOST_MAX + 64];

	if (status == 0 && c->phase == CP_LEAVE && c->A != NULL && c->a_up && !c->in_round) {
		/* Left while counting in: out of the round at once. */
		snprintf(why, sizeof(why), "host %.200s pid %d left", c->host, (int)getpid());
		store_async_set(c->A, coord_key(c, key, sizeof(key), RDZV_R_GONE, (int)k - 1), why,
				strlen(why), NULL, NULL);
		return;
	}
	if (status != 0 || c->phase != CP_JOIN)
		return;
	c->k = (int)k;
	if (test_count_in_delay_ms(c) > 0 && c->timers_on) { /* coord_leave stops it */
		uv_timer_start(&c->timer, on_count_in_delayed, test_count_in_delay_ms(c), 0);
		return;
	}
	counted_in(c);
}

/* This node counted into the round as arrival c->k. */
static void counted_in(struct coord *c)
{
	struct rdzv_node n;
	char key[64], err[400], why[RDZV_HOST_MAX + 64], *v;
	int64_t k = c->k;
	int port = 0;

	coord_rejoin_arrived(c);
	/* Leaving before the round closes takes this node out of it: the
	 * closer skips an arrival whose gone/ key its connection's close set. */
	snprintf(why, sizeof(why), "host %.200s pid %d", c->host, (int)getpid());
	store_async_on_close_set(c->A, coord_key(c, key, sizeof(key), RDZV_R_GONE, (int)k - 1), why,
				 strlen(why), NULL, NULL);
	/* Group rank 0 hosts the round's workers' store; which arrival that is
	 * is known only at the close (an earlier one may leave), so every
	 * arrival has one ready (the others close theirs when the round starts). */
	if (coord_wstore_start(c, k == 1, &port, err, sizeof(err)) != 0) {
		coord_publish_error(c, 1, true, err);
		return;
	}
	my_desc(c, &n, (int)k - 1, port);
	v = rdzv_node_encode(&n);
	if (v == NULL) {
		coord_fail(c, 1, "error: out of memory");
		return;
	}
	store_async_set(c->A, coord_key(c, key, sizeof(key), RDZV_R_NODE, (int)k - 1), v, strlen(v),
			NULL, NULL);
	free(v);
	if (k >= c->job->max_nodes) /* full, unless some left: once the round before's came */
		coord_rejoin_await(c);
	if (k >= c->job->min_nodes) {
		c->last_call_ms = util_now_ms() + c->conf->last_call_timeout_ms;
		uv_timer_start(&c->timer, on_last_call, (uint64_t)c->conf->last_call_timeout_ms, 0);
	}
	wait_closed(c);
	coord_watch_start(c);
}

static void dynamic_count(struct coord *c)
{
	char key[64];

	if (prefailed(c))
		return;

	store_async_add(c->A, coord_key(c, key, sizeof(key), RDZV_R_COUNT), 1, on_dynamic_count, c);
}

static void on_round(int status, const void *val, size_t len, void *arg)
{
	struct coord *c = arg;
	char buf[16];

	if (c->phase != CP_JOIN || (status != 0 && status != -ENOENT))
		return;
	c->round = 0;
	if (status == 0 && len > 0 && len < sizeof(buf)) {
		memcpy(buf, val, len);
		buf[len] = '\0';
		if (util_parse_int(buf, 0, 1 << 30, &c->round) != 0)
			c->round = 0;
	}
	dynamic_count(c);
}

/* ---- both ---------------------------------------------------------------------------------- */

static void after_config(struct coord *c)
{
	c->config_checked = true;
	if (!c->job->dynamic)
		static_claim(c);
	else /* a fresh node joins the current round */
		store_async_get(c->A, RDZV_KEY_ROUND, on_round, c);
}

static void my_config(struct coord *c, struct rdzv_config *cfg)
{
	struct rdzv_conf def;

	memset(cfg, 0, sizeof(*cfg));
	snprintf(cfg->backend, sizeof(cfg->backend), "%s", c->job->rdzv_backend);
	cfg->min_nodes = c->job->min_nodes;
	cfg->max_nodes = c->job->max_nodes;
	cfg->max_restarts = c->job->max_restarts;
	snprintf(cfg->version, sizeof(cfg->version), "%s", DDP_VERSION);
	snprintf(cfg->protocol, sizeof(cfg->protocol), "%s", RDZV_PROTOCOL);
	cfg->node_rank = c->job->dynamic ? -1 : c->job->node_rank;
	snprintf(cfg->host, sizeof(cfg->host), "%s", c->host);
	if (c->job->hang_timeout_ms > 0)
		snprintf(cfg->hang_timeout, sizeof(cfg->hang_timeout), "%g",
			 (double)c->job->hang_timeout_ms / 1000.0);
	/* The default goes as none, as an older ddprun writes it. */
	if (c->job->shutdown_timeout_ms != CLI_SHUTDOWN_TIMEOUT_MS)
		snprintf(cfg->shutdown_timeout, sizeof(cfg->shutdown_timeout), "%g",
			 (double)c->job->shutdown_timeout_ms / 1000.0);
	rdzv_conf_default(&def);
	if (c->conf->keep_alive_interval_ms != def.keep_alive_interval_ms)
		snprintf(cfg->keep_alive_interval, sizeof(cfg->keep_alive_interval), "%g",
			 (double)c->conf->keep_alive_interval_ms / 1000.0);
	if (c->conf->heartbeat_timeout_ms != def.heartbeat_timeout_ms)
		snprintf(cfg->heartbeat_timeout, sizeof(cfg->heartbeat_timeout), "%g",
			 (double)c->conf->heartbeat_timeout_ms / 1000.0);
}

static void on_config(int status, const void *val, size_t len, void *arg)
{
	struct coord *c = arg;
	struct rdzv_config mine, theirs;
	char msg[600];

	if (status != 0 || c->phase != CP_JOIN)
		return;
	my_config(c, &mine);
	if (rdzv_config_decode(val, len, &theirs) != 0) {
		coord_publish_error(c, 2, true, "the job's settings in the store are malformed");
		return;
	}
	if (rdzv_config_diff(&mine, &theirs, msg, sizeof(msg)) != 0) {
		coord_publish_error(c, 2, true, msg);
		return;
	}
	{ /* this node wrote the job's settings: the store learns its run id */
		char *v = rdzv_config_encode(&mine);

		if (v != NULL && strlen(v) == len && memcmp(v, val, len) == 0)
			coord_register_run(c);
		free(v);
	}
	after_config(c);
}

/* ---- a run id that is taken ----------------------------------------------------- */

static void on_ended_end(int status, const void *val, size_t len, void *arg)
{
	struct coord *c = arg;
	struct rdzv_end e;
	const char *how = "ended";

	if (c->phase != CP_JOIN || (status != 0 && status != -ENOENT))
		return;
	if (status == 0 && rdzv_end_decode(val, len, &e) == 0)
		how = e.kind == RDZV_END_OK ? "finished" : "failed";
	coord_fail(c, 1,
		   "error: --rdzv-id %s is taken: a job with this run id already ran on the store "
		   "at %s:%d and %s (in round %d); give this job another --rdzv-id (or use a "
		   "fresh store)",
		   c->job->run_id, c->store_host, c->store_port, how, c->round);
}

static void write_config(struct coord *c)
{
	struct rdzv_config cfg;
	char *v;

	my_config(c, &cfg);
	v = rdzv_config_encode(&cfg);
	if (v == NULL ||
	    store_async_compare_set(c->A, RDZV_KEY_CONFIG, "", 0, v, strlen(v), on_config, c) != 0)
		coord_fail(c, 1, "error: out of memory");
	free(v);
}

/* A job that ended for good left "ended": its run id is not for a new job
 * (which would otherwise find the old rounds closed and its end "ok"). */
static void on_ended(int status, const void *val, size_t len, void *arg)
{
	struct coord *c = arg;
	char buf[16], key[64];

	if (c->phase != CP_JOIN)
		return;
	if (status == -ENOENT) {
		write_config(c);
		return;
	}
	if (status != 0)
		return;
	c->round = 0;
	if (len > 0 && len < sizeof(buf)) {
		memcpy(buf, val, len);
		buf[len] = '\0';
		if (util_parse_int(buf, 0, 1 << 30, &c->round) != 0)
			c->round = 0;
	}
	store_async_get(c->A, coord_key(c, key, sizeof(key), RDZV_R_END), on_ended_end, c);
}

char *coord_lost_closed(int node, int round, const char *why)
{
	char msg[RDZV_WHY_MAX + 64];

	snprintf(msg, sizeof(msg), "node %d lost (%s) during the rendezvous of round %d", node, why,
		 round);
	return rdzv_closed_error(COORD_EXIT_LOST, msg);
}

void coord_guard_join(struct coord *c, int round)
{
	char key[64], why[RDZV_WHY_MAX], *v;

	snprintf(why, sizeof(why), "the agent on host %.200s exited", c->host);
	snprintf(key, sizeof(key), RDZV_KEY_ROUND_FMT RDZV_R_CLOSED, round);
	v = coord_lost_closed(c->rank, round, why);
	if (v != NULL)
		store_async_on_close_set(c->A, key, v, strlen(v), NULL, NULL);
	free(v);
}

void coord_join(struct coord *c)
{
	char msg[300];

	c->phase = CP_JOIN;
	c->in_round = false;
	c->end_known = false;
	c->at_barrier = false;
	c->pub_must_fail = false;
	c->k = 0;
	c->last_call_ms = 0; /* a new round's: none yet (coord_watch.c says so) */
	c->last_call_over = false;
	coord_rejoin_reset(c);
	c->rank = c->job->dynamic ? -1 : c->job->node_rank;
	c->nnodes = c->job->dynamic ? 0 : c->job->max_nodes;
	coord_live_start(c);
	if (!c->job->dynamic && c->rank >= c->nnodes) {
		snprintf(msg, sizeof(msg),
			 "node rank %d (host %.200s) is out of range: --nnodes is %d", c->rank,
			 c->host, c->nnodes);
		coord_publish_error(c, 2, true, msg);
		return;
	}
	if (!c->job->dynamic)
		coord_guard_join(c, c->round);
	if (c->config_checked) {
		if (c->job->dynamic)
			dynamic_count(c);
		else
			static_claim(c);
		return;
	}
	if (store_async_get(c->A, RDZV_KEY_ENDED, on_ended, c) != 0)
		coord_fail(c, 1, "error: out of memory");
}
