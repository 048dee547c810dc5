/* coord_live: knowing that the others are alive, and the exit barrier.
 *
 * Every keep_alive_interval each agent sends one request with a reply
 * deadline (a PING); while its workers run, a SET of r<r>/hb/<rank> (its
 * heartbeat, rdzv_keys.h) goes before it, and between the attempts of a
 * static job (see watch_round) of the next round's; a dynamic node moving
 * to the next round beats on its moving/ key there (coord_rejoin.c). No reply for
 * heartbeat_timeout: the store is lost (its host died without closing the
 * connection). The agent that hosts the store reads every participant's
 * heartbeat several times an interval; one seen not to move for
 * heartbeat_timeout (at least two intervals: rdzv_conf.c) ends the round
 * as lost (a node that stopped without its connection closing: SIGSTOP, a
 * dead host, a cut cable). A node done with its work
 * writes "done" there and is exempt. */
#include "coord_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_async.h"
#include "util.h"

static void on_ping_reply(int status, void *arg)
{
	struct coord *c = arg;

	if (status == 0)
		c->hb_pending = false;
}

/* The round whose heartbeats the store's host watches now (-1: none): the
 * one running; between the attempts of a static job (workers stopping,
 * then the restart's rendezvous) the next one, which cannot close without
 * every node of the last (a dynamic round closes without the nodes that
 * do not come). Round 0's rendezvous is join_timeout's: nodes start when
 * they start. */
static int watch_round(const struct coord *c)
{
	int i;

	if (c->phase == CP_RUN)
		return c->end_known ? -1 : c->round;
	if (c->job->dynamic || c->nodes == NULL)
		return -1;
	/* A node of an older build (no protocol in its descriptor: the config
	 * check misses it where a newer node wrote the config, as an older one
	 * reads past fields it does not know) beats only while its workers
	 * run: it would be taken for lost. */
	for (i = 0; i < c->nnodes; i++)
		if (c->nodes[i].protocol[0] == '\0')
			return -1;
	if (c->phase == CP_MOVE)
		return c->next_round;
	if (c->phase == CP_JOIN && c->round > 0)
		return c->round;
	return -1;
}

/* The key this node's heartbeat goes to now (false: none): its own in the
 * round watched; a dynamic node moving to the next round (its workers
 * stopping, then counting in), that round's moving/<its rank in the last>
 * (coord_rejoin.c). */
static bool beat_key(const struct coord *c, char *key, size_t len)
{
	int r;

	if (c->job->dynamic && (c->phase == CP_MOVE || c->phase == CP_JOIN)) {
		if (c->rj.prev_rank < 0)
			return false;
		snprintf(key, len, RDZV_KEY_ROUND_FMT RDZV_R_MOVING,
			 c->phase == CP_MOVE ? c->next_round : c->round, c->rj.prev_rank);
		return true;
	}
	r = c->phase == CP_RUN && c->at_barrier ? -1 : watch_round(c);
	if (r < 0)
		return false;
	snprintf(key, len, RDZV_KEY_ROUND_FMT RDZV_R_HB, r, c->rank);
	return true;
}

/* Node i has been silent too long: the round watched ends, as lost (a
 * running round's end, or a restart's closed value: every node waiting in
 * it ends with 75). */
static void declare_lost(struct coord *c, int round, size_t i, int64_t silent_ms)
{
	char key[64], why[RDZV_WHY_MAX], val[RDZV_WHY_MAX + 32], *v;

	snprintf(why, sizeof(why), "no heartbeat from host %.200s for %.1f s", c->nodes[i].host,
		 (double)silent_ms / 1000.0);
	if (c->phase == CP_RUN) {
		snprintf(val, sizeof(val), "lost:%zu:%s", i, why);
		store_async_compare_set(c->A, coord_key(c, key, sizeof(key), RDZV_R_END), "", 0,
					val, strlen(val), NULL, NULL);
		return;
	}
	snprintf(key, sizeof(key), RDZV_KEY_ROUND_FMT RDZV_R_CLOSED, round);
	v = coord_lost_closed((int)i, round, why);
	if (v != NULL)
		store_async_compare_set(c->A, key, "", 0, v, strlen(v), NULL, NULL);
	free(v);
}

/* The store's host samples the heartbeats SAMPLES times per interval, so
 * that a beat is seen at most a quarter interval late. */
#define SAMPLES 4

int64_t coord_live_sample_ms(const struct coord *c)
{
	int64_t p = c->conf->keep_alive_interval_ms / SAMPLES;

	return p > 0 ? p : 1;
}

int coord_silence_start(struct coord_silence *s, size_t n)
{
	coord_silence_free(s);
	s->last = calloc(n, sizeof(*s->last));
	s->silent_ms = calloc(n, sizeof(*s->silent_ms));
	if (s->last == NULL || s->silent_ms == NULL) {
		coord_silence_free(s);
		return -ENOMEM;
	}
	s->n = n;
	s->at_ms = util_now_ms();
	return 0;
}

void coord_silence_free(struct coord_silence *s)
{
	free(s->last);
	free(s->silent_ms);
	s->last = NULL;
	s->silent_ms = NULL;
	s->n = 0;
}

/* A node's silence is what the samples saw, not the clock's time between
 * them: a stall would count whole for every node, a sample or two before
 * their beats are read. */
int64_t coord_silence_step(const struct coord *c, struct coord_silence *s)
{
	int64_t now = util_now_ms(), step = now - s->at_ms, cap = 2 * coord_live_sample_ms(c);

	s->at_ms = now;
	return step < cap ? step : cap;
}

int64_t coord_silence_seen(struct coord_silence *s, size_t i, const void *val, size_t len,
			   int64_t step)
{
	char v[sizeof(*s->last)];

	snprintf(v, sizeof(v), "%.*s", len < sizeof(v) ? (int)len : 0, (const char *)val);
	if (strcmp(v, s->last[i]) != 0) {
		strcpy(s->last[i], v);
		s->silent_ms[i] = 0;
	} else {
		s->silent_ms[i] += step;
	}
	return s->silent_ms[i];
}

static void on_watch(int status, size_t n, const void *const *vals, const size_t *lens, void *arg)
{
	struct coord *c = arg;
	int64_t step, silent;
	size_t i;

	c->mon_pending = false;
	if (status != 0 || watch_round(c) != c->mon_round || n != (size_t)c->nnodes ||
	    n != c->mon.n)
		return;
	step = coord_silence_step(c, &c->mon);
	for (i = 0; i < n; i++) {
		if ((int)i == c->rank || (lens[i] == 4 && memcmp(vals[i], "done", 4) == 0))
			continue;
		silent = coord_silence_seen(&c->mon, i, vals[i], lens[i], step);
		if (silent >= c->conf->heartbeat_timeout_ms) {
			declare_lost(c, c->mon_round, i, silent);
			return;
		}
	}
}

static void on_sample(uv_timer_t *t)
{
	struct coord *c = t->data;
	const char **keys;

	if (c->mon_pending || watch_round(c) < 0 || watch_round(c) != c->mon_round)
		return;
	keys = coord_keys_of(c, c->mon_round, NULL, (size_t)c->nnodes, RDZV_R_HB);
	if (keys == NULL)
		return;
	if (store_async_multi_get(c->A, keys, (size_t)c->nnodes, on_watch, c) == 0)
		c->mon_pending = true;
	free(keys);
}

static void tick(uv_timer_t *t)
{
	struct coord *c = t->data;
	int64_t now = util_now_ms();
	char key[64];
	int rc;

	if (c->hb_pending) {
		/* Our own store answers from this loop: only a remote one is lost. */
		if (c->server == NULL && now - c->hb_sent_ms > c->conf->heartbeat_timeout_ms) {
			coord_fail(c, coord_local_status(c),
				   "no reply from the rendezvous store at %s:%d for %.1f s: %s",
				   c->store_host, c->store_port,
				   (double)(now - c->hb_sent_ms) / 1000.0, coord_fail_words(c));
			return;
		}
		return;
	}
	if (beat_key(c, key, sizeof(key))) {
		/* A value that changes every beat, with the time for `ddpstore
		 * status` (the watches only compare). */
		char v[48];

		snprintf(v, sizeof(v), "%lld:%lld", (long long)++c->hb_seq,
			 (long long)(report_now_us() / 1000));
		store_async_set(c->A, key, v, strlen(v), NULL, NULL);
	}
	rc = store_async_ping(c->A, on_ping_reply, c);
	if (rc == 0) {
		c->hb_pending = true;
		c->hb_sent_ms = now;
	}
}

void coord_live_start(struct coord *c)
{
	int round = c->server != NULL ? watch_round(c) : -1;

	/* A round newly watched: every node's silence counts from now (the
	 * same round goes on from its move to its run). */
	if (round >= 0 && (round != c->mon_round || c->mon.last == NULL)) {
		coord_silence_start(&c->mon, (size_t)c->nnodes); /* out of memory: not watched */
		c->mon_round = round;
	}
	c->hb_pending = false;
	c->mon_pending = false;
	tick(&c->hb_timer); /* a first heartbeat at once */
	uv_timer_start(&c->hb_timer, tick, (uint64_t)c->conf->keep_alive_interval_ms,
		       (uint64_t)c->conf->keep_alive_interval_ms);
	if (round >= 0)
		uv_timer_start(&c->mon_timer, on_sample, (uint64_t)coord_live_sample_ms(c),
			       (uint64_t)coord_live_sample_ms(c));
}

void coord_live_stop(struct coord *c)
{
	if (c->timers_on) {
		uv_timer_stop(&c->hb_timer);
		uv_timer_stop(&c->mon_timer);
	}
}

/* ---- the exit barrier ------------------------------------------------------------ */

static void on_barrier_timeout(uv_timer_t *t)
{
	struct coord *c = t->data;

	if (c->phase != CP_RUN)
		return;
	agent_say("not every node finished within exit_barrier_timeout (%.0f s): leaving",
		  (double)c->conf->exit_barrier_timeout_ms / 1000.0);
	c->status = 0;
	coord_leave(c);
}

static void on_done(int status, int64_t n, void *arg)
{
	struct coord *c = arg;
	char key[64];

	if (status != 0 || c->phase != CP_RUN || n < c->nnodes)
		return;
	store_async_compare_set(c->A, coord_key(c, key, sizeof(key), RDZV_R_END), "", 0, "ok", 2,
				NULL, NULL);
}

void coord_barrier(struct coord *c)
{
	char key[64];

	c->at_barrier = true;
	store_async_set(c->A, coord_key(c, key, sizeof(key), RDZV_R_HB, c->rank), "done", 4, NULL,
			NULL);
	store_async_add(c->A, coord_key(c, key, sizeof(key), RDZV_R_DONE), 1, on_done, c);
	/* The store's host stays until every node is done, failed or lost (the
	 * watch ends the round for a node that vanished); others are bounded. */
	if (c->server == NULL)
		uv_timer_start(&c->timer, on_barrier_timeout,
			       (uint64_t)c->conf->exit_barrier_timeout_ms, 0);
}
