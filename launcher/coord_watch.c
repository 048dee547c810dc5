/* coord_watch: a rendezvous you can watch. While a node waits for a round
 * to close it says, after a second and then every COORD_WATCH_MS, who has
 * joined and who is missing; the join timeout says the same; and both name
 * the other run ids whose nodes wait on the same store (a node with the
 * wrong --rdzv-id waits for peers that are there under another id).
 *
 * A survey reads, on A: the round's count (dynamic), its node/ and gone/
 * keys, then the store-wide runs/ registry and each other run's "ended"
 * (rdzv_keys.h). One survey at a time; a request during one runs its
 * callback when it ends (the last request wins). */
#include "coord_int.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_async.h"
#include "util.h"

#define WATCH_FIRST_MS	1000
#define WATCH_MAX_NODES 4096 /* a larger job is surveyed by its first nodes */
#define WATCH_MAX_RUNS	32
#define WATCH_NAMED	8 /* nodes named in a line */
/* In a larger job only node rank 0 (the first arrival) reads every node's
 * key for its waiting lines; the others count (N nodes reading N keys every
 * few seconds would load the store). Timeouts always read them. */
#define WATCH_FULL_NODES 64

static void survey_end(struct coord *c)
{
	void (*done)(struct coord *) = c->sv.done;

	c->sv.busy = false;
	c->sv.done = NULL;
	if (done != NULL)
		done(c);
}

static int root_prefix(struct coord *c)
{
	return store_async_set_prefix(c->A, RDZV_KEY_ROOT);
}

static void job_prefix(struct coord *c)
{
	store_async_set_prefix(c->A, c->prefix);
}

/* ---- the other run ids on this store ----------------------------------------- */

static void on_runs_ended(int status, size_t n, const void *const *vals, const size_t *lens,
			  void *arg)
{
	struct coord *c = arg;
	size_t i, at = 0;

	c->sv.others[0] = '\0';
	for (i = 0; status == 0 && i < n && i < (size_t)c->sv.nruns; i++) {
		int w;

		if (lens[i] > 0) /* that job is over */
			continue;
		w = snprintf(c->sv.others + at, sizeof(c->sv.others) - at, "%s%s", at ? ", " : "",
			     c->sv.runs[i]);
		if (w < 0 || (size_t)w >= sizeof(c->sv.others) - at)
			break;
		at += (size_t)w;
	}
	survey_end(c);
}

static void on_runs(int status, size_t n, const void *const *vals, const size_t *lens, void *arg)
{
	struct coord *c = arg;
	const char *keys[WATCH_MAX_RUNS];
	char kbuf[WATCH_MAX_RUNS][RDZV_RUN_ID_MAX + 16];
	size_t i;
	int j, m = 0;

	for (i = 0; status == 0 && i < n && m < WATCH_MAX_RUNS; i++) {
		char id[RDZV_RUN_ID_MAX];

		if (lens[i] == 0 || lens[i] >= sizeof(id))
			continue;
		memcpy(id, vals[i], lens[i]);
		id[lens[i]] = '\0';
		if (strcmp(id, c->job->run_id) == 0)
			continue;
		for (j = 0; j < m && strcmp(c->sv.runs[j], id) != 0; j++)
			;
		if (j < m)
			continue;
		snprintf(c->sv.runs[m], sizeof(c->sv.runs[m]), "%s", id);
		snprintf(kbuf[m], sizeof(kbuf[m]), "%s/" RDZV_KEY_ENDED, id);
		keys[m] = kbuf[m];
		m++;
	}
	c->sv.nruns = m;
	if (m == 0 || c->A == NULL || root_prefix(c) != 0) {
		survey_end(c);
		return;
	}
	if (store_async_multi_get(c->A, keys, (size_t)m, on_runs_ended, c) != 0)
		survey_end(c);
	job_prefix(c);
}

static void on_runs_n(int status, int64_t n, void *arg)
{
	struct coord *c = arg;
	char kbuf[WATCH_MAX_RUNS][16];
	const char *keys[WATCH_MAX_RUNS];
	int64_t i, first;
	size_t m = 0;

	if (status != 0 || n < 1 || c->A == NULL || root_prefix(c) != 0) {
		survey_end(c);
		return;
	}
	/* The latest runs: the ones that may be waiting now. */
	first = n > WATCH_MAX_RUNS ? n - WATCH_MAX_RUNS + 1 : 1;
	for (i = first; i <= n; i++, m++) {
		snprintf(kbuf[m], sizeof(kbuf[m]), RDZV_KEY_RUNS_FMT, (int)i);
		keys[m] = kbuf[m];
	}
	if (store_async_multi_get(c->A, keys, m, on_runs, c) != 0)
		survey_end(c);
	job_prefix(c);
}

static void survey_runs(struct coord *c)
{
	c->sv.others[0] = '\0';
	if (c->A == NULL || root_prefix(c) != 0) {
		survey_end(c);
		return;
	}
	if (store_async_add(c->A, RDZV_KEY_RUNS_N, 0, on_runs_n, c) != 0)
		survey_end(c);
	job_prefix(c);
}

static void on_run_slot(int status, int64_t i, void *arg)
{
	struct coord *c = arg;
	char key[32];

	if (status != 0 || c->A == NULL || root_prefix(c) != 0)
		return;
	snprintf(key, sizeof(key), RDZV_KEY_RUNS_FMT, (int)i);
	store_async_set(c->A, key, c->job->run_id, strlen(c->job->run_id), NULL, NULL);
	job_prefix(c);
}

void coord_register_run(struct coord *c)
{
	if (strlen(c->job->run_id) >= RDZV_RUN_ID_MAX || root_prefix(c) != 0)
		return;
	store_async_add(c->A, RDZV_KEY_RUNS_N, 1, on_run_slot, c);
	job_prefix(c);
}

/* ---- the round's nodes ---------------------------------------------------------- */

static void add_name(char *buf, size_t len, int *named, int rank, const char *host)
{
	size_t at = strlen(buf);

	if (*named == WATCH_NAMED)
		snprintf(buf + at, len - at, ", ...");
	else if (*named < WATCH_NAMED)
		snprintf(buf + at, len - at, "%s%d@%.64s", at ? ", " : "", rank, host);
	(*named)++;
}

static void on_nodes(int status, size_t n, const void *const *vals, const size_t *lens, void *arg)
{
	struct coord *c = arg;
	size_t nodes = c->job->dynamic ? n / 2 : n, i;
	int named = 0, nmiss = 0;

	c->sv.joined = c->sv.missing = 0;
	c->sv.joined_s[0] = c->sv.missing_s[0] = '\0';
	for (i = 0; status == 0 && i < nodes; i++) {
		struct rdzv_node d;

		if (c->job->dynamic && lens[nodes + i] > 0)
			continue; /* left */
		if (lens[i] == 0 || rdzv_node_decode(vals[i], lens[i], &d) != 0) {
			if (!c->job->dynamic) {
				size_t at = strlen(c->sv.missing_s);

				if (nmiss < WATCH_NAMED)
					snprintf(c->sv.missing_s + at, sizeof(c->sv.missing_s) - at,
						 "%s%zu", at ? ", " : "", i);
				else if (nmiss == WATCH_NAMED)
					snprintf(c->sv.missing_s + at, sizeof(c->sv.missing_s) - at,
						 ", ...");
				nmiss++;
			}
			continue;
		}
		/* Dynamic: the rank it would get if the round closed now. */
		add_name(c->sv.joined_s, sizeof(c->sv.joined_s), &named,
			 c->job->dynamic ? c->sv.joined : (int)i, d.host);
		c->sv.joined++;
	}
	c->sv.missing = nmiss;
	if (!c->job->dynamic && (size_t)c->nnodes > nodes) /* beyond what was read */
		c->sv.missing += c->nnodes - (int)nodes;
	survey_runs(c);
}

static void survey_nodes(struct coord *c, int64_t count)
{
	size_t n = count > WATCH_MAX_NODES ? WATCH_MAX_NODES : (size_t)(count > 0 ? count : 0);
	const char **keys, **gone = NULL;

	c->sv.count = count;
	c->sv.named = !c->sv.light;
	if (c->sv.light) { /* the count alone (a static count is claims) */
		c->sv.joined = (int)(count < INT32_MAX ? count : INT32_MAX);
		c->sv.missing = c->job->dynamic ? 0 : c->nnodes - c->sv.joined;
		survey_runs(c);
		return;
	}
	if (n == 0) {
		c->sv.joined = 0;
		c->sv.joined_s[0] = c->sv.missing_s[0] = '\0';
		survey_runs(c);
		return;
	}
	keys = coord_keys(c, NULL, c->job->dynamic ? 2 * n : n, RDZV_R_NODE);
	if (keys != NULL && c->job->dynamic) {
		size_t i;

		gone = keys + n;
		for (i = 0; i < n; i++)
			coord_key(c, (char *)gone[i], COORD_KEY_MAX, RDZV_R_GONE, (int)i);
	}
	if (keys == NULL ||
	    store_async_multi_get(c->A, keys, c->job->dynamic ? 2 * n : n, on_nodes, c) != 0)
		survey_end(c);
	free(keys);
}

static void on_count(int status, int64_t n, void *arg)
{
	struct coord *c = arg;

	if (status != 0) {
		survey_end(c);
		return;
	}
	survey_nodes(c, n);
}

void coord_survey(struct coord *c, bool light, void (*done)(struct coord *c))
{
	char key[64];

	c->sv.done = done;
	if (c->sv.busy)
		return;
	c->sv.busy = true;
	c->sv.light = light;
	if (c->A == NULL || !c->a_up) {
		survey_end(c);
		return;
	}
	if (!c->job->dynamic && !light) {
		survey_nodes(c, c->nnodes);
		return;
	}
	if (store_async_add(c->A, coord_key(c, key, sizeof(key), RDZV_R_COUNT), 0, on_count, c) !=
	    0)
		survey_end(c);
}

/* ---- what a waiting node says ----------------------------------------------------- */

void coord_survey_text(struct coord *c, const char *tail, char *buf, size_t len)
{
	const struct coord_survey *s = &c->sv;
	size_t at;

	if (!s->named && !c->job->dynamic)
		snprintf(buf, len, "%d of %d joined (node rank 0 names the missing)%s", s->joined,
			 c->nnodes, tail);
	else if (!s->named)
		snprintf(buf, len, "round %d, %d joined, --nnodes %d:%d%s", c->round, s->joined,
			 c->job->min_nodes, c->job->max_nodes, tail);
	else if (!c->job->dynamic && s->missing > WATCH_NAMED)
		snprintf(buf, len, "%d of %d joined (%s), missing node ranks %s (%d in all)%s",
			 s->joined, c->nnodes, s->joined_s, s->missing_s, s->missing, tail);
	else if (!c->job->dynamic)
		snprintf(buf, len, "%d of %d joined (%s), missing node rank%s %s%s", s->joined,
			 c->nnodes, s->joined_s, s->missing > 1 ? "s" : "", s->missing_s, tail);
	else
		snprintf(buf, len, "round %d, %d joined (%s), --nnodes %d:%d%s", c->round,
			 s->joined, s->joined_s, c->job->min_nodes, c->job->max_nodes, tail);
	at = strlen(buf);
	if (s->others[0] != '\0')
		snprintf(buf + at, len - at,
			 "; this store also holds nodes of --rdzv-id %s (is this node's --rdzv-id "
			 "%s right?)",
			 s->others, c->job->run_id);
}

static void say_waiting(struct coord *c)
{
	char text[900], tail[200] = "";
	int64_t now = util_now_ms();

	if (c->phase != CP_JOIN)
		return;
	if (c->job->dynamic && c->rj.busy && c->rj.waiting > 0)
		snprintf(tail, sizeof(tail),
			 ": the round closes once %d more node%s of round %d stopped %s workers "
			 "and came (%.0f s at most)",
			 c->rj.waiting, c->rj.waiting > 1 ? "s" : "", c->round - 1,
			 c->rj.waiting > 1 ? "their" : "its",
			 (double)(c->rj.until_ms > now ? c->rj.until_ms - now : 0) / 1000.0);
	else if (c->job->dynamic && c->sv.joined < c->job->min_nodes)
		snprintf(tail, sizeof(tail), ", %d more needed", c->job->min_nodes - c->sv.joined);
	else if (c->job->dynamic && c->last_call_ms > now)
		snprintf(tail, sizeof(tail),
			 ": the round closes at %d nodes, or when the last call ends in %.0f s",
			 c->job->max_nodes, (double)(c->last_call_ms - now) / 1000.0);
	else if (c->job->dynamic && c->last_call_ms == 0)
		/* This node came before the MIN-th, which runs the last call. */
		snprintf(tail, sizeof(tail),
			 ": the round closes at %d nodes, or when another node's last call ends",
			 c->job->max_nodes);
	else if (c->job->dynamic)
		/* Ours ended and the round is still open: the nodes that stayed
		 * were too few (some left), so a later arrival's last call, or MAX
		 * nodes, closes it. */
		snprintf(tail, sizeof(tail),
			 ": the round closes at %d nodes, or at a later node's last call (this "
			 "node's ended %.0f s ago)",
			 c->job->max_nodes, (double)(now - c->last_call_ms) / 1000.0);
	coord_survey_text(c, tail, text, sizeof(text));
	agent_say("waiting for nodes: %s", text);
}

static void on_watch_tick(uv_timer_t *t)
{
	struct coord *c = t->data;

	if (c->phase != CP_JOIN) {
		uv_timer_stop(t);
		return;
	}
	coord_survey(c,
		     (c->job->dynamic ? c->job->max_nodes : c->nnodes) > WATCH_FULL_NODES &&
			     (c->job->dynamic ? c->k != 1 : c->rank != 0),
		     say_waiting);
}

void coord_watch_start(struct coord *c)
{
	if (c->timers_on && c->phase == CP_JOIN)
		uv_timer_start(&c->watch_timer, on_watch_tick, WATCH_FIRST_MS, COORD_WATCH_MS);
}
