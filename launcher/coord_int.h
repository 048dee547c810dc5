/* coord_int: the coordinator's state, shared by its files:
 *   coord.c         hooks, connections, the end of a round
 *   coord_leave.c   leaving in order, coord_fail
 *   coord_join.c    joining a round (static and dynamic) until it closes
 *   coord_live.c    heartbeats, the store host's watch, the exit barrier
 *   coord_report.c  failures published per node, the combined report
 *   coord_host.c    which agent hosts the store; the workers' store
 *   coord_start.c   resolving the store's host, a taken port, connecting
 *   coord_watch.c   who joined: waiting lines, timeouts, other run ids
 *   coord_fwd.c     --forward-signals: each delivery on every node once
 *   coord_rejoin.c  dynamic: a round's last call waits for the round before's
 * Store callbacks get the coordinator as arg; a callback whose phase has
 * passed does nothing. Connection-level errors are handled once, in
 * on_lost/on_connect (operation callbacks ignore them).
 *
 * The store's key layout is rdzv_keys.h's. */
#ifndef DDP_COORD_INT_H
#define DDP_COORD_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "coord.h"
#include "rdzv_keys.h"
#include "rdzv_msg.h"

struct store_async;
struct store_async_callbacks;
struct store_server;
struct store_lookup;
struct store_lookup_result;

/* How long the store's host waits for the others to be done with it once
 * the job ends (plus the shutdown timeout after a failure). */
#define COORD_LINGER_MS 10000
/* How long a node that does not host the store takes to leave it at most. */
#define COORD_LEAVE_MS 5000
/* How often a node waiting for a round says who it waits for. */
#define COORD_WATCH_MS 5000
/* A node with a bad rank tries this long to tell the others. */
#define COORD_BAD_RANK_CONNECT_MS 30000

/* What a survey of the round found (coord_watch.c). */
struct coord_survey {
	bool busy;
	bool light; /* requested: counts only */
	bool named; /* this survey read the nodes' keys */
	void (*done)(struct coord *c);
	int64_t count;	    /* dynamic: arrivals so far */
	int joined;	    /* nodes in the round now (dynamic: that stayed) */
	int missing;	    /* static: node ranks not claimed */
	char joined_s[600]; /* "0@host-a, 2@host-c" (the first few) */
	char missing_s[120];
	int nruns;
	char runs[32][RDZV_RUN_ID_MAX];
	char others[400]; /* other run ids with a rendezvous going on here */
};

/* How long each of n nodes' beats (hb/, moving/) were seen not to change
 * (coord_live.c: the store host's watch, and coord_rejoin.c's wait). */
struct coord_silence {
	size_t n;
	int64_t at_ms;	    /* the last sample */
	char (*last)[24];   /* what each one's key said last */
	int64_t *silent_ms; /* how long it was seen not to change */
};

/* Dynamic: a later round's last call waits for the nodes of the round
 * before (coord_rejoin.c). */
struct coord_rejoin {
	int prev_rank; /* moving to the next round: this node's rank in the last (-1: none) */
	bool busy;     /* a wait under way */
	int round;     /* the round it is for */
	int n;	       /* the round before's nodes (-1: not read yet) */
	int lost;      /* the one its end names lost (-1: none) */
	int waiting;   /* how many are still waited for (0: none, or not waiting) */
	int64_t until_ms;
	struct coord_silence quiet; /* their moving/ keys */
};

enum coord_phase {
	CP_START,  /* before the first rendezvous */
	CP_JOIN,   /* joining a round, until it closes */
	CP_LATE,   /* dynamic: late for a closed round, waiting for its end */
	CP_RUN,	   /* a participant of a closed round */
	CP_MOVE,   /* the round ended; workers stopping before the next round */
	CP_HALT,   /* the job failed; workers stopping before the report */
	CP_REPORT, /* publishing failures, printing the report */
	CP_QUIT,   /* workers stopping before leaving (no report) */
	CP_LEAVE   /* closing every handle; then agent_stop */
};

struct coord {
	uv_loop_t *loop;
	const struct job *job;
	const struct rdzv_conf *conf; /* &job->rdzv */
	char host[RDZV_HOST_MAX];     /* job->hostname, as the rendezvous sends it */
	struct agent *agent;
	char prefix[300]; /* "ddprun/<run_id>" */
	char store_host[256];
	int store_port;
	int64_t connect_timeout_ms;
	struct store_server *server; /* the rendezvous store, if hosted here */
	struct store_server *wstore; /* dynamic, group rank 0: the workers' store */
	struct store_async *A, *W;   /* requests; waits */
	bool a_up, w_up;
	char local_addr[RDZV_ADDR_MAX]; /* of A: how the store host sees us */
	char peer_addr[RDZV_ADDR_MAX];	/* of A: the store host, as we reach it */
	enum coord_phase phase;
	bool config_checked;
	struct coord_hang *hang; /* hang dumps across nodes (coord_hang.c) */
	struct coord_fwd *fwd;	 /* forwarded signals (coord_fwd.c); NULL: none */
	int round;		 /* the round being joined or run */
	int restart_count;	 /* of that round */
	int rank;		 /* this node's rank in the round (-1: not yet) */
	int k;			 /* dynamic: arrival number in the round */
	int nnodes;		 /* participants of the round */
	int *arrivals;		 /* dynamic: their arrival numbers, by rank */
	int64_t last_call_ms;	 /* dynamic: when this node's last call ends (0: none this round) */
	bool last_call_over;	 /* dynamic: it ended (or join_timeout, with enough nodes) */
	struct coord_rejoin rj;	 /* dynamic: ... and the round before's nodes (coord_rejoin.c) */
	struct rdzv_node *nodes; /* their descriptors, by rank */
	struct rdzv_end end;
	bool end_known;
	bool at_barrier;
	bool in_round; /* took part in c->round (it closed with this node) */
	/* Dynamic: moved on from a round it ran (owe_round, -1: none) and not
	 * yet in the next: it still counts out of that round's left/ as it
	 * leaves, where the store's host may wait for owe_expected nodes to. */
	int owe_round, owe_expected;
	int next_round, next_count; /* where CP_MOVE goes */
	int pub_status;		    /* coord_publish_error in flight */
	bool pub_must_fail;
	char pub_msg[600];
	int status;	    /* ddprun's exit status once decided */
	int report_missing; /* nodes whose failure list did not come in time (coord_report.c) */
	bool signal_seen;
	/* heartbeats and the store host's watch */
	uv_timer_t hb_timer;
	bool hb_pending;
	int64_t hb_seq;
	int64_t hb_sent_ms;
	bool mon_pending;
	uv_timer_t mon_timer;	  /* the store's host: sampling them */
	int mon_round;		  /* the round whose heartbeats mon is of (-1: none) */
	struct coord_silence mon; /* their hb/ keys */
	/* one-shot: last call, node 0's poll of a restart's count, exit barrier,
	 * the host's wait for its peers */
	uv_timer_t timer;
	uv_timer_t watch_timer; /* the waiting lines */
	uv_timer_t rj_timer;	/* dynamic: the polls of coord_rejoin.c */
	struct coord_survey sv;
	bool timers_on;
	int open;	 /* handles and connections closing */
	int leave_stage; /* see coord.c: leave_advance */
	bool closing_store;
	bool hurry;		/* a further signal: leave without waiting for anyone */
	bool awaiting_all_left; /* the store's host waits for r<round>/all_left */
	int64_t left_at_ms;	/* since when (util_now_ms) */
	/* coord_start.c */
	struct store_lookup *lookup; /* the store host's lookup under way (store_lookup.h) */
	bool store_local;	     /* the store host is an address of this host */
	int64_t resolve_deadline_ms;
	int64_t connect_deadline_ms; /* for the line while nothing answers */
	bool resolve_said;	     /* the first temporary failure was said */
	bool probing;		     /* node 0 whose port is taken: asking who holds it */
	bool probe_rdzv;	     /* ... a store where ddprun jobs met (ddprun/runs/n) */
	bool host_deferred;	     /* dynamic: the endpoint's port was taken here */
	char probe_why[200];	     /* which address family is taken, if that was it */
};

/* coord.c */
#define COORD_KEY_MAX 48
/* Round-scoped keys in one malloc'd block: first (if not NULL), then fmt
 * (one %d) for 0..n-1. NULL on ENOMEM. */
const char **coord_keys(struct coord *c, const char *first, size_t n, const char *fmt);
/* The same for round (not c->round). */
const char **coord_keys_of(struct coord *c, int round, const char *first, size_t n,
			   const char *fmt);
/* Round-scoped key: "r<round>/<fmt...>" into buf. */
const char *coord_key(struct coord *c, char *buf, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* The job cannot go on: stop local workers if any run, then leave with status
 * (a node already ending for a signal keeps the signal's, and hurries). */
void coord_fail(struct coord *c, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* This node is ending for a signal: its agent took one (its workers may
 * still be stopping), or they have stopped for it. */
bool coord_signalled(const struct coord *c);
/* What coord_fail's message says the node does next: "stopping the workers",
 * or, ending for a signal already, "leaving without it" (the store). */
const char *coord_fail_words(const struct coord *c);
void coord_leave(struct coord *c);
/* How many nodes count out of the round this node counts out of (its
 * left/): its nodes, less the one lost and those whose failure lists did
 * not come within the report's wait. */
int coord_left_expected(const struct coord *c);
/* A further signal while leaving: stop waiting for the other nodes. */
void coord_hurry(struct coord *c);
/* The store's host, waiting for all_left, saw a connection close: count the
 * nodes that left again (one that counted itself last may have closed, in a
 * hurry, before it could say that all had). */
void coord_leave_recount(struct coord *c);
/* The round closed with this node taking part: start the workers. */
void coord_round_start(struct coord *c);
/* The round's end value arrived (W's wait on r<round>/end). */
void coord_on_end(struct coord *c, const void *val, size_t len);
/* Park W on r<round>/end. */
void coord_watch_end(struct coord *c);
/* The job ended for good in c->round: a later node with its run id is refused. */
void coord_mark_ended(struct coord *c);
/* A closing handle of ours is gone. */
void coord_closed_one(void *arg);

/* This node cannot join, and said why at once, before the rendezvous (a
 * node rank out of range, a program it cannot run: coord_create, job.c's
 * prefail): it joins only to tell the others. */
bool coord_said_at_once(const struct coord *c);
/* Both store connections (A, W); 0 or a negative errno. */
int coord_connect(struct coord *c);
/* One more connection to the store (*out), with the job's key prefix, for
 * a part of the coordinator that parks its own waits (hang, fwd): 0 or a
 * negative errno (nothing is left open then). */
int coord_conn_open(struct coord *c, const struct store_async_callbacks *cbs,
		    struct store_async **out);

/* coord_start.c */
/* Resolve the store's host, host the store here if so, connect. */
void coord_start(struct coord *c);
/* Probing: A is up / A failed or was lost. */
void coord_probe(struct coord *c);
void coord_probe_failed(struct coord *c);

/* coord_join.c */
void coord_join(struct coord *c);
/* Dynamic: close the round with the nodes that came and stayed if it is
 * full, or its last call is over (coord_rejoin_await's end). */
void coord_join_close(struct coord *c);
/* Static: this node's death (its connection's close) ends round's
 * rendezvous at once, 75 for every node waiting in it: the round cannot
 * close without it. Registered when it joins, and already when a round ends
 * for a restart (its workers may take --shutdown-timeout to stop, and the
 * others wait in the next round meanwhile). */
void coord_guard_join(struct coord *c, int round);
/* The closed value (malloc'd; NULL on ENOMEM) that ends round's
 * rendezvous because node was lost (why: how it was noticed). */
char *coord_lost_closed(int node, int round, const char *why);
/* Publish a rendezvous error as the round's closed value (everyone waiting
 * on it ends with status); must_fail: this node cannot join, it ends here
 * even if the round closed (then alone, saying that the job runs on without
 * it). From CP_JOIN, or CP_START for node 0's probe (coord_start.c). */
void coord_publish_error(struct coord *c, int status, bool must_fail, const char *msg);

/* coord_rejoin.c */
/* Dynamic: this node's round ended and it moves to the next (c->next_round)
 * once its workers stop: it says so there while they do (its beats, and its
 * connection's close), so that the round's last call waits for it. */
void coord_rejoin_move(struct coord *c);
/* It counted into that round as arrival c->k (before the ON_CLOSE_SET of
 * its gone/ key, which replaces the one for the move). */
void coord_rejoin_arrived(struct coord *c);
/* The round is full, or its last call is over: coord_join_close once every
 * node of the round before came, went, or fell silent (at once in round 0). */
void coord_rejoin_await(struct coord *c);
/* A new round's join: no wait from the last one. */
void coord_rejoin_reset(struct coord *c);
/* The arrival number a from/ value says its node came as (0: none yet). */
int coord_rejoin_came(const void *val, size_t len);

/* coord_watch.c */
/* Say who joined every COORD_WATCH_MS while the round is open. */
void coord_watch_start(struct coord *c);
/* Read who joined (light: only how many), then done(c) (the last request's,
 * if several came). */
void coord_survey(struct coord *c, bool light, void (*done)(struct coord *c));
/* "2 of 3 joined (0@a, 2@c), missing node rank 1" (static) or "round 0, 1
 * joined (0@a), --nnodes 2:4" (dynamic), then tail, then the other run ids. */
void coord_survey_text(struct coord *c, const char *tail, char *buf, size_t len);
/* This node wrote its job's config: list the run id in the store's runs/. */
void coord_register_run(struct coord *c);

/* coord_live.c */
/* Count silences of n nodes from now (the old counts freed); -ENOMEM. */
int coord_silence_start(struct coord_silence *s, size_t n);
void coord_silence_free(struct coord_silence *s);
/* A sample's time since the last: a stall of this loop (the store's, too:
 * beats that came meanwhile wait unread behind it) is not silence, so it
 * counts at most two sample periods. */
int64_t coord_silence_step(const struct coord *c, struct coord_silence *s);
/* Node i's key now says val (len bytes): how long it has been silent, step
 * (coord_silence_step's) added unless it changed. */
int64_t coord_silence_seen(struct coord_silence *s, size_t i, const void *val, size_t len,
			   int64_t step);
void coord_live_start(struct coord *c);
void coord_live_stop(struct coord *c);
/* How often the watches of heartbeats sample them (a quarter interval). */
int64_t coord_live_sample_ms(const struct coord *c);
void coord_barrier(struct coord *c);

/* coord_report.c */
/* Publish this node's failures, wait (bounded) for every other
 * participant's, decide the job's status and root cause, report, leave. */
void coord_report(struct coord *c);
/* The same from this node's failures alone (the others' cannot be read). */
void coord_report_local(struct coord *c);
/* r<round>/failures/<rank>: this node's failures (maybe none). */
void coord_publish_failures(struct coord *c);
/* The job's verdict from the round's end and the failures of every list
 * that came (e[0..n); missing: a participant not known lost sent none): the
 * root-cause rule (report.h) over them, and over the end's own failure when
 * no list holds it (a signal, a node that could not start its workers).
 * *root: the entry that decides the status, or n when none does (the end's
 * own failure, or COORD_EXIT_LOST: a lost node or store with no primary
 * worker failure, or a secondary root whose cause some node never told). */
void coord_verdict(const struct rdzv_end *end, const struct report_entry *e, size_t n, bool missing,
		   int *status, size_t *root);
/* The status when the store is lost: the verdict over this node's failures
 * and the end, if known. */
int coord_local_status(struct coord *c);
/* What the round's end e says happened, in words (for a line of ours). */
void coord_describe_end(const struct coord *c, const struct rdzv_end *e, char *buf, size_t len);

/* coord_join.c: the round's end is out, from this member of a dynamic round
 * (closed, not started): the other members, waiting up to desc_wait_ms for
 * the descriptors, read it now. */
void coord_join_wake_members(struct coord *c);

/* coord_hang.c: hang dumps across nodes (its keys r<r>/hang/... are described
 * there): a round started (park on its dump requests); closing. */
void coord_hang_round(struct coord *c);
void coord_hang_close(struct coord *c);
void coord_hang_destroy(struct coord *c);
/* This node dumped its ranks for a hang this round (true): the node that
 * found it ends the round, final, once it has every node's positions; this
 * node ends it the same way only if that end does not come in time. False:
 * no such hang, this node's failure goes out now. */
bool coord_hang_await_end(struct coord *c);
/* This node gathers the nodes' positions for a verdict: then runs once it
 * is printed (bounded; a later call's then instead), and true; false: none
 * is gathered, go on now. */
bool coord_hang_defer(struct coord *c, void (*then)(struct coord *c));
/* Node is lost: the positions this node gathers are not waited for from it. */
void coord_hang_node_gone(struct coord *c, int node);

/* coord_fwd.c: forwarded signals across nodes (its keys r<r>/fwd/... are
 * described there): a round started (walk its log); closing. */
void coord_fwd_round(struct coord *c);
void coord_fwd_close(struct coord *c);
void coord_fwd_destroy(struct coord *c);

/* coord_host.c */
int coord_host_start(struct coord *c, char *err, size_t errlen);
/* Whether one of r's addresses is one of this host's interfaces'. */
bool coord_host_is_local(const struct store_lookup_result *r);
/* The round's workers' store; first: the round's first arrival, which takes
 * --master-port when given (the others take any port). */
int coord_wstore_start(struct coord *c, bool first, int *port, char *err, size_t errlen);
void coord_wstore_close(struct coord *c, void (*done)(void *arg));
/* Close the rendezvous store once no peer is connected (bounded). */
void coord_host_close(struct coord *c);
void coord_host_conn_closed(void *arg);

#endif
