/* coord_leave: ending the coordinator in order (see coord_int.h).
 *
 * A participant says it is done with the store (r<r>/left; the last one sets
 * all_left), then clears its ON_CLOSE_SET (a clean exit is no death) and
 * closes its connections and the workers' store. The rendezvous store's host
 * first waits, bounded, for all_left (the others still read the end, publish
 * failures, report), then for the last connections; then the timers close
 * and the agent ends with the job's status. A node whose signal hurries it
 * out closes without waiting for its count: should it have been the last,
 * the host, told of the closed connection, counts again and sets all_left
 * itself (it waited out --shutdown-timeout otherwise, seen under scancel of a
 * step, where every node gets SIGTERM as it leaves). */
#include "coord_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "store_lookup.h"
#include "store_async.h"
#include "util.h"

/* How long the store's host waits for the others to leave before it says
 * so: they take milliseconds, unless one is stopped or cut off. */
#define LEAVE_SAY_MS 3000

static void on_timer_closed(uv_handle_t *h)
{
	coord_closed_one(h->data);
}

/* Leaving goes in stages, each once the previous one's handles are closed:
 * our connections (and the workers' store), then the rendezvous store we
 * host (once its peers have left), then the timers; then the agent ends. */
static void leave_advance(struct coord *c)
{
	switch (c->leave_stage) {
	case 0:
		c->leave_stage = 1;
		if (c->server != NULL) {
			coord_host_close(c);
			return;
		}
		/* fallthrough */
	case 1:
		c->leave_stage = 2;
		if (c->timers_on) {
			c->open += 5;
			uv_close((uv_handle_t *)&c->rj_timer, on_timer_closed);
			uv_close((uv_handle_t *)&c->hb_timer, on_timer_closed);
			uv_close((uv_handle_t *)&c->mon_timer, on_timer_closed);
			uv_close((uv_handle_t *)&c->timer, on_timer_closed);
			uv_close((uv_handle_t *)&c->watch_timer, on_timer_closed);
			return;
		}
		/* fallthrough */
	case 2:
		c->leave_stage = 3;
		if (c->agent != NULL)
			agent_stop(c->agent, c->status);
		break;
	default:
		break;
	}
}

void coord_closed_one(void *arg)
{
	struct coord *c = arg;

	if (--c->open == 0 && c->phase == CP_LEAVE)
		leave_advance(c);
}

static void close_conns(struct coord *c)
{
	if (c->A != NULL) {
		c->open++;
		store_async_close(c->A, coord_closed_one, c);
		c->A = NULL;
	}
	if (c->W != NULL) {
		c->open++;
		store_async_close(c->W, coord_closed_one, c);
		c->W = NULL;
	}
	c->a_up = c->w_up = false;
	coord_hang_close(c);
	coord_fwd_close(c);
	if (c->wstore != NULL) {
		c->open++;
		coord_wstore_close(c, coord_closed_one);
	}
	if (c->open == 0)
		leave_advance(c);
}

static void on_cleared(int status, void *arg)
{
	struct coord *c = arg;

	if (c->A != NULL)
		close_conns(c);
}

/* A clean exit must not look like a death to the others (the round's end
 * has a value by now anyway: the registration only creates). */
static void clear_and_close(struct coord *c)
{
	if (c->A != NULL && c->a_up &&
	    store_async_on_close_set(c->A, NULL, NULL, 0, on_cleared, c) == 0)
		return;
	close_conns(c);
}

static void on_all_left(int status, void *arg)
{
	struct coord *c = arg;

	if (c->timers_on)
		uv_timer_stop(&c->watch_timer); /* its line, if not said yet, is moot */

	/* Said, because it is why this node ended so late. */
	if (status == -ETIMEDOUT)
		agent_say("waited %.0f s for every node to leave the rendezvous store; closing it "
			  "without the rest",
			  (double)(util_now_ms() - c->left_at_ms) / 1000.0);
	c->awaiting_all_left = false;
	clear_and_close(c);
}

/* How many nodes must have left before all have: not the one lost, nor
 * those whose failure lists did not come within the report's wait (cut
 * off too, or stopped: the store's host waited its linger and
 * --shutdown-timeout more for them to leave, 81 s in all after two nodes
 * lost their links at once). */
int coord_left_expected(const struct coord *c)
{
	/* The round's end names a node that will not count out: lost, or
	 * (rejoin) never heard from after it counted in. */
	int named = c->end_known && (c->end.kind == RDZV_END_LOST ||
				     (c->end.kind == RDZV_END_REJOIN && c->end.node >= 0));

	if (!c->in_round)
		return c->owe_expected - (c->owe_round == c->round ? named : 0);
	return c->nnodes - named - c->report_missing;
}

/* The round whose left/ this node counts out of (-1: none): the one it
 * runs, or the one it moved on from (owe_round). */
static int left_round(const struct coord *c)
{
	return c->in_round ? c->round : c->owe_round;
}

static const char *left_key(const struct coord *c, char *key, size_t len, const char *what)
{
	snprintf(key, len, RDZV_KEY_ROUND_FMT "%s", left_round(c), what);
	return key;
}

/* How long the store's host waits for every node to leave: its linger, and
 * after a failure --shutdown-timeout more (the others stop their workers and
 * publish their failures first). */
static int64_t all_left_bound_ms(const struct coord *c)
{
	return COORD_LINGER_MS + (c->status != 0 ? c->job->shutdown_timeout_ms : 0);
}

static void on_still_out(int status, int64_t n, void *arg)
{
	struct coord *c = arg;
	int64_t waited = util_now_ms() - c->left_at_ms;
	int out = coord_left_expected(c) - (int)n;

	if (status != 0 || !c->awaiting_all_left || c->hurry || out <= 0)
		return;
	agent_say(
		"%d node%s not left the rendezvous store yet (the nodes read from it how the job "
		"ended): waiting up to %.0f s more for %s; a signal (Ctrl-C) closes the store now",
		out, out == 1 ? " has" : "s have", (double)(all_left_bound_ms(c) - waited) / 1000.0,
		out == 1 ? "it" : "them");
}

/* The host has waited a while: a wait that long is said, not silent (a node
 * stopped or cut off holds it up to all_left_bound_ms). */
static void on_leave_watch(uv_timer_t *t)
{
	struct coord *c = t->data;
	char key[64];

	if (c->awaiting_all_left && !c->hurry && c->A != NULL && c->a_up)
		store_async_add(c->A, left_key(c, key, sizeof(key), RDZV_R_LEFT), 0, on_still_out,
				c);
}

static void on_prefail_linger(uv_timer_t *t)
{
	struct coord *c = t->data;

	if (!c->hurry)
		clear_and_close(c);
}

/* This node is done with the store. Its host waits (bounded) until every
 * other participant is too: they read the end, publish failures, report. */
static void after_left(struct coord *c)
{
	char key[64];
	const char *keys[1] = {left_key(c, key, sizeof(key), RDZV_R_ALL_LEFT)};
	int64_t bound = all_left_bound_ms(c);

	if (c->server != NULL && !c->in_round && c->job->prefail_status != 0 && c->timers_on) {
		/* The host's own program cannot run: no round ever ran, so no one
		 * counts out; its store stays up a while for the nodes still on
		 * their way to read why the job ends (job.h: prefail_status). */
		uv_timer_start(&c->timer, on_prefail_linger, COORD_LINGER_MS, 0);
		return;
	}
	if (c->server == NULL || !c->w_up || left_round(c) < 0 ||
	    store_async_wait(c->W, keys, 1, bound, on_all_left, c) != 0) {
		clear_and_close(c);
		return;
	}
	c->awaiting_all_left = true;
	c->left_at_ms = util_now_ms();
	if (c->timers_on)
		uv_timer_start(&c->watch_timer, on_leave_watch, LEAVE_SAY_MS, 0);
}

static void on_recount(int status, int64_t n, void *arg)
{
	struct coord *c = arg;
	char key[64];

	/* Setting it ends this host's own wait (on_all_left). */
	if (status == 0 && c->awaiting_all_left && c->A != NULL && n >= coord_left_expected(c))
		store_async_set(c->A, left_key(c, key, sizeof(key), RDZV_R_ALL_LEFT), "1", 1, NULL,
				NULL);
}

void coord_leave_recount(struct coord *c)
{
	char key[64];

	if (c->phase != CP_LEAVE || !c->awaiting_all_left || c->A == NULL || !c->a_up)
		return;
	store_async_add(c->A, left_key(c, key, sizeof(key), RDZV_R_LEFT), 0, on_recount, c);
}

static void on_all_left_set(int status, void *arg)
{
	after_left(arg);
}

static void on_left(int status, int64_t n, void *arg)
{
	struct coord *c = arg;
	char key[64];

	if (status == 0 && n >= coord_left_expected(c) &&
	    store_async_set(c->A, left_key(c, key, sizeof(key), RDZV_R_ALL_LEFT), "1", 1,
			    on_all_left_set, c) == 0)
		return;
	after_left(c);
}

static void on_leave_timeout(uv_timer_t *t)
{
	coord_hurry(t->data);
}

void coord_leave(struct coord *c)
{
	char key[64];

	if (c->phase == CP_LEAVE)
		return;
	/* A hang's verdict being gathered here reads the store: first (but
	 * not when hurried). */
	if (!c->hurry && coord_hang_defer(c, coord_leave))
		return;
	/* Counted into an open dynamic round: leave it, as a death would (the
	 * on-close registration is cleared on the way out). */
	if (c->job->dynamic && c->phase == CP_JOIN && c->k > 0 && c->A != NULL && c->a_up) {
		char why[RDZV_HOST_MAX + 64];

		snprintf(why, sizeof(why), "host %.200s pid %d left", c->host, (int)getpid());
		store_async_set(c->A, coord_key(c, key, sizeof(key), RDZV_R_GONE, c->k - 1), why,
				strlen(why), NULL, NULL);
	}
	c->phase = CP_LEAVE;
	store_lookup_cancel(&c->lookup); /* never waited for: store_lookup.h */
	coord_live_stop(c);
	if (c->timers_on) {
		uv_timer_stop(&c->timer);
		uv_timer_stop(&c->watch_timer);
		uv_timer_stop(&c->rj_timer);
	}
	if (c->A == NULL || !c->a_up || c->hurry) {
		/* Hurried (a second signal): no waiting, but what the others
		 * wait for goes out before the close (written at once; the store
		 * reads it before the end of the stream): this node's failures
		 * (every node's report waits for them) and its count among those
		 * who left (the store's host recounts when the connection closes).
		 * Otherwise each waited its bound for this node. */
		if (c->hurry && c->A != NULL && c->a_up && left_round(c) >= 0) {
			if (c->agent != NULL)
				coord_publish_failures(c);
			store_async_add(c->A, left_key(c, key, sizeof(key), RDZV_R_LEFT), 1, NULL,
					NULL);
		}
		close_conns(c);
		return;
	}
	/* A store that went silent must not hold us: its host's own wait is
	 * bounded (the host also uses the timer later). */
	if (c->server == NULL && c->timers_on)
		uv_timer_start(&c->timer, on_leave_timeout, COORD_LEAVE_MS, 0);
	if (left_round(c) < 0 ||
	    store_async_add(c->A, left_key(c, key, sizeof(key), RDZV_R_LEFT), 1, on_left, c) != 0)
		after_left(c);
}

bool coord_signalled(const struct coord *c)
{
	return c->signal_seen || (c->agent != NULL && agent_signalled(c->agent));
}

const char *coord_fail_words(const struct coord *c)
{
	if (coord_signalled(c))
		return "leaving without it";
	return c->agent != NULL ? agent_stop_words(c->agent) : "stopping the workers";
}

void coord_fail(struct coord *c, int status, const char *fmt, ...)
{
	char msg[600];
	va_list ap;

	if (c->phase == CP_QUIT || c->phase == CP_LEAVE || (c->hurry && coord_signalled(c)))
		return;
	if (fmt != NULL) {
		va_start(ap, fmt);
		vsnprintf(msg, sizeof(msg), fmt, ap);
		va_end(ap);
		agent_say("%s", msg);
		report_note_reason("%s", msg);
	}
	coord_live_stop(c);
	if (coord_signalled(c)) {
		/* Ending for a signal already, with its status (a signal counts
		 * as this node's failure, at the time it came): what fails on the
		 * way out, the store mostly, only hurries the leaving. Workers
		 * still stopping: on_signal, once they have, sends the signal's
		 * end and leaves. */
		c->hurry = true;
		if (c->signal_seen)
			coord_leave(c);
		return;
	}
	c->status = status;
	if (c->agent != NULL &&
	    (c->phase == CP_RUN || c->phase == CP_MOVE || c->phase == CP_HALT)) {
		c->phase = CP_QUIT; /* finished() follows once the workers stopped */
		agent_halt(c->agent, status, false);
		return;
	}
	coord_leave(c);
}

void coord_hurry(struct coord *c)
{
	if (c->phase != CP_LEAVE || c->hurry)
		return;
	c->hurry = true;
	if (c->leave_stage == 0)
		close_conns(c);
	else
		coord_host_close(c);
}
