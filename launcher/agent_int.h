/* agent_int: the agent's private state, shared by agent.c (the state
 * machine), agent_worker.c (starting and signalling one worker),
 * agent_failure.c (recording the workers' failures) and the agent's other
 * agent_*.c files. */
#ifndef DDP_AGENT_INT_H
#define DDP_AGENT_INT_H

#include <stdbool.h>
#include <sys/types.h>
#include <uv.h>

#include "agent.h"
#include "logdir.h"
#include "output.h"

struct store_server;
struct store_lookup;
struct hang;
struct agent_fwd;
struct agent_sig;

enum agent_state {
	AS_IDLE,     /* created, not started */
	AS_RDZV,     /* waiting for agent_rendezvous_done */
	AS_RUNNING,  /* workers running, none failed */
	AS_STOPPING, /* stop signals sent; waiting for every worker to exit */
	AS_DRAINING, /* all exited; waiting for output streams to close */
	AS_WAITING,  /* done locally; the coordinator decides when to end */
	AS_CLOSING   /* handles closing; the loop is about to return */
};

/* What follows a stop once every worker has exited. */
enum agent_after {
	AFTER_DECIDE, /* a local failure: restart if restarts are left */
	AFTER_EXIT,   /* a signal, agent_stop, an agent error: end */
	AFTER_RESTART /* agent_restart */
};

struct agent_worker {
	struct agent *a;
	int local_rank;
	pid_t pid;	 /* also the process group id; 0: not started */
	bool running;	 /* started and not yet reaped */
	bool exited_ok;	 /* exited 0 before any stop of this attempt */
	bool group_live; /* the process group may still have members */
	char *error_file;
	int64_t started_us; /* report_start_us() at its start */
	bool failing;	    /* its error file was there when the stop began */
	char *prefix[2];    /* console line prefix for stdout, stderr */
	struct output_stream stream[2];
};

struct agent {
	uv_loop_t *loop;
	struct agent_config cfg;
	const struct job *job; /* cfg.job */
	struct agent_coord coord;
	bool has_coord;
	enum agent_state state;
	enum agent_after after;
	/* This attempt's place in the job. restart_count is the attempt's
	 * number from the moment it is decided (before its rendezvous); the
	 * rest is the rendezvous's answer (the coordinator's restart count
	 * included: it is authoritative). */
	struct workenv_world world;
	char *master_addr;	/* world.master_addr points here */
	struct agent_worker *w; /* job->nproc of them */
	int nrunning;
	int open_streams;
	int devnull;
	struct logdir logdir;
	struct report_entry *failures; /* this attempt's, in the order seen */
	size_t nfailures;
	int status; /* exit status once status_set */
	bool status_set;
	bool stop_requested; /* agent_stop was called: no finished() then */
	bool failed;	     /* the job ended in failure */
	bool keep_logdir;    /* the report names a file in a temporary log dir */
	int sigints;
	bool signalled; /* a handled signal arrived */
	int signo;	/* the first one */
	uv_signal_t sigchld;
	struct agent_sig *stops; /* --signals-to-handle (agent_sig.h) */
	uv_timer_t kill_timer;
	bool kill_timer_on;
	bool killed;		/* SIGKILL went to every group in this attempt */
	bool stop_had;		/* the workers had a stop signal in this attempt */
	int stepd_sig;		/* the last stop signal from the step's slurmstepd, or 0 */
	bool late_failures;	/* the stop is for a failure (here or elsewhere) */
	uv_timer_t stuck_timer; /* bounds the wait after SIGKILL */
	bool stuck_timer_on;
	uv_timer_t helper_timer; /* bounds the wait for multiprocessing's helpers */
	bool helper_timer_on;
	bool helpers_waited;	     /* ... which is over in this attempt */
	int open_handles;	     /* loop handles not yet closed */
	struct store_server *store;  /* the store this agent hosts, or NULL */
	struct store_lookup *lookup; /* its host's lookup under way (store_lookup.h) */
	uv_timer_t store_timer;	     /* retries a name that cannot resolve yet */
	int64_t store_deadline_ms;   /* ... until then (join_timeout) */
	bool store_said;	     /* the first such failure was said */
	char *store_host;
	int store_port;
	struct hang *hang;     /* hang detection and dumps (hang.h); NULL: none */
	int dup_fd[2];	       /* filtered_std{out,err}.log (agent_dup.c); -1: none */
	struct agent_fwd *fwd; /* --forward-signals (agent_fwd.h); NULL: none */
};

/* Start w for the current attempt. 0 or a negative errno with err set. */
int agent_worker_start(struct agent *a, struct agent_worker *w, char *err, size_t errlen);
/* The descriptors the agent holds for the job's running workers (their
 * streams' pipes and tee files). */
int agent_worker_fds(const struct job *job);
/* Add to e, the failure of w, its last stderr lines and what they tell. */
void agent_worker_failure_output(struct agent *a, struct agent_worker *w, struct report_entry *e);
/* Send sig to w's process group (or to w itself before it has made one). */
void agent_worker_signal(struct agent_worker *w, int sig);
/* Closed-stream bookkeeping, called by the output streams. */
void agent_stream_closed(struct output_stream *s);
/* A stack dump is over (hang_dump.c): the attempt's end may have waited. */
void agent_dump_over(struct agent *a);
/* How long ddprun waits for workers after SIGKILL: one in uninterruptible
 * sleep (D: a hung NFS or FUSE read, a driver call) outlives even that. */
#define AGENT_STUCK_WAIT_MS 5000
/* SIGKILL what the workers left outside their process groups
 * (procsweep.h); once every worker has exited. */
void agent_kill_escaped(struct agent *a);
/* Say what w left in its process group once every worker exited (killed
 * next, as every group is then), naming one of them; nothing when none. */
void agent_say_group_left(struct agent *a, const struct agent_worker *w);
/* How long, after the workers succeeded, ddprun waits for Python
 * multiprocessing's helpers they left (its resource tracker, fork server)
 * to end on their own, the tracker once it has removed what the program
 * leaked (shared memory, semaphores). */
#define AGENT_MP_HELPER_WAIT_MS 5000
/* Whether every process left in w's process group is one of those helpers
 * (proc_is_mp_helper), or already in its exit. */
bool agent_group_helpers_only(const struct agent_worker *w);
/* The workers still running AGENT_STUCK_WAIT_MS after SIGKILL: name each
 * (pid, state, wchan) and stop waiting for it. */
void agent_abandon_stuck(struct agent *a);
/* Test hook (DDPRUN_TEST_NO_SIGKILL=1): SIGKILL is not sent to the workers,
 * which then look unkillable (a real D-state process is hard to make). */
bool agent_test_no_sigkill(void);
/* Tell the watchdog that w's group is gone for good. */
void agent_watchdog_forget(struct agent *a, pid_t pgid);

/* agent_failure.c: the record of this attempt's failures (a->failures).
 * Before the stop signals go: mark each running worker whose error file is
 * there as failing on its own. */
void agent_failure_note_failing(struct agent *a);
/* w exited with wstatus, not 0: record it if it is a failure (every exit
 * while the workers run; after the stop, one of a worker that failed on its
 * own). True when the workers were running (a failure that stops them). */
bool agent_failure_exit(struct agent *a, struct agent_worker *w, int wstatus);
/* The root cause among the recorded failures; only when there are some. */
const struct report_entry *agent_failure_root(const struct agent *a);
/* Forget the recorded failures (a new attempt, the end). */
void agent_failure_clear(struct agent *a);

/* agent_dup.c: --duplicate-std{out,err}-filters. Open this attempt's files
 * (0 or a negative errno with err set); close them; the line callback for
 * stream s (0 stdout, 1 stderr) of a worker, NULL when nothing is copied. */
int agent_dup_attempt(struct agent *a, char *err, size_t errlen);
void agent_dup_close(struct agent *a);
output_line_cb agent_dup_cb(struct agent *a, int s, bool tee);

#endif
