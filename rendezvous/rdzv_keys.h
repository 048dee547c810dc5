/* rdzv_keys: where a node rendezvous keeps its state in the store -- the one
 * description of the key layout, shared by ddprun's coordinator (which writes
 * it) and `ddpstore status` (which reads it). Values are rdzv_msg.h's.
 * Keys outside "ddprun/" are the workers' (a static job's workers use this
 * store): node 0 forgets them before a restart's round closes (coord_join.c).
 *
 * Under "ddprun/" (RDZV_KEY_ROOT), for every store:
 *   runs/n          ADD counter of the run ids that ever met on this store
 *   runs/<i>        i = 1..n: a run id (the node that wrote its config first)
 * Under "ddprun/<run_id>/" (so jobs sharing a store never meet):
 *   config          the first node's job settings (CAS "" -> JSON: backend,
 *                   nnodes, max_restarts, version, hang_timeout); every node CASes its own
 *                   and a mismatch fails the job naming both nodes
 *   round           the current round r (absent: 0)
 *   ended           "<r>": the job ended for good in round r (its end says
 *                   how); a node that comes later is refused (the run id
 *                   is taken)
 * and per round r (one round per start of the workers), under "r<r>/":
 *   node/<i>        a descriptor JSON (host, addr, nproc, pid, ...); static:
 *                   i is the node rank, claimed by CAS "" -> desc so that a
 *                   duplicate rank is seen; dynamic: i is the arrival number
 *                   minus one (the node rank comes with closed)
 *   count           ADD counter of joiners (dynamic: a node's arrival number)
 *   gone/<i>        dynamic: arrival i+1 left before the round closed (its
 *                   connection's ON_CLOSE_SET), so the round closes without it
 *   from/<R>        dynamic, round r > 0: node R of round r-1, moving here:
 *                   "in:<arrival>" once it counted in, or "gone:<who>" (its
 *                   connection's ON_CLOSE_SET) if it closed first; the
 *                   round waits for them (coord_rejoin.c)
 *   moving/<R>      its beats "<seq>:<epoch ms>" while its workers stop
 *   closed          the participants: "<N>" (arrivals 1..N, node rank =
 *                   arrival - 1), "<N>:<a1>,...,<aN>" (dynamic: node rank i is
 *                   arrival a(i+1)), or "error:<status>:<message>"
 *   meta            {"restart_count": n}, written by the closer: the
 *                   authoritative TORCHELASTIC_RESTART_COUNT of the round
 *   end             why the round ended, first writer wins (CAS, and each
 *                   agent's ON_CLOSE_SET "lost:<R>:<why>"): "ok",
 *                   {"fail":...}, "lost:<R>:<why>", "rejoin" (a node
 *                   waits to join), "rejoin:<R>:<why>" (node R counted in
 *                   but sent no descriptor: no worker started, coord_join.c)
 *   hb/<R>          node rank R's heartbeat "<seq>:<epoch ms>" (changes every
 *                   keep_alive_interval; "done" once its workers are done),
 *                   watched by the store's host; a static job's nodes beat
 *                   on round r+1's from the end of round r for a restart
 *                   (its rendezvous cannot close without them)
 *   failures/<R>    node R's failures (JSON list), published after a failure
 *   done            exit-barrier ADD counter; reaching N CASes end = "ok"
 *   left, all_left  after "ok": the store's host waits (bounded) for all_left
 *                   so no node loses the store while it reads "ok" */
#ifndef DDP_RDZV_KEYS_H
#define DDP_RDZV_KEYS_H

#include <stdio.h>

#define RDZV_KEY_ROOT "ddprun"
/* The same as the server holds it: clients send "/" + key, as TCPStore. */
#define RDZV_KEY_ROOT_STORED "/" RDZV_KEY_ROOT "/"
/* A run id is shorter than this: a longer one is not listed in runs/
 * (ddpstore status), and libddp refuses it in TORCHELASTIC_RUN_ID. */
#define RDZV_RUN_ID_MAX 128

/* Store-wide, under RDZV_KEY_ROOT "/". */
#define RDZV_KEY_RUNS_N	  "runs/n"
#define RDZV_KEY_RUNS_FMT "runs/%d"

/* A job's, under RDZV_KEY_ROOT "/<run_id>/". */
#define RDZV_KEY_CONFIG "config"
#define RDZV_KEY_ROUND	"round"
#define RDZV_KEY_ENDED	"ended"

/* A round's, under "r<r>/" there (the round prefix is RDZV_KEY_ROUND_FMT). */
#define RDZV_KEY_ROUND_FMT "r%d/"
#define RDZV_R_NODE	   "node/%d"
#define RDZV_R_COUNT	   "count"
#define RDZV_R_GONE	   "gone/%d"
#define RDZV_R_FROM	   "from/%d"
#define RDZV_R_MOVING	   "moving/%d"
#define RDZV_R_CLOSED	   "closed"
#define RDZV_R_META	   "meta"
#define RDZV_R_END	   "end"
#define RDZV_R_HB	   "hb/%d"
#define RDZV_R_FAILURES	   "failures/%d"
#define RDZV_R_DONE	   "done"
#define RDZV_R_LEFT	   "left"
#define RDZV_R_ALL_LEFT	   "all_left"

/* "ddprun/<run_id>" into buf: the prefix of a job's keys. */
static inline const char *rdzv_key_job(char *buf, size_t len, const char *run_id)
{
	snprintf(buf, len, RDZV_KEY_ROOT "/%s", run_id);
	return buf;
}

#endif
