/* coord_report: after a failure that ends the job, every node publishes its
 * local failures (r<r>/failures/<rank>: a JSON list of report entries with
 * their host, observed time, libddp's secondary-failure marker and what
 * shows the cause: the last stderr lines (at most REPORT_TAIL_BYTES), the
 * stderr log's path on that host, the guessed cause, the interpreter), waits
 * (bounded) for the list of every other participant that is not known lost,
 * and applies the root-cause rule (report.h) to all of them: every node
 * reads the same lists, so every node ends with the same status, whichever
 * failure won the race to set the round's end. Node 0 prints the combined
 * report, root cause first; the others print their own failures. */
#include "coord_int.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hang.h"
#include "store_async.h"

/* Extra seconds the report waits beyond the others' shutdown timeout. */
#define REPORT_SLACK_MS 5000
/* The most stderr tail bytes one node's failure list carries. */
#define TAIL_BUDGET (256u * 1024)

static char *entries_json(const struct report_entry *e, size_t n, const char *host)
{
	cJSON *list = cJSON_CreateArray();
	size_t i, tails = 0;
	char *s;

	for (i = 0; list != NULL && i < n; i++) {
		cJSON *o = cJSON_CreateObject();

		if (o == NULL)
			break;
		cJSON_AddNumberToObject(o, "rank", e[i].global_rank);
		cJSON_AddNumberToObject(o, "local_rank", e[i].local_rank);
		cJSON_AddNumberToObject(o, "pid", (double)e[i].pid);
		cJSON_AddNumberToObject(o, "exitcode", e[i].exitcode);
		cJSON_AddNumberToObject(o, "time_us", (double)e[i].time_us);
		if (e[i].caused_by != NULL)
			cJSON_AddStringToObject(o, "caused_by", e[i].caused_by);
		if (e[i].stopped)
			cJSON_AddTrueToObject(o, "stopped");
		if (e[i].error_file != NULL)
			cJSON_AddStringToObject(o, "error_file", e[i].error_file);
		cJSON_AddStringToObject(o, "message", e[i].message ? e[i].message : "");
		cJSON_AddStringToObject(o, "host", e[i].host ? e[i].host : host);
		/* What shows the cause (report_cause.c): each tail is bounded by
		 * its making, all of a node's together by TAIL_BUDGET (a node
		 * whose every rank failed the same way needs not send them all). */
		if (e[i].tail != NULL && tails + strlen(e[i].tail) <= TAIL_BUDGET) {
			cJSON_AddStringToObject(o, "tail", e[i].tail);
			tails += strlen(e[i].tail);
		}
		if (e[i].log_file != NULL)
			cJSON_AddStringToObject(o, "log_file", e[i].log_file);
		if (e[i].cause != NULL)
			cJSON_AddStringToObject(o, "cause", e[i].cause);
		if (e[i].interpreter != NULL)
			cJSON_AddStringToObject(o, "interpreter", e[i].interpreter);
		/* A failure after the stop goes as [{...}]: an older ddprun, which
		 * skips what is no object, would take it for one before the stop
		 * (and maybe the root cause). */
		if (e[i].late) {
			cJSON *wrap = cJSON_CreateArray();

			if (wrap == NULL || !cJSON_AddItemToArray(wrap, o)) {
				cJSON_Delete(wrap);
				cJSON_Delete(o);
				break;
			}
			o = wrap;
		}
		cJSON_AddItemToArray(list, o);
	}
	s = list ? cJSON_PrintUnformatted(list) : NULL;
	cJSON_Delete(list);
	return s;
}

static char *dup_str(const cJSON *o, const char *name, size_t max)
{
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);

	return cJSON_IsString(f) ? strndup(f->valuestring, max) : NULL;
}

static int num(const cJSON *o, const char *name)
{
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);

	return cJSON_IsNumber(f) && f->valuedouble >= -2147483648.0 &&
			       f->valuedouble <= 2147483647.0
		       ? (int)f->valuedouble
		       : 0;
}

/* Append one node's list to *e (grown). 0, or -1 when v is no list. */
static int add_entries(const void *v, size_t len, struct report_entry **e, size_t *n)
{
	cJSON *list = len > 0 ? cJSON_ParseWithLength(v, len) : NULL;
	const cJSON *el;

	if (!cJSON_IsArray(list)) {
		cJSON_Delete(list);
		return -1;
	}
	cJSON_ArrayForEach(el, list)
	{
		struct report_entry *grown = realloc(*e, (*n + 1) * sizeof(**e));
		struct report_entry *x;
		const cJSON *t;
		bool late = cJSON_IsArray(el) && cJSON_GetArraySize(el) == 1;
		/* [{...}]: after the stop (entries_json) */
		const cJSON *o = late ? el->child : el;

		if (grown == NULL)
			break;
		*e = grown;
		if (!cJSON_IsObject(o))
			continue;
		t = cJSON_GetObjectItemCaseSensitive(o, "time_us");
		x = &(*e)[*n];
		memset(x, 0, sizeof(*x));
		x->global_rank = num(o, "rank");
		x->local_rank = num(o, "local_rank");
		x->pid = (pid_t)num(o, "pid");
		x->exitcode = num(o, "exitcode");
		x->time_us = cJSON_IsNumber(t) ? (int64_t)t->valuedouble : 0;
		x->caused_by = dup_str(o, "caused_by", REPORT_CAUSE_MAX);
		x->stopped = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "stopped"));
		x->late = late;
		x->error_file = dup_str(o, "error_file", 4096);
		x->message = dup_str(o, "message", REPORT_MAX_ERROR_FILE);
		x->host = dup_str(o, "host", RDZV_HOST_MAX);
		x->tail = dup_str(o, "tail", REPORT_TAIL_BYTES);
		x->log_file = dup_str(o, "log_file", 4096);
		x->cause = dup_str(o, "cause", 1024);
		x->interpreter = dup_str(o, "interpreter", 8192);
		if (x->message == NULL)
			x->message = strdup("");
		if (x->message == NULL) {
			report_entry_free(x);
			break;
		}
		(*n)++;
	}
	cJSON_Delete(list);
	return 0;
}

void coord_verdict(const struct rdzv_end *end, const struct report_entry *e, size_t n, bool missing,
		   int *status, size_t *root)
{
	size_t best = report_root_cause(e, n), i;
	bool listed = false;
	struct report_entry x = {0};

	*root = n;
	if (end->kind != RDZV_END_FAIL) {
		/* A lost node (or store): 75, unless a worker failed on its own. */
		if (n > 0 && e[best].caused_by == NULL)
			*root = best;
		*status = *root < n ? report_exit_status(&e[best]) : COORD_EXIT_LOST;
		return;
	}
	/* The end's own failure takes part when no list holds it: a signal, a
	 * node that could not run its workers, a worker whose node's list never
	 * came. */
	x.global_rank = end->rank;
	x.time_us = end->time_us;
	x.caused_by = end->caused_by[0] ? (char *)end->caused_by : NULL;
	for (i = 0; i < n && end->rank >= 0; i++)
		listed |= e[i].global_rank == end->rank;
	if (!listed && (n == 0 || report_cause_before(&x, &e[best]))) {
		/* Caused by another rank's failure that no list shows: lost. */
		*status = x.caused_by != NULL && missing ? COORD_EXIT_LOST : end->status;
		return;
	}
	if (e[best].caused_by != NULL && missing) {
		*status = COORD_EXIT_LOST; /* the cause is on a node that never told */
		return;
	}
	*root = best;
	*status = report_exit_status(&e[best]);
}

int coord_local_status(struct coord *c)
{
	struct rdzv_end lost = {.kind = RDZV_END_LOST, .rank = -1};
	const struct report_entry *mine = NULL;
	size_t n = 0, root;
	int status;
	/* Between attempts the failures on record are of one the job restarts
	 * after, and the round's end was its: what ends the job now is the
	 * loss alone (75; it was the last attempt's worker status). */
	bool between = c->phase == CP_MOVE || (c->phase == CP_JOIN && c->round > 0);

	if (c->agent != NULL && !between)
		mine = agent_failures(c->agent, &n);
	coord_verdict(!between && c->end_known && c->end.kind == RDZV_END_FAIL ? &c->end : &lost,
		      mine, n, true, &status, &root);
	return status;
}

/* The node a global rank of this round runs on (-1: none). */
static int node_of(const struct coord *c, int rank)
{
	int i, first = 0;

	for (i = 0; c->nodes != NULL && i < c->nnodes; i++) {
		if (rank >= first && rank < first + c->nodes[i].nproc)
			return i;
		first += c->nodes[i].nproc;
	}
	return -1;
}

/* Decide from the entries of every list that came (missing: not all did),
 * say so where the end named another failure, report, leave. */
static void conclude(struct coord *c, struct report_entry *e, size_t n, bool missing)
{
	char where[320] = "";
	size_t root, croot, i;
	int status, culprit = -1, node;

	/* A hang whose verdict named the rank the others waited for: its
	 * SIGABRT is the failure the others' follow (one node's dump marks
	 * it so itself, hang_dump.c), here and in the node's own summary. */
	if (c->end.kind == RDZV_END_FAIL && c->end.rank < 0 && c->end.status == HANG_EXIT &&
	    util_parse_int(c->end.culprit, 0, INT_MAX - 1, &culprit) == 0) {
		report_make_primary(e, n, culprit, REPORT_CAUSE_HANG);
		if (c->agent != NULL)
			agent_hang_culprit(c->agent, culprit);
	} else {
		culprit = -1;
	}

	coord_verdict(&c->end, e, n, missing, &status, &root);
	/* The end's own failure (the hang) sorts before the rank its verdict
	 * named, whose failure is still the root cause the summaries give. */
	croot = root;
	for (i = 0; croot == n && culprit >= 0 && i < n; i++)
		if (e[i].global_rank == culprit && e[i].caused_by == NULL)
			croot = i;
	if (croot < n) {
		int k = snprintf(where, sizeof(where), "rank %d (local rank %d) ",
				 e[croot].global_rank, e[croot].local_rank);

		node = node_of(c, e[croot].global_rank);
		if (node >= 0)
			k += snprintf(where + k, sizeof(where) - (size_t)k, "on node %d ", node);
		snprintf(where + k, sizeof(where) - (size_t)k, "(host %.200s)",
			 e[croot].host ? e[croot].host : c->host);
	} else if (culprit >= 0 && (node = node_of(c, culprit)) >= 0) {
		snprintf(where, sizeof(where),
			 "rank %d on node %d (host %.200s; its failures did not come)", culprit,
			 node, c->nodes[node].host);
	} else {
		culprit = -1; /* not a rank of this round */
	}
	if (root < n && e[root].global_rank != c->end.rank)
		agent_say("root cause (first observed failure): %s, exit status %d", where, status);
	else if (culprit >= 0)
		agent_say(
			"root cause: %s, the rank the hang's verdict found the others waited for, "
			"exit status %d",
			where, status);
	else if (root == n && status == COORD_EXIT_LOST && c->end.kind == RDZV_END_FAIL)
		agent_say("not every node sent its failures in time, and every failure seen was "
			  "caused by another rank's or came after the stop: a node was lost");
	c->status = status;
	if (c->rank == 0)
		agent_report(c->agent, e, n, croot < n ? croot : report_root_cause(e, n), NULL);
	else /* its own failures, the job's root cause among them or not */
		agent_report(c->agent, NULL, 0, 0,
			     (croot < n && agent_own_failure(c->agent, &e[croot]) == NULL) ||
					     (croot == n && culprit >= 0)
				     ? where
				     : NULL);
	coord_leave(c);
}

static void free_entries(struct report_entry *e, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		report_entry_free(&e[i]);
	free(e);
}

/* This node's own failures, as the others read them. */
static void add_mine(struct coord *c, struct report_entry **e, size_t *n)
{
	size_t local;
	const struct report_entry *mine = agent_failures(c->agent, &local);
	char *own = entries_json(mine, local, c->host);

	if (own != NULL)
		add_entries(own, strlen(own), e, n);
	free(own);
}

void coord_report_local(struct coord *c)
{
	struct report_entry *e = NULL;
	size_t n = 0;

	add_mine(c, &e, &n);
	conclude(c, e, n, c->nnodes > 1);
	free_entries(e, n);
}

static bool lost_node(const struct coord *c, size_t i)
{
	return c->end.kind == RDZV_END_LOST && c->end.node == (int)i;
}

static void on_collected(int status, size_t n, const void *const *vals, const size_t *lens,
			 void *arg)
{
	struct coord *c = arg;
	struct report_entry *e = NULL;
	size_t ne = 0, i;
	bool missing = false;

	if (c->phase != CP_REPORT)
		return;
	if (status != 0 || n != (size_t)c->nnodes) {
		coord_report_local(c);
		return;
	}
	char who[128] = "";
	size_t at = 0;

	for (i = 0; i < n; i++) {
		if ((int)i == c->rank) {
			add_mine(c, &e, &ne);
		} else if (!lost_node(c, i) && add_entries(vals[i], lens[i], &e, &ne) != 0) {
			missing = true; /* it never told (or not in time) */
			c->report_missing++;
			if (at < sizeof(who) - 16)
				at += (size_t)snprintf(who + at, sizeof(who) - at, "%s%zu",
						       at ? ", " : "", i);
			else if (at < sizeof(who) - 4)
				at += (size_t)snprintf(who + at, sizeof(who) - at, "...");
		}
	}
	/* Said, because the wait for them is why this node ended so late. */
	if (missing)
		agent_say("no readable failure list from node %s within %.0f s: the report goes on "
			  "without it",
			  who, (double)(c->job->shutdown_timeout_ms + REPORT_SLACK_MS) / 1000.0);
	conclude(c, e, ne, missing);
	free_entries(e, ne);
}

/* Keys r<r>/failures/<i> for every node. */
static const char **failure_keys(struct coord *c)
{
	return coord_keys(c, NULL, (size_t)c->nnodes, RDZV_R_FAILURES);
}

static void on_waited(int status, void *arg)
{
	struct coord *c = arg;
	const char **keys;

	if (c->phase != CP_REPORT)
		return;
	/* Whatever arrived in time (a missing list reads as empty). */
	keys = failure_keys(c);
	if (keys == NULL ||
	    store_async_multi_get(c->W, keys, (size_t)c->nnodes, on_collected, c) != 0)
		coord_report_local(c);
	free(keys);
}

void coord_publish_failures(struct coord *c)
{
	size_t n = 0;
	/* A dynamic member whose round ended before it started here: none of
	 * this round (what the agent holds is an earlier attempt's), but the
	 * others' reports wait for its list. */
	bool unstarted = !c->in_round && c->owe_round == c->round && c->rank >= 0;
	const struct report_entry *mine = unstarted ? NULL : agent_failures(c->agent, &n);
	char key[64], *v;

	if (!c->a_up || (!c->in_round && !unstarted))
		return;
	v = entries_json(mine, n, c->host);
	if (v != NULL)
		store_async_set(c->A, coord_key(c, key, sizeof(key), RDZV_R_FAILURES, c->rank), v,
				strlen(v), NULL, NULL);
	free(v);
}

void coord_report(struct coord *c)
{
	size_t i, k = 0;
	const char **keys, **wait;

	coord_publish_failures(c);
	if (!c->w_up || !c->in_round || c->nnodes < 2) {
		coord_report_local(c);
		return;
	}
	/* Every other participant's list, but a lost node's: the same lists on
	 * every node, so the same verdict. */
	keys = failure_keys(c);
	wait = keys ? malloc((size_t)c->nnodes * sizeof(*wait)) : NULL;
	for (i = 0; wait != NULL && i < (size_t)c->nnodes; i++)
		if ((int)i != c->rank && !lost_node(c, i))
			wait[k++] = keys[i];
	if (wait == NULL || k == 0 ||
	    store_async_wait(c->W, wait, k, c->job->shutdown_timeout_ms + REPORT_SLACK_MS,
			     on_waited, c) != 0)
		on_waited(0, c);
	free(wait);
	free(keys);
}
