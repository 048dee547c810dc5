/* agent: the per-node supervisor, one state machine on one libuv loop.
 *
 *   rendezvous -> start workers -> running --(all exit 0)--------> finished
 *        ^                           |  (a worker fails, a signal, agent_stop)
 *        |                           v
 *        +------ restart <------- stopping: SIGTERM+SIGCONT to every worker
 *          (restarts left)           group, --shutdown-timeout, then SIGKILL
 *
 * Exits are events (SIGCHLD in the loop), never polled. The first failure of
 * an attempt stops every other worker (fail fast). Signals from
 * --signals-to-handle are forwarded to every worker group and end the job
 * with 128+signal (one that the step's slurmstepd sent to every process of
 * the step is not sent again: agent_sig.h); a second SIGINT SIGKILLs at once
 * (Slurm's repeat of its own is no second: agent.c). A signal that was
 * ignored when ddprun started (nohup) stays ignored. ddprun is the child
 * subreaper: what a worker leaves in its process group gets the same grace
 * period, and is SIGKILLed once every worker has exited.
 *
 * With a coordinator, the single-node store is not started by the agent:
 * the coordinator decides who hosts it (agent_loop() gives its loop) and
 * fills workenv_world.master_addr/master_port/use_agent_store.
 *
 * Multi-node plugs in through struct agent_coord (NULL: a single node, where
 * the rendezvous is trivial and the job ends when the local workers end):
 *  - rendezvous(): called before each attempt; the coordinator answers with
 *    agent_rendezvous_done() once it knows this node's place in the world
 *    (restart count included: the coordinator's is authoritative).
 *  - failed(): the first local failures of an attempt, as soon as they are
 *    seen (before the local workers are stopped): the root cause among them
 *    (report.h) with the exit status it implies, so other nodes can be told
 *    at once.
 *  - finished(): no local worker runs any more and the agent has nothing left
 *    to do on its own: status 0 (success), a local failure's status, or
 *    128+signal after a signal (agent_signalled() then says so; the agent
 *    stopped its workers). With a coordinator the agent never restarts, ends
 *    or prints the failure report by itself: it waits until the coordinator
 *    calls agent_restart() or agent_stop(). finished() may come again (a
 *    further signal; not for Slurm's repeat of the one it sent, which
 *    changes nothing). Not called after the coordinator's own agent_stop().
 *  - agent_stop(status): stop every local worker now and end with status.
 *    agent_halt(status): stop them, keep status, and call finished() (the
 *    coordinator has work to do before the end). agent_restart(): stop them
 *    and go back to rendezvous.
 * Every agent_* call is made from the loop's thread. */
#ifndef DDP_AGENT_H
#define DDP_AGENT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/resource.h>
#include <uv.h>

#include "job.h"
#include "report.h"
#include "watchdog.h"
#include "workenv.h"

struct agent;

/* What the agent reads: the job (job.h), and how ddprun's own process
 * stands (its environment, its signals, its limits). */
struct agent_config {
	const struct job *job;
	char *const *worker_env;       /* environment the workers inherit */
	const char *parent_error_file; /* ddprun's own TORCHELASTIC_ERROR_FILE, or NULL */
	struct watchdog *watchdog;     /* kills worker groups if ddprun dies; NULL: none */
	const int *dfl_sigs;	       /* dispositions workers must not inherit */
	int ndfl_sigs;
	const struct rlimit *nofile; /* RLIMIT_NOFILE for the workers; NULL: ddprun's */
	pid_t ptracer;		     /* each worker's ptracer (spawn_worker.h); 0: none */
};

struct agent_coord {
	void (*rendezvous)(struct agent *a, int restart_count, void *arg);
	void (*failed)(struct agent *a, const struct report_entry *root, int status, void *arg);
	void (*finished)(struct agent *a, int status, void *arg);
	void *arg;
};

/* 0 or a negative errno with a message in err. coord may be NULL. */
int agent_create(uv_loop_t *loop, const struct agent_config *cfg, const struct agent_coord *coord,
		 struct agent **out, char *err, size_t errlen);
/* Begin the first attempt; run the loop afterwards until it returns. */
int agent_start(struct agent *a);
/* w: this node's place in the job for the attempt (workenv.h); copied. */
void agent_rendezvous_done(struct agent *a, int rc, const struct workenv_world *w);
void agent_stop(struct agent *a, int status);
/* for_failure: the round ended for a failure (a worker's, or a node's that
 * could not run them; not a signal, a lost node or a hang): a worker that
 * writes its error file after the stop signals failed too. */
void agent_halt(struct agent *a, int status, bool for_failure);
void agent_restart(struct agent *a);
/* A signal from --signals-to-handle has reached ddprun. */
bool agent_signalled(const struct agent *a);
/* What a cause of the job's end does to the workers, for its message:
 * "stopping the workers", "the workers are stopping" (by this cause or an
 * earlier one) or, with none
 * running (between attempts, after their success), "the job ends". */
const char *agent_stop_words(const struct agent *a);
/* The first such signal (0: none), whatever the exit status says (a hang's
 * 124, decided before it, stays). */
int agent_signal(const struct agent *a);
/* This attempt's local failures so far, in the order seen. */
const struct report_entry *agent_failures(const struct agent *a, size_t *n);
/* The local failures of rank stopped for the hang become primary: the
 * job's verdict found it to be the one the others waited for. */
void agent_hang_culprit(struct agent *a, int rank);
/* The entry of this node's failures that e is: one of the coordinator's,
 * decoded from the store, carries no error file's contents, and another
 * node's names a file there. NULL: e ran elsewhere. */
const struct report_entry *agent_own_failure(const struct agent *a, const struct report_entry *e);
/* Print the failure summary for e[0..n) with e[root] as the root cause (the
 * local failures when e is NULL; elsewhere, or NULL: where the job's root
 * cause ran when not here, report_format_root), write ddprun's own error file
 * from the root's, and keep a temporary log directory that a local entry
 * names. */
void agent_report(struct agent *a, const struct report_entry *e, size_t n, size_t root,
		  const char *elsewhere);
uv_loop_t *agent_loop(struct agent *a);
/* The exit status, once the loop has returned. */
int agent_exit_status(const struct agent *a);
/* Release everything (after the loop has returned). */
void agent_destroy(struct agent *a);
/* One line on ddprun's stderr, "ddprun: " first, in order with the workers'
 * output. */
void agent_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
