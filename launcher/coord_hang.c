/* coord_hang: hang dumps across nodes (see hang.h).
 *
 * A node that finds the job hung (or gets SIGUSR2) asks every node for a
 * dump through the store; every agent has a WAIT parked on the next request
 * key on a connection of its own (H), dumps its ranks when it arrives and
 * publishes where they are. The requester waits (bounded) for every node's
 * positions and prints the job's verdict; after a hang it then ends the
 * round with a final failure, status HANG_EXIT, observed when the hang was
 * (before any SIGABRT it caused: those failures are marked secondary), so
 * every node stops and exits with 124. Every node that dumped for it leaves
 * the round's end to it (bounded: HANG_END_WAIT_MS from the request), and
 * the requester's own report and leave wait for its gathering
 * (HANG_DEFER_MS). A hang found while this node's own on-demand request is
 * gathered is asked for after it.
 * Keys, under "ddprun/<run_id>/r<r>/":
 *   hang/count        ADD counter: request numbers k = 1, 2, ...
 *   hang/req/<k>      {"node": R, "host": "...", "fail": bool, "why": "..."}
 *                     (R -1: from outside, e.g. ddpstore; never "fail";
 *                     the host is for the end's words), or
 *                     {"over": true} (the round is over: the parked waits
 *                     of that round end)
 *   hang/where/<k>/<R>  node R's ranks: [[rank, libddp, in, entered,
 *                     completed, op(, wait)], ..., {"stopped": [rank, ...],
 *                     "init": [...], "exited": [...]}] (wait only when
 *                     known; the object only when a list is not empty: an
 *                     older ddprun skips what is no record, and still reads
 *                     every rank's place; a rank in ddp_init is a record
 *                     without libddp, as such a ddprun read it, and one
 *                     that exited has none)
 *   hang/prog/<R>     ADD counter: node R's ranks made progress (bumped by
 *                     each sample that saw some, at most once a second and
 *                     4 times per timeout); a node whose own ranks stall
 *                     reads them all, and only declares a hang once no
 *                     node's counter moved for the timeout either */
#include "coord_int.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cJSON.h>

#include "cli.h"
#include "hang.h"
#include "output.h"
#include "store_async.h"

/* The requester waits this long for every node's positions. */
#define HANG_COLLECT_MS 30000
/* What waits for a gathering waits at most this long (it asked the store
 * for HANG_COLLECT_MS). */
#define HANG_DEFER_MS (HANG_COLLECT_MS + 5000)
/* A node that dumped for another node's hang waits this long from the
 * request for the requester's end before it ends the round itself: the
 * requester's own dump, its hold for the aborted ranks and its gathering,
 * with room. */
#define HANG_END_WAIT_MS (HANG_STACK_TIMEOUT_MS + HANG_ABORT_GRACE_MS + HANG_COLLECT_MS + 10000)
/* A node parked on request k looks this often whether k was numbered but
 * never came (a store client that added to hang/count but wrote no request,
 * a script cut short): k is skipped, or every later request, the job's own
 * hang verdict too, would wait behind it. Only when two looks in a row find
 * it so: a look can fall between a node's numbering and its write, and
 * skipping it there gave the job two verdicts, the skipped one's on its
 * asker. */
#define HANG_HOLE_MS 5000

struct coord_hang {
	struct coord *c;
	struct store_async *H;
	bool up;
	int round;	  /* the round watched */
	int next;	  /* the request number waited for */
	int hole;	  /* next, found numbered but unwritten by the last look; 0: none */
	int parked_round; /* round of the wait parked on H; -1: none */
	/* this node's request in flight */
	int mine; /* its number; 0: none */
	bool mine_fail;
	char why[200];
	int64_t fired_us;
	int fail_round; /* the round whose hang this node dumped; -1: none */
	/* the node that found it (the request's): whom the end names */
	int fail_node;
	char fail_host[RDZV_HOST_MAX];
	/* progress across nodes: each node counts its progress in
	 * hang/prog/<R>; a stalled node reads every node's counter (both once
	 * per sample of the hang monitor) */
	uint64_t last_pub_ms;
	int64_t *seen; /* nnodes counters as last read (-1: none yet) */
	bool reading;
	uint64_t other_ms; /* uv_now when another node's counter last moved */
	/* the requester's verdict: gathering the positions; what waits for it
	 * (deferred in then_phase of then_round), at most until then_timer */
	bool gathering;
	void (*then)(struct coord *c);
	int then_phase, then_round;
	uv_timer_t then_timer;
	/* after another node's hang request: its end, awaited until end_timer */
	uv_timer_t end_timer;
	bool timers_init; /* then_timer and end_timer */
	int late_round;	  /* the round whose end this node leaves to the requester */
	/* a hang found while this node's own on-demand request was in flight:
	 * asked for once that one is over */
	bool queued_fail;
	char queued_why[200];
	/* test hook: a hang's request numbered only once ask_timer is over */
	uv_timer_t ask_timer;
	struct op *delayed;
};

/* One operation's context: the round and request it is about. */
struct op {
	struct coord_hang *h;
	int round, k;
	bool fail;
	int from;
};

static struct op *op_new(struct coord_hang *h, int round, int k)
{
	struct op *o = calloc(1, sizeof(*o));

	if (o != NULL) {
		o->h = h;
		o->round = round;
		o->k = k;
	}
	return o;
}

static void park(struct coord_hang *h);
static bool run_then(struct coord_hang *h);
static void ask_queued(struct coord_hang *h, int round);

/* ---- positions as JSON ------------------------------------------------------- */

/* Add rank to the list named name in o (made on first use); 0 or -ENOMEM. */
static int add_to_list(cJSON *o, const char *name, int rank)
{
	cJSON *list = cJSON_GetObjectItemCaseSensitive(o, name), *r;

	if (list == NULL &&
	    ((list = cJSON_CreateArray()) == NULL || !cJSON_AddItemToObject(o, name, list))) {
		cJSON_Delete(list);
		return -ENOMEM;
	}
	r = cJSON_CreateNumber(rank);
	if (r == NULL || !cJSON_AddItemToArray(list, r)) {
		cJSON_Delete(r);
		return -ENOMEM;
	}
	return 0;
}

/* The lists of ranks by their place in torch.distributed (hang_torch.c),
 * after the records (an older ddprun skips them). */
static const char *const torch_lists[] = {
	[HANG_TORCH_OWN] = "torch_own",	    [HANG_TORCH_NOGROUP] = "torch_nogroup",
	[HANG_TORCH_COLL] = "torch_coll",   [HANG_TORCH_STORE] = "torch_store",
	[HANG_TORCH_MIXED] = "torch_mixed",
};
#define TORCH_LISTS (sizeof(torch_lists) / sizeof(torch_lists[0]))

char *hang_where_encode(const struct hang_where *w, size_t n)
{
	cJSON *a = cJSON_CreateArray();
	/* What the records cannot say, in an object after them that an older
	 * ddprun skips: {"stopped": [ranks], "init": [ranks in ddp_init],
	 * "torch_coll": [ranks], ... (torch_lists)}. */
	cJSON *more = cJSON_CreateObject();
	char *s;
	size_t i;

	if (a == NULL || more == NULL)
		goto fail;
	for (i = 0; i < n; i++) {
		/* A rank in ddp_init goes as one without libddp, as an older
		 * ddprun, which would take it for a rank in its own code, read
		 * it before; the list after the records says where it is. */
		double v[7] = {w[i].rank,
			       w[i].libddp && !w[i].init,
			       w[i].in,
			       (double)w[i].entered,
			       (double)w[i].completed,
			       w[i].op,
			       w[i].wait};
		cJSON *r;

		if (w[i].rank < 0)
			continue;
		/* A rank that exited only in the list: an older ddprun would
		 * take its record for a running rank. */
		if (w[i].exited) {
			if (add_to_list(more, "exited", w[i].rank) < 0)
				goto fail;
			continue;
		}
		/* The wait only where it means something (inside a collective,
		 * and known); the reader takes six or seven. */
		r = cJSON_CreateDoubleArray(v, w[i].in && w[i].wait ? 7 : 6);
		if (r == NULL || !cJSON_AddItemToArray(a, r)) {
			cJSON_Delete(r);
			goto fail;
		}
		if ((w[i].stopped && add_to_list(more, "stopped", w[i].rank) < 0) ||
		    (w[i].init && add_to_list(more, "init", w[i].rank) < 0) ||
		    (w[i].torch != HANG_TORCH_UNKNOWN && w[i].torch < TORCH_LISTS &&
		     add_to_list(more, torch_lists[w[i].torch], w[i].rank) < 0))
			goto fail;
	}
	if (cJSON_GetArraySize(more) > 0) {
		if (!cJSON_AddItemToArray(a, more))
			goto fail;
		more = NULL;
	}
	s = cJSON_PrintUnformatted(a);
	cJSON_Delete(more);
	cJSON_Delete(a);
	return s;
fail:
	cJSON_Delete(more);
	cJSON_Delete(a);
	return NULL;
}

/* Each value of a record [rank, libddp, in, entered, completed, op, wait]
 * within what its field holds, or the record is skipped: converting a
 * double out of range (1e300 to an int) is undefined. Counters are exact in a
 * double up to 2^53; the largest rank leaves room for a range's next one
 * (hang_rank_list adds 1). */
#define WHERE_EXACT 9007199254740992.0
static const double where_range[7][2] = {
	{-1, INT_MAX - 1}, {-DBL_MAX, DBL_MAX}, {-DBL_MAX, DBL_MAX}, {0, WHERE_EXACT},
	{0, WHERE_EXACT},  {0, UINT32_MAX},	{0, UINT32_MAX},
};

/* Append rec to *w (grown); 0, or -1 out of memory. */
static int append(struct hang_where **w, size_t *n, const struct hang_where *rec)
{
	struct hang_where *p = realloc(*w, (*n + 1) * sizeof(**w));

	if (p == NULL)
		return -1;
	*w = p;
	p[(*n)++] = *rec;
	return 0;
}

struct rank_at {
	int rank;
	size_t at;
};

static int by_rank_then_at(const void *x, const void *y)
{
	const struct rank_at *a = x, *b = y;

	if (a->rank != b->rank)
		return a->rank < b->rank ? -1 : 1;
	return a->at < b->at ? -1 : a->at > b->at;
}

/* What a list of ranks marks in the records it names. */
enum mark { MARK_STOPPED, MARK_INIT, MARK_TORCH };

/* Mark every record of w (idx: theirs, n, sorted by rank) that list names:
 * each entry is looked up, so a value costs its lists' lengths times the
 * log of its records (it cost their product). */
static void mark_list(const cJSON *list, struct hang_where *w, const struct rank_at *idx, size_t n,
		      enum mark what, uint8_t place)
{
	const cJSON *r;

	cJSON_ArrayForEach(r, list)
	{
		size_t lo = 0, hi = n;

		/* A rank as a record's (where_range): other numbers name none. */
		if (!cJSON_IsNumber(r) || r->valuedouble < -1 || r->valuedouble > INT_MAX - 1 ||
		    r->valuedouble != (double)(int)r->valuedouble)
			continue;
		while (lo < hi) { /* the first of that rank */
			size_t mid = lo + (hi - lo) / 2;

			if (idx[mid].rank < (int)r->valuedouble)
				lo = mid + 1;
			else
				hi = mid;
		}
		for (; lo < n && idx[lo].rank == (int)r->valuedouble; lo++) {
			struct hang_where *x = &w[idx[lo].at];

			if (what == MARK_STOPPED)
				x->stopped = true;
			else if (what == MARK_INIT && !x->in)
				x->libddp = x->init = true;
			else if (what == MARK_TORCH && !x->libddp)
				x->torch = place;
		}
	}
}

/* The object after one value's records, w[from..*n):
 * {"stopped": [rank, ...], "init": [...], "exited": [...], "torch_own":
 * [...], ...}. Marks the records of stopped ranks, of ranks in ddp_init (no
 * collective: sent as without libddp) and of PyTorch's ranks with their
 * place, and appends one for each rank that exited and has none; how many
 * it appended. */
static int apply_lists(const cJSON *o, struct hang_where **w, size_t from, size_t *n)
{
	const cJSON *r;
	const cJSON *stopped = cJSON_GetObjectItemCaseSensitive(o, "stopped");
	const cJSON *init = cJSON_GetObjectItemCaseSensitive(o, "init");
	const cJSON *exited = cJSON_GetObjectItemCaseSensitive(o, "exited");
	const cJSON *torch[TORCH_LISTS] = {NULL};
	size_t last = *n, i, k;
	struct rank_at *idx = last > from ? malloc((last - from) * sizeof(*idx)) : NULL;
	int added = 0;

	/* Not a list, or longer than a node's ranks: none (cJSON_ArrayForEach
	 * walks NULL as empty); each entry is matched against the records, so
	 * the bound keeps a value's cost bounded too. */
	stopped = cJSON_IsArray(stopped) && cJSON_GetArraySize(stopped) <= CLI_MAX_NPROC ? stopped
											 : NULL;
	init = cJSON_IsArray(init) && cJSON_GetArraySize(init) <= CLI_MAX_NPROC ? init : NULL;
	exited = cJSON_IsArray(exited) && cJSON_GetArraySize(exited) <= CLI_MAX_NPROC ? exited
										      : NULL;
	for (k = 1; k < TORCH_LISTS; k++) {
		torch[k] = cJSON_GetObjectItemCaseSensitive(o, torch_lists[k]);
		if (!cJSON_IsArray(torch[k]) || cJSON_GetArraySize(torch[k]) > CLI_MAX_NPROC)
			torch[k] = NULL;
	}

	/* (Out of memory: the records as they came, unmarked.) */
	if (idx != NULL) {
		for (i = from; i < last; i++)
			idx[i - from] = (struct rank_at){(*w)[i].rank, i};
		qsort(idx, last - from, sizeof(*idx), by_rank_then_at);
		mark_list(stopped, *w, idx, last - from, MARK_STOPPED, 0);
		mark_list(init, *w, idx, last - from, MARK_INIT, 0);
		for (k = 1; k < TORCH_LISTS; k++)
			mark_list(torch[k], *w, idx, last - from, MARK_TORCH, (uint8_t)k);
		free(idx);
	}
	cJSON_ArrayForEach(r, exited)
	{
		struct hang_where rec = {.exited = true};

		/* A rank as a record's (where_range), and not one of them. */
		if (!cJSON_IsNumber(r) || r->valuedouble < 0 || r->valuedouble > INT_MAX - 1 ||
		    r->valuedouble != (double)(int)r->valuedouble)
			continue;
		rec.rank = (int)r->valuedouble;
		if (*n - from >= CLI_MAX_NPROC)
			break; /* a node has no more ranks */
		for (i = from; i < *n && (*w)[i].rank != rec.rank; i++)
			;
		if (i < *n || append(w, n, &rec) < 0)
			continue;
		added++;
	}
	return added;
}

int hang_where_decode(const void *val, size_t len, struct hang_where **w, size_t *n)
{
	cJSON *a = cJSON_ParseWithLength(val, len);
	const cJSON *r;
	size_t from = *n;
	int added = 0;

	if (!cJSON_IsArray(a)) {
		cJSON_Delete(a);
		return -1;
	}
	cJSON_ArrayForEach(r, a)
	{
		double v[7] = {0};
		int i = 0;
		const cJSON *x;

		if (!cJSON_IsArray(r) || cJSON_GetArraySize(r) < 6 || cJSON_GetArraySize(r) > 7)
			continue;
		if (*n - from >= CLI_MAX_NPROC)
			break; /* a node has no more ranks */
		cJSON_ArrayForEach(x, r) v[i++] = cJSON_IsNumber(x) ? x->valuedouble : 0;
		for (i = 0; i < 7 && v[i] >= where_range[i][0] && v[i] <= where_range[i][1]; i++)
			;
		if (i < 7)
			continue;
		struct hang_where rec = {.rank = (int)v[0],
					 .libddp = v[1] != 0,
					 .in = v[2] != 0,
					 .entered = (uint64_t)v[3],
					 .completed = (uint64_t)v[4],
					 .op = (uint32_t)v[5],
					 .wait = (uint32_t)v[6]};
		if (append(w, n, &rec) < 0)
			break;
		added++;
	}
	/* The one object (hang_where_encode writes no more): each costs its
	 * lists times the records, so more would cost without bound. */
	cJSON_ArrayForEach(r, a)
	{
		if (cJSON_IsObject(r)) {
			added += apply_lists(r, w, from, n);
			break;
		}
	}
	cJSON_Delete(a);
	return added;
}

size_t hang_where_unique(struct hang_where *w, size_t n)
{
	struct rank_at *r = n > 1 ? malloc(n * sizeof(*r)) : NULL;
	bool *drop = n > 1 ? calloc(n, sizeof(*drop)) : NULL;
	size_t i, kept = 0;

	if (r == NULL || drop == NULL) { /* n < 2, or no memory: as they are */
		free(r);
		free(drop);
		return n;
	}
	for (i = 0; i < n; i++)
		r[i] = (struct rank_at){w[i].rank, i};
	qsort(r, n, sizeof(*r), by_rank_then_at);
	for (i = 1; i < n; i++)
		drop[r[i].at] = r[i].rank == r[i - 1].rank;
	for (i = 0; i < n; i++)
		if (!drop[i])
			w[kept++] = w[i];
	free(r);
	free(drop);
	return kept;
}

/* ---- the requester's verdict and end ----------------------------------------- */

/* The round's end, final: node (on host) found the job hung; culprit: the
 * rank the others waited for (-1: none named). */
static void end_round(struct coord_hang *h, int round, int node, const char *host, int culprit)
{
	struct coord *c = h->c;
	struct rdzv_end e = {.kind = RDZV_END_FAIL, .rank = -1, .local_rank = -1};
	char key[64], *v;

	if (c->phase != CP_RUN || c->round != round || c->A == NULL)
		return;
	e.node = node;
	snprintf(e.host, sizeof(e.host), "%s", host);
	e.pid = (int)getpid();
	e.status = HANG_EXIT;
	e.final = true;
	e.time_us = h->fired_us;
	if (culprit >= 0)
		snprintf(e.culprit, sizeof(e.culprit), "%d", culprit);
	v = rdzv_end_encode(&e);
	if (v != NULL)
		store_async_compare_set(c->A, coord_key(c, key, sizeof(key), "end"), "", 0, v,
					strlen(v), NULL, NULL);
	free(v);
}

/* Records for node's ranks, whose positions did not come: where they are
 * is not known (the verdict draws no conclusion that needs them). */
static void append_unknown(const struct coord *c, int node, struct hang_where **w, size_t *n)
{
	int first = 0, i;

	if (c->nodes == NULL || node < 0 || node >= c->nnodes)
		return;
	for (i = 0; i < node; i++)
		first += c->nodes[i].nproc;
	for (i = 0; i < c->nodes[node].nproc; i++) {
		struct hang_where rec = {.rank = first + i, .unknown = true};

		if (append(w, n, &rec) != 0)
			return;
	}
}

static void on_positions(int status, size_t n, const void *const *vals, const size_t *lens,
			 void *arg)
{
	struct op *o = arg;
	struct coord_hang *h = o->h;
	struct coord *c = h->c;
	struct hang_where *w = NULL;
	size_t nw = 0, i, nmiss = 0;
	char *verdict = NULL, missing[512] = "", end[RDZV_WHY_MAX + RDZV_HOST_MAX + 64];
	int culprits, round, first_miss = -1, culprit = -1;
	int *miss = status == 0 && n > 0 ? malloc(n * sizeof(int)) : NULL;

	for (i = 0; status == 0 && i < n; i++)
		if (lens[i] == 0 || hang_where_decode(vals[i], lens[i], &w, &nw) < 0) {
			if (miss != NULL)
				miss[nmiss] = (int)i;
			if (nmiss++ == 0)
				first_miss = (int)i;
			append_unknown(c, (int)i, &w, &nw);
		}
	if (miss != NULL)
		hang_rank_list(miss, nmiss, missing, sizeof(missing));
	else if (nmiss > 0)
		snprintf(missing, sizeof(missing), "%zu of them", nmiss);
	free(miss);
	/* No positions read, no verdict: it would say that no rank uses libddp. */
	if (status == 0) {
		nw = hang_where_unique(w, nw);
		verdict = hang_verdict(w, nw, "  ", &culprits);
		/* The report's root cause (coord_report.c): the first rank
		 * the others waited for, as one node's dump marks it. */
		for (i = 0; i < nw; i++)
			if (hang_torch_culprit(w, nw, i) && (culprit < 0 || w[i].rank < culprit))
				culprit = w[i].rank;
	}
	hang_rule();
	if (o->fail && c->end_known) {
		/* Another end came first (a node lost while the positions were
		 * gathered): it is the job's, and its status the exit status. */
		coord_describe_end(c, &c->end, end, sizeof(end));
		agent_say("the job hung: %s; the job was ending already: %s", h->why, end);
	} else if (o->fail)
		agent_say("the job hung: %s; stopping every node (exit status %d)", h->why,
			  HANG_EXIT);
	else if (c->end_known) {
		coord_describe_end(c, &c->end, end, sizeof(end));
		agent_say("where the ranks of every node are (the job is ending: %s):", end);
	} else
		agent_say("where the ranks of every node are (the job goes on):");
	if (status != 0)
		agent_say("  the nodes' positions could not be read: %s", strerror(-status));
	else if (verdict != NULL)
		output_console_write(2, verdict, strlen(verdict));
	free(verdict);
	/* The one the round's end names lost (if alone) is said to be. */
	if (status == 0 && nmiss == 1 && c->end_known && c->end.kind == RDZV_END_LOST &&
	    first_miss == c->end.node)
		agent_say("  node %d was lost before it sent its positions", first_miss);
	else if (status == 0 && nmiss > 0)
		agent_say("  node%s %s sent no positions in time", nmiss == 1 ? "" : "s", missing);
	hang_rule();
	free(w);
	if (o->fail)
		end_round(h, o->round, h->c->rank, h->c->host, culprit);
	round = o->round;
	if (h->mine == o->k && round == h->c->round)
		h->mine = 0;
	free(o);
	h->gathering = false;
	ask_queued(h, round);
	if (run_then(h))
		return;
	park(h);
}

void coord_hang_node_gone(struct coord *c, int node)
{
	struct coord_hang *h = c->hang;
	char key[64];

	/* Its key, empty, ends the gathering's wait: read as no positions. */
	if (h != NULL && h->gathering && h->mine > 0 && node >= 0 && node < c->nnodes &&
	    node != c->rank && c->A != NULL && c->a_up)
		store_async_compare_set(
			c->A, coord_key(c, key, sizeof(key), "hang/where/%d/%d", h->mine, node), "",
			0, "", 0, NULL, NULL);
}

/* What waited for the gathering, now: true if something did. Not if the
 * coordinator went on meanwhile (hurried out, a restart): where it is now
 * another step follows. */
static bool run_then(struct coord_hang *h)
{
	struct coord *c = h->c;
	void (*then)(struct coord *) = h->then;

	if (then == NULL)
		return false;
	h->then = NULL;
	uv_timer_stop(&h->then_timer);
	if ((int)c->phase == h->then_phase && c->round == h->then_round)
		then(c);
	return true;
}

/* The gathering's own wait is bounded by the store's answer to its cancel:
 * a store that stopped answering (its host stopped, its connection up)
 * must not hold the report or the leave. */
static void on_then_late(uv_timer_t *t)
{
	struct coord_hang *h = t->data;

	agent_say("the hang's verdict did not come in %d s: going on without it",
		  HANG_DEFER_MS / 1000);
	h->gathering = false; /* nothing waits for it any more */
	run_then(h);
}

bool coord_hang_defer(struct coord *c, void (*then)(struct coord *c))
{
	struct coord_hang *h = c->hang;

	if (h == NULL || !h->gathering || !h->timers_init)
		return false;
	if (h->then == NULL)
		uv_timer_start(&h->then_timer, on_then_late, HANG_DEFER_MS, 0);
	h->then = then; /* a leave asked for meanwhile goes instead of the report */
	h->then_phase = (int)c->phase;
	h->then_round = c->round;
	return true;
}

static void on_end_late(uv_timer_t *t)
{
	struct coord_hang *h = t->data;
	struct coord *c = h->c;

	if (c->round == h->late_round && c->phase == CP_RUN && !c->end_known) {
		agent_say("the node that found the job hung has not ended it in %d s: ending it",
			  HANG_END_WAIT_MS / 1000);
		/* final, as its would be (no restart), and naming it: the
		 * one that found the hang is the requester, not this node */
		end_round(h, h->late_round, h->fail_node, h->fail_host, -1);
	}
}

/* Wait for the requester's end from its request on (on_request): also
 * while this node's workers still run, C ranks the dump did not end,
 * which nothing else would stop if the requester never ended the round. */
static void await_end(struct coord_hang *h, int round)
{
	if (!h->timers_init)
		return;
	h->late_round = round;
	uv_timer_start(&h->end_timer, on_end_late, HANG_END_WAIT_MS, 0);
}

bool coord_hang_await_end(struct coord *c)
{
	struct coord_hang *h = c->hang;

	/* Its own failure would end the round first, not final (a restart
	 * left would start the hung job again) and without the verdict; the
	 * wait for the requester's end runs since the request came. */
	return h != NULL && h->fail_round == c->round && h->late_round == c->round;
}

/* r<round>/<what>[<k>/]<R> for every node R (one malloc'd block). */
static const char **node_keys(struct coord_hang *h, int round, const char *what, int k)
{
	struct coord *c = h->c;
	const char **keys = malloc((size_t)c->nnodes * (sizeof(char *) + COORD_KEY_MAX));
	char *s;
	int i;

	if (keys == NULL)
		return NULL;
	s = (char *)(keys + c->nnodes);
	for (i = 0; i < c->nnodes; i++, s += COORD_KEY_MAX) {
		if (k >= 0)
			snprintf(s, COORD_KEY_MAX, "r%d/%s%d/%d", round, what, k, i);
		else
			snprintf(s, COORD_KEY_MAX, "r%d/%s%d", round, what, i);
		keys[i] = s;
	}
	return keys;
}

static void on_collected(int status, void *arg)
{
	struct op *o = arg;
	struct coord_hang *h = o->h;
	const char **keys = node_keys(h, o->round, "hang/where/", o->k);

	/* Timed out: read what came. */
	int rc = keys == NULL ? -ENOMEM
		 : h->H == NULL
			 ? -ENOTCONN
			 : store_async_multi_get(h->H, keys, (size_t)h->c->nnodes, on_positions, o);
	if (rc != 0)
		on_positions(rc, 0, NULL, NULL, o);
	free(keys);
}

static void collect(struct op *o)
{
	struct coord_hang *h = o->h;
	const char **keys = node_keys(h, o->round, "hang/where/", o->k);
	int rc;

	h->gathering = true;
	rc = keys == NULL   ? -ENOMEM
	     : h->H == NULL ? -ENOTCONN
			    : store_async_wait(h->H, keys, (size_t)h->c->nnodes, HANG_COLLECT_MS,
					       on_collected, o);
	if (rc != 0)
		on_positions(rc, 0, NULL, NULL, o);
	/* One found lost while this node dumped its own ranks (the stack
	 * tool, the hold for the aborted ranks) is not waited for either. */
	else if (h->c->end_known && h->c->end.kind == RDZV_END_LOST)
		coord_hang_node_gone(h->c, h->c->end.node);
	free(keys);
}

/* ---- every node: a request arrives ----------------------------------------------- */

static void on_local_done(void *arg, const struct hang_where *w, size_t n)
{
	struct op *o = arg;
	struct coord_hang *h = o->h;
	struct coord *c = h->c;
	char key[64], *v = hang_where_encode(w, n);

	if (v != NULL && c->A != NULL && c->round == o->round) {
		snprintf(key, sizeof(key), "r%d/hang/where/%d/%d", o->round, o->k, c->rank);
		store_async_set(c->A, key, v, strlen(v), NULL, NULL);
	}
	free(v);
	if (h->mine == o->k && c->round == o->round) {
		collect(o); /* the requester: H is free, the others' positions next */
		return;
	}
	free(o);
	park(h);
}

static void on_request(int status, const void *val, size_t len, void *arg)
{
	struct op *o = arg;
	struct coord_hang *h = o->h;
	struct coord *c = h->c;
	cJSON *j = status == 0 ? cJSON_ParseWithLength(val, len) : NULL;
	const cJSON *node = cJSON_GetObjectItemCaseSensitive(j, "node");
	const cJSON *fail = cJSON_GetObjectItemCaseSensitive(j, "fail");
	const cJSON *why = cJSON_GetObjectItemCaseSensitive(j, "why");
	const cJSON *host = cJSON_GetObjectItemCaseSensitive(j, "host");
	char text[400], from_host[RDZV_HOST_MAX];

	if (status == 0 && c->round == o->round && c->phase == CP_RUN && !cJSON_IsNumber(node)) {
		/* Not a request (a store client wrote something else): skipped,
		 * or every later request would wait behind it. So is "over"
		 * while this node still runs the round (a node already in the
		 * next one ended its waits, or a store client wrote it): parked
		 * on it again, the wait would answer at once, for ever. */
		if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "over")))
			agent_say("warning: hang request %d is not one (%s): skipped", o->k,
				  j ? "no \"node\"" : "not JSON");
		cJSON_Delete(j);
		h->next = o->k + 1;
		free(o);
		park(h);
		return;
	}
	if (status != 0 || c->round != o->round || c->phase != CP_RUN || !cJSON_IsNumber(node)) {
		cJSON_Delete(j); /* the round is over, or {"over": true} */
		free(o);
		if (status == 0)
			park(h);
		return;
	}
	h->next = o->k + 1;
	o->from = node->valueint;
	/* Only a node ends the job (it is the one that ends the round). */
	o->fail = cJSON_IsTrue(fail) && o->from >= 0;
	if (o->from >= 0)
		snprintf(text, sizeof(text), "%.300s (asked by node %d)",
			 cJSON_IsString(why) ? why->valuestring : "?", o->from);
	else /* ddpstore, or any store client (ddprun(1), HUNG JOBS) */
		snprintf(text, sizeof(text), "%.300s (asked through the store)",
			 cJSON_IsString(why) ? why->valuestring : "on demand");
	snprintf(from_host, sizeof(from_host), "%s",
		 cJSON_IsString(host) ? host->valuestring : "?");
	cJSON_Delete(j);
	if (o->fail && h->fail_round == o->round && h->mine == o->k) {
		/* This node's own hang request came after another node's: that
		 * one's verdict is the job's (this one would race the round's
		 * end for the positions, and say less). */
		h->mine = 0;
		free(o);
		park(h);
		return;
	}
	if (o->fail && h->fail_round == o->round) {
		/* Two nodes found the hang at once: one dump is enough. */
		struct hang_where *w = calloc((size_t)c->job->nproc, sizeof(*w));

		if (w != NULL)
			hang_where_local(c->agent, w);
		on_local_done(o, w, w != NULL ? (size_t)c->job->nproc : 0);
		free(w);
		return;
	}
	if (o->fail) {
		h->fail_round = o->round;
		if (h->mine != o->k) /* the requester's own: when it fired */
			h->fired_us = report_now_us();
		h->fail_node = o->from;
		snprintf(h->fail_host, sizeof(h->fail_host), "%s", from_host);
		await_end(h, o->round);
	}
	hang_remote_dump(c->agent, o->fail, text, on_local_done, o);
}

/* Parked on request o->k for HANG_HOLE_MS: count is how many were numbered. */
static void on_hole_count(int status, int64_t count, void *arg)
{
	struct op *o = arg;
	struct coord_hang *h = o->h;

	if (status == 0 && o->round == h->c->round && count > o->k && h->next == o->k) {
		if (h->hole == o->k) {
			agent_say("warning: hang request %d was numbered but never written: "
				  "skipped",
				  o->k);
			h->next = o->k + 1;
		} else {
			h->hole = o->k; /* looked again after HANG_HOLE_MS */
		}
	}
	free(o);
	if (status == 0)
		park(h);
}

static void on_req_ready(int status, void *arg)
{
	struct op *o = arg;
	struct coord_hang *h = o->h;
	char key[64];

	if (o->round == h->parked_round)
		h->parked_round = -1;
	if (status == -ETIMEDOUT && h->H != NULL && o->round == h->c->round &&
	    h->c->phase == CP_RUN) {
		snprintf(key, sizeof(key), "r%d/hang/count", o->round);
		if (store_async_add(h->H, key, 0, on_hole_count, o) != 0)
			free(o);
		return;
	}
	if (status != 0 || h->H == NULL || o->round != h->c->round) {
		free(o);
		if (status == 0)
			park(h); /* a new round's wait */
		return;
	}
	snprintf(key, sizeof(key), "r%d/hang/req/%d", o->round, o->k);
	if (store_async_get(h->H, key, on_request, o) != 0)
		free(o);
}

/* Park H on the next request of the current round (once). */
static void park(struct coord_hang *h)
{
	struct coord *c = h->c;
	char key[64];
	const char *keys[1] = {key};
	struct op *o;

	if (h->H == NULL || c->phase != CP_RUN || h->parked_round == c->round)
		return;
	o = op_new(h, c->round, h->next);
	if (o == NULL)
		return;
	snprintf(key, sizeof(key), "r%d/hang/req/%d", c->round, h->next);
	if (store_async_wait(h->H, keys, 1, HANG_HOLE_MS, on_req_ready, o) != 0) {
		free(o);
		return;
	}
	h->parked_round = c->round;
}

/* ---- this node asks ------------------------------------------------------------ */

/* This node's request cannot be made, for why. hung (a hang was found, not
 * only a SIGUSR2): the job ends from here. store_down: the store is lost
 * (coord.c hears of it too): this node ends as for a lost store, with its
 * status (75 unless a worker failed on its own), as every other node did or
 * does: a node stopped for a while that finds the job hung once continued
 * ended with 124 where the others, which had taken it for lost, ended with
 * 75. Otherwise the store is well and only this
 * request is lost: this node's ranks are dumped (for a SIGUSR2 as on one
 * node), for a hang the verdict given and the other nodes told the job's
 * end as for any failure. */
static void ask_failed(struct coord_hang *h, bool hung, bool store_down, const char *why)
{
	struct coord *c = h->c;

	h->mine = 0;
	h->queued_fail = false;
	if (hung && store_down) {
		coord_fail(c, coord_local_status(c),
			   "lost the rendezvous store at %s:%d (asking the other nodes for their "
			   "stacks: %s): %s",
			   c->store_host, c->store_port, why, coord_fail_words(c));
		return;
	}
	agent_say("cannot ask the other nodes for their stacks: %s", why);
	if (hung)
		hang_ask_failed(c->agent);
	else if (!store_down) /* the store's loss ends the job now: no dump */
		hang_dump_on_demand(c->agent);
}

static void on_numbered(int status, int64_t k, void *arg)
{
	struct op *o = arg;
	struct coord_hang *h = o->h;
	struct coord *c = h->c;
	bool hung = h->mine_fail || h->queued_fail, stale = o->round != c->round;
	cJSON *j;
	char key[64], why[64], *v = NULL;
	int rc = -ENOMEM;

	free(o);
	/* Numbered in a round a restart ended (coord_hang_round cleared mine):
	 * written now, it would take the new round's number, and this node's
	 * next request would wait for a number already used. */
	if (stale)
		return;
	if (c->phase != CP_RUN && !hung) { /* a SIGUSR2's, the job ending meanwhile */
		h->mine = 0;
		return;
	}
	if (status != 0 || c->A == NULL) {
		ask_failed(h, hung, true, status != 0 ? strerror(-status) : "no connection");
		return;
	}
	if (k < 1 || k > INT_MAX) {
		/* A counter a store client set far off (or negative): no number
		 * a request key of this ddprun can have, nor that it waits for. */
		snprintf(why, sizeof(why), "the store's hang/count is %lld", (long long)k);
		ask_failed(h, hung, false, why);
		return;
	}
	h->mine = (int)k;
	j = cJSON_CreateObject();
	if (j != NULL && cJSON_AddNumberToObject(j, "node", c->rank) != NULL &&
	    cJSON_AddStringToObject(j, "host", c->host) != NULL &&
	    cJSON_AddBoolToObject(j, "fail", h->mine_fail) != NULL &&
	    cJSON_AddStringToObject(j, "why", h->why) != NULL)
		v = cJSON_PrintUnformatted(j);
	cJSON_Delete(j);
	/* Numbered but never written: the other nodes skip the hole; this
	 * node must not wait for its own request either. */
	if (v != NULL)
		rc = store_async_set(c->A, coord_key(c, key, sizeof(key), "hang/req/%d", (int)k), v,
				     strlen(v), NULL, NULL);
	free(v);
	if (rc != 0)
		ask_failed(h, hung, false, strerror(-rc));
}

/* Test hook (tests/e2e/test_launch_hang.py): DDPRUN_TEST_HANG_ASK_DELAY_MS
 * holds a hang's request back that long before it is numbered, so that a
 * test can have another node's request dumped here first (the store's
 * answers come too fast to order them from outside). 0: none. */
static uint64_t test_ask_delay_ms(void)
{
	const char *v = getenv("DDPRUN_TEST_HANG_ASK_DELAY_MS");

	return v != NULL ? strtoull(v, NULL, 10) : 0;
}

static void on_ask_delayed(uv_timer_t *t)
{
	struct coord_hang *h = t->data;
	struct coord *c = h->c;
	struct op *o = h->delayed;
	char key[64];

	h->delayed = NULL;
	if (c->A == NULL || store_async_add(c->A, coord_key(c, key, sizeof(key), "hang/count"), 1,
					    on_numbered, o) != 0) {
		free(o);
		ask_failed(h, true, true, "no connection");
	}
}

static int request(void *arg, bool fail, const char *why)
{
	struct coord_hang *h = arg;
	struct coord *c = h->c;
	struct op *o;
	char key[64];

	if (h->H == NULL || !h->up || c->A == NULL || !c->a_up || c->phase != CP_RUN)
		return -ENOTCONN;
	if (h->fail_round == c->round)
		return fail ? 0 : -EALREADY; /* the hang was dumped already */
	if (h->mine != 0 && !fail)
		return -EBUSY;
	if (h->mine != 0) {
		/* One in flight: a hang found meanwhile is asked for after an
		 * on-demand one (SIGUSR2), or it would be lost: the monitor
		 * takes this as asked, and asks no more. */
		if (!h->mine_fail && !h->queued_fail) {
			h->queued_fail = true;
			snprintf(h->queued_why, sizeof(h->queued_why), "%s", why);
			agent_say("%s: asking every node for its ranks' stacks once the dump "
				  "under way is over",
				  why);
		}
		return 0;
	}
	if ((o = op_new(h, c->round, 0)) == NULL)
		return -ENOMEM;
	h->mine = -1;
	h->mine_fail = fail;
	h->fired_us = report_now_us();
	snprintf(h->why, sizeof(h->why), "%s", why);
	if (fail)
		agent_say("%s: asking every node for its ranks' stacks", why);
	if (fail && h->timers_init && test_ask_delay_ms() > 0) {
		h->delayed = o;
		uv_timer_start(&h->ask_timer, on_ask_delayed, test_ask_delay_ms(), 0);
		return 0;
	}
	if (store_async_add(c->A, coord_key(c, key, sizeof(key), "hang/count"), 1, on_numbered,
			    o) != 0) {
		free(o);
		h->mine = 0;
		return -ENOMEM;
	}
	return 0;
}

/* The hang found while this node's request of round was in flight, now. */
static void ask_queued(struct coord_hang *h, int round)
{
	struct coord *c = h->c;
	int rc;

	if (!h->queued_fail)
		return;
	h->queued_fail = false;
	if (round != c->round || c->phase != CP_RUN)
		return;
	if ((rc = request(h, true, h->queued_why)) != 0)
		ask_failed(h, true, false, strerror(-rc));
}

/* ---- progress across nodes ---------------------------------------------------- */

static void on_progress_read(int status, size_t n, const void *const *vals, const size_t *lens,
			     void *arg)
{
	struct op *o = arg;
	struct coord_hang *h = o->h;
	struct coord *c = h->c;
	size_t i;

	h->reading = false;
	if (status != 0 || o->round != c->round || h->seen == NULL || n != (size_t)c->nnodes) {
		free(o);
		return;
	}
	for (i = 0; i < n; i++) {
		char num[24];
		int64_t v = -1;

		if (lens[i] > 0 && lens[i] < sizeof(num)) {
			memcpy(num, vals[i], lens[i]);
			num[lens[i]] = '\0';
			v = strtoll(num, NULL, 10);
		}
		if ((int)i != c->rank && v >= 0 && h->seen[i] >= 0 && v != h->seen[i])
			h->other_ms = uv_now(c->loop);
		h->seen[i] = v;
	}
	free(o);
}

static uint64_t tick(void *arg, bool local_progress)
{
	struct coord_hang *h = arg;
	struct coord *c = h->c;
	uint64_t now = uv_now(c->loop);
	char key[64];

	if (c->A == NULL || !c->a_up || c->phase != CP_RUN)
		return h->other_ms;
	if (local_progress) {
		/* Once per sample with progress: the samples come at most once a
		 * second, and at least 4 times per timeout, so a stalled node
		 * sees the counter move well within its timeout. */
		h->last_pub_ms = now;
		store_async_add(c->A, coord_key(c, key, sizeof(key), "hang/prog/%d", c->rank), 1,
				NULL, NULL);
	} else if (!h->reading && c->nnodes > 1) {
		const char **keys = node_keys(h, c->round, "hang/prog/", -1);
		struct op *o = op_new(h, c->round, 0);

		if (h->seen == NULL) {
			size_t i;

			h->seen = malloc((size_t)c->nnodes * sizeof(*h->seen));
			for (i = 0; h->seen != NULL && i < (size_t)c->nnodes; i++)
				h->seen[i] = -1;
		}
		if (keys != NULL && o != NULL && h->seen != NULL &&
		    store_async_multi_get(c->A, keys, (size_t)c->nnodes, on_progress_read, o) ==
			    0) {
			h->reading = true;
			o = NULL;
		}
		free(o);
		free(keys);
	}
	return h->other_ms;
}

/* ---- life ------------------------------------------------------------------------ */

static void on_connect(struct store_async *a, int status, void *arg)
{
	struct coord_hang *h = arg;

	if (status != 0)
		return; /* hang dumps stay local; the job runs on */
	h->up = true;
	park(h);
}

static void on_lost(struct store_async *a, int reason, void *arg)
{
	struct coord_hang *h = arg;

	h->up = false; /* coord.c's connections say what the loss means */
	h->parked_round = -1;
}

void coord_hang_round(struct coord *c)
{
	struct coord_hang *h = c->hang;
	struct hang_remote r;

	if (h == NULL) {
		struct store_async_callbacks cbs;

		h = calloc(1, sizeof(*h));
		if (h == NULL)
			return;
		h->c = c;
		h->parked_round = -1;
		h->fail_round = -1;
		cbs = (struct store_async_callbacks){on_connect, on_lost, h};
		if (coord_conn_open(c, &cbs, &h->H) != 0) {
			free(h);
			return;
		}
		c->hang = h;
		uv_timer_init(c->loop, &h->then_timer);
		uv_timer_init(c->loop, &h->end_timer);
		uv_timer_init(c->loop, &h->ask_timer);
		h->then_timer.data = h->end_timer.data = h->ask_timer.data = h;
		h->timers_init = true;
	} else if (h->parked_round >= 0 && h->parked_round != c->round && c->A != NULL) {
		/* End the last round's parked waits (every node's), then park anew. */
		char key[64];
		const char *over = "{\"over\": true}";

		snprintf(key, sizeof(key), "r%d/hang/req/%d", h->parked_round, h->next);
		store_async_compare_set(c->A, key, "", 0, over, strlen(over), NULL, NULL);
		h->parked_round = -1;
	}
	h->round = c->round;
	h->next = 1;
	h->hole = 0;
	h->mine = 0;
	h->queued_fail = false;
	free(h->seen); /* a new round: other nodes' counters start anew */
	h->seen = NULL;
	h->other_ms = 0;
	h->last_pub_ms = 0;
	r.request = request;
	r.tick = tick;
	r.arg = h;
	hang_set_remote(c->agent, &r);
	if (h->up)
		park(h);
}

static void on_timer_closed(uv_handle_t *t)
{
	coord_closed_one(t->data);
}

static void close_timer(struct coord *c, uv_timer_t *t)
{
	if (uv_is_closing((uv_handle_t *)t))
		return;
	c->open++;
	t->data = c;
	uv_close((uv_handle_t *)t, on_timer_closed);
}

void coord_hang_close(struct coord *c)
{
	struct coord_hang *h = c->hang;
	struct hang_remote none = {0};

	if (h == NULL)
		return;
	if (c->agent != NULL)
		hang_set_remote(c->agent, &none);
	if (h->H != NULL) {
		c->open++;
		store_async_close(h->H, coord_closed_one, c);
		h->H = NULL;
	}
	if (h->timers_init) {
		h->then = NULL; /* the leave is under way */
		close_timer(c, &h->then_timer);
		close_timer(c, &h->end_timer);
		close_timer(c, &h->ask_timer);
	}
	free(h->delayed);
	h->delayed = NULL;
	h->up = false;
}

void coord_hang_destroy(struct coord *c)
{
	if (c->hang != NULL)
		free(c->hang->seen);
	free(c->hang);
	c->hang = NULL;
}
