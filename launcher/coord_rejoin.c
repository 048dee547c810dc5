/* coord_rejoin: a dynamic job's next round waits for the nodes of the round
 * before.
 *
 * A round ends (a node waiting to join it, a failure, a node lost) and its
 * nodes stop their workers, up to --shutdown-timeout, before they count
 * into the next round. That round's last call runs from its MIN-th
 * arrival, often a node with no workers to stop (the one that waited to
 * join), so it closed before they came: they found it closed without them,
 * waited as late nodes, made it rejoin, and the two groups took turns for
 * ever. torchrun's rendezvous does not start a round until every
 * participant of the last has left it. Here the round, once its last call
 * is over, it is full or join_timeout passed (coord_join.c), waits for
 * each node R of the round before until r<r>/from/<R> says that
 * it came ("in:") or went ("gone:", its connection's ON_CLOSE_SET while it
 * moved: a create-if-absent, hence not the key it beats on), or until its
 * beats on moving/<R> have not moved for heartbeat_timeout (or never came:
 * a node lost with the last round, an older build), or at
 * most --shutdown-timeout plus COORD_LEAVE_MS (workers that will not
 * stop). The node the round's end names lost is not waited for. The
 * nodes that came take part first (close_live), so that a full round does
 * not leave out one that ran the job for nodes that came meanwhile. */
#include "coord_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store_async.h"
#include "util.h"

#define FROM_IN	  "in:"
#define FROM_GONE "gone:"

/* val (len bytes) begins with text. */
static bool begins(const void *val, size_t len, const char *text)
{
	return len >= strlen(text) && memcmp(val, text, strlen(text)) == 0;
}

void coord_rejoin_move(struct coord *c)
{
	char key[64], why[RDZV_HOST_MAX + 64];

	c->rj.prev_rank = c->rank;
	/* Replaces the registration of the round's end, which has its value. */
	snprintf(key, sizeof(key), RDZV_KEY_ROUND_FMT RDZV_R_FROM, c->next_round, c->rank);
	snprintf(why, sizeof(why), FROM_GONE "host %.200s pid %d", c->host, (int)getpid());
	store_async_on_close_set(c->A, key, why, strlen(why), NULL, NULL);
	coord_live_start(c); /* the beats (coord_live.c) */
}

void coord_rejoin_arrived(struct coord *c)
{
	char key[64], v[32];

	if (c->rj.prev_rank < 0)
		return;
	snprintf(v, sizeof(v), FROM_IN "%d", c->k);
	store_async_set(c->A, coord_key(c, key, sizeof(key), RDZV_R_FROM, c->rj.prev_rank), v,
			strlen(v), NULL, NULL);
	c->rj.prev_rank = -1;
}

int coord_rejoin_came(const void *val, size_t len)
{
	char v[24];
	int k;

	if (len <= strlen(FROM_IN) || len >= sizeof(v) || !begins(val, len, FROM_IN))
		return 0;
	memcpy(v, val, len);
	v[len] = '\0';
	return util_parse_int(v + strlen(FROM_IN), 1, 1 << 30, &k) == 0 ? k : 0;
}

void coord_rejoin_reset(struct coord *c)
{
	if (c->timers_on)
		uv_timer_stop(&c->rj_timer);
	coord_silence_free(&c->rj.quiet);
	c->rj.busy = false;
	c->rj.n = -1;
	c->rj.lost = -1;
	c->rj.waiting = 0;
}

static bool current(const struct coord *c)
{
	return c->phase == CP_JOIN && c->rj.busy && c->rj.round == c->round;
}

static void finish(struct coord *c)
{
	c->rj.busy = false;
	c->rj.waiting = 0;
	coord_join_close(c);
}

static void poll_from(struct coord *c);

static void on_poll_timer(uv_timer_t *t)
{
	struct coord *c = t->data;

	if (current(c))
		poll_from(c);
}

/* Who of the round before is still to come: vals holds from/0..n-1, then
 * moving/0..n-1. One that came or went is not waited for, nor one whose
 * beats said nothing new for heartbeat_timeout; one that beats is. */
static void on_from(int status, size_t n, const void *const *vals, const size_t *lens, void *arg)
{
	struct coord *c = arg;
	struct coord_rejoin *j = &c->rj;
	size_t i, k = (size_t)j->n;
	int waiting = 0;
	int64_t step;

	if (!current(c))
		return;
	if (status != 0 || n != 2 * k || k != j->quiet.n) {
		finish(c);
		return;
	}
	step = coord_silence_step(c, &j->quiet);
	for (i = 0; i < k; i++) {
		if ((int)i == j->lost || begins(vals[i], lens[i], FROM_IN) ||
		    begins(vals[i], lens[i], FROM_GONE))
			continue;
		if (coord_silence_seen(&j->quiet, i, vals[k + i], lens[k + i], step) <
		    c->conf->heartbeat_timeout_ms)
			waiting++;
	}
	j->waiting = waiting;
	if (waiting == 0 || j->quiet.at_ms >= j->until_ms) {
		if (waiting > 0)
			agent_say("round %d closes without %d node%s of round %d whose workers did "
				  "not stop within --shutdown-timeout (%.0f s)",
				  c->round, waiting, waiting > 1 ? "s" : "", c->round - 1,
				  (double)c->job->shutdown_timeout_ms / 1000.0);
		finish(c);
		return;
	}
	uv_timer_start(&c->rj_timer, on_poll_timer, (uint64_t)coord_live_sample_ms(c), 0);
}

static void poll_from(struct coord *c)
{
	size_t n = (size_t)c->rj.n, i;
	const char **from = coord_keys(c, NULL, n, RDZV_R_FROM);
	const char **moving = coord_keys(c, NULL, n, RDZV_R_MOVING);
	const char **keys = malloc(2 * n * sizeof(*keys));

	if (from != NULL && moving != NULL && keys != NULL) {
		for (i = 0; i < n; i++) {
			keys[i] = from[i];
			keys[n + i] = moving[i];
		}
		if (store_async_multi_get(c->A, keys, 2 * n, on_from, c) != 0)
			finish(c); /* out of memory: close as before */
	} else {
		finish(c);
	}
	free(keys);
	free(from);
	free(moving);
}

/* The round before: its nodes (closed) and the one lost (end). */
static void on_prev(int status, size_t n, const void *const *vals, const size_t *lens, void *arg)
{
	struct coord *c = arg;
	struct coord_rejoin *j = &c->rj;
	struct rdzv_end e;
	char msg[8];
	int k = 0, st = 0;

	if (!current(c))
		return;
	if (status != 0 || n != 2 || lens[0] == 0 ||
	    rdzv_closed_decode(vals[0], lens[0], &k, &st, msg, sizeof(msg)) != 0 || k <= 0 ||
	    k > c->job->max_nodes) { /* the store's value, as handle_closed checks it */
		finish(c);
		return;
	}
	if (lens[1] > 0 && rdzv_end_decode(vals[1], lens[1], &e) == 0 &&
	    (e.kind == RDZV_END_LOST || e.kind == RDZV_END_REJOIN))
		j->lost = e.node; /* -1 for a plain rejoin: none */
	if (coord_silence_start(&j->quiet, (size_t)k) != 0) {
		finish(c);
		return;
	}
	j->n = k;
	j->waiting = 0; /* known at the first poll */
	j->until_ms = j->quiet.at_ms + c->job->shutdown_timeout_ms + COORD_LEAVE_MS;
	poll_from(c);
}

void coord_rejoin_await(struct coord *c)
{
	const char **keys;

	if (c->rj.busy)
		return;
	if (c->round == 0) {
		coord_join_close(c);
		return;
	}
	coord_rejoin_reset(c);
	c->rj.busy = true;
	c->rj.round = c->round;
	keys = coord_keys_of(c, c->round - 1, RDZV_R_CLOSED, 1, RDZV_R_END);
	if (keys == NULL || store_async_multi_get(c->A, keys, 2, on_prev, c) != 0)
		finish(c);
	free(keys);
}
