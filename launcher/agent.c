/* agent: the supervisor's state machine (see agent.h). Which worker exits
 * are failures, and the report made of them, is agent_failure.c's. */
#include "agent_int.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent_fwd.h"
#include "agent_sig.h"
#include "agent_store.h"
#include "store_server.h"
#include "hang.h"
#include "shmsweep.h"
#include "signame.h"
#include "util.h"

static void check_progress(struct agent *a);
static bool reap(struct agent *a);

void agent_say(const char *fmt, ...)
{
	char buf[600];
	va_list ap;
	int n = snprintf(buf, sizeof(buf), "ddprun: ");

	va_start(ap, fmt);
	n += vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(buf) - 2)
		n = (int)sizeof(buf) - 2;
	buf[n] = '\0';
	/* The first error said is why ddprun failed, for whoever launched it. */
	if (strncmp(buf, "ddprun: error: ", 15) == 0)
		report_note_reason("%s", buf + 15);
	buf[n++] = '\n';
	output_console_write(2, buf, (size_t)n);
}

static void set_status(struct agent *a, int status)
{
	if (!a->status_set) {
		a->status = status;
		a->status_set = true;
	}
}

static void on_handle_closed(uv_handle_t *h)
{
	struct agent *a = h->data;

	a->open_handles--;
}

static void close_handle(struct agent *a, uv_handle_t *h)
{
	if (h->data == a && !uv_is_closing(h))
		uv_close(h, on_handle_closed);
}

static void store_closed(void *arg)
{
	struct agent *a = arg;

	a->open_handles--;
}

static bool coordinated(const struct agent *a);

/* The end: close every handle so that uv_run returns. With a coordinator,
 * the end is its to make: tell it instead (nothing runs here any more). */
static void finish(struct agent *a, int status)
{
	if (a->state == AS_CLOSING)
		return;
	set_status(a, status);
	if (coordinated(a)) {
		a->state = AS_WAITING;
		a->coord.finished(a, a->status, a->coord.arg);
		return;
	}
	a->state = AS_CLOSING;
	hang_close(a);
	agent_fwd_close(a);
	output_console_close();
	close_handle(a, (uv_handle_t *)&a->sigchld);
	close_handle(a, (uv_handle_t *)&a->kill_timer);
	close_handle(a, (uv_handle_t *)&a->stuck_timer);
	close_handle(a, (uv_handle_t *)&a->helper_timer);
	close_handle(a, (uv_handle_t *)&a->store_timer);
	store_lookup_cancel(&a->lookup); /* never waited for: store_lookup.h */
	agent_sig_end(a->stops, true);
	if (a->store != NULL) {
		a->open_handles++;
		agent_store_close(a->store, store_closed, a);
		a->store = NULL;
	}
}

static void kill_all(struct agent *a, int sig)
{
	int i;

	for (i = 0; i < a->job->nproc; i++)
		agent_worker_signal(&a->w[i], sig);
}

static void on_helper_timer(uv_timer_t *t)
{
	struct agent *a = t->data;

	a->helper_timer_on = false;
	a->helpers_waited = true;
	check_progress(a);
}

/* After success: whether what the workers left in their groups is only
 * multiprocessing's helpers, which end on their own (their program is
 * gone: their pipes from it read end-of-file), within a bound. */
static bool wait_for_helpers(struct agent *a)
{
	int i, live = 0;

	if (a->helpers_waited)
		return false;
	for (i = 0; i < a->job->nproc; i++) {
		if (!a->w[i].group_live)
			continue;
		if (!agent_group_helpers_only(&a->w[i]))
			return false;
		live++;
	}
	if (live > 0 && !a->helper_timer_on) {
		uv_timer_start(&a->helper_timer, on_helper_timer, AGENT_MP_HELPER_WAIT_MS, 0);
		a->helper_timer_on = true;
	}
	return live > 0;
}

static void on_stuck_timer(uv_timer_t *t)
{
	struct agent *a = t->data;

	a->stuck_timer_on = false;
	agent_abandon_stuck(a);
	/* No restart with the old workers still holding their GPUs. */
	a->after = AFTER_EXIT;
	if (!a->status_set && a->nfailures == 0)
		set_status(a, 1);
	check_progress(a);
}

/* SIGKILL went to every group: bound the wait for the workers. */
static void mark_killed(struct agent *a)
{
	a->killed = true;
	if (!a->stuck_timer_on) {
		uv_timer_start(&a->stuck_timer, on_stuck_timer, AGENT_STUCK_WAIT_MS, 0);
		a->stuck_timer_on = true;
	}
}

static int update_groups(struct agent *a);

static void on_kill_timer(uv_timer_t *t)
{
	struct agent *a = t->data;
	int i;

	a->kill_timer_on = false;
	/* Groups emptied while another worker still ran were never looked at
	 * (check_progress does once none runs): not "processes left". */
	update_groups(a);
	for (i = 0; i < a->job->nproc; i++) {
		struct agent_worker *w = &a->w[i];

		if (w->running)
			agent_say("worker %d (pid %d) did not stop within the shutdown timeout: "
				  "SIGKILL",
				  i, (int)w->pid);
		else if (w->group_live)
			agent_say("processes left by worker %d did not stop within the shutdown "
				  "timeout: "
				  "SIGKILL",
				  i);
	}
	kill_all(a, SIGKILL);
	mark_killed(a);
	check_progress(a);
}

/* Stop every worker group: sig (+SIGCONT so stopped workers see it), then
 * SIGKILL after the shutdown timeout. Once the workers have had a stop
 * signal in this attempt, a further stop (a halt from the coordinator after
 * this node's own signal or failure) sends them nothing: the grace period
 * and SIGKILL do the rest, and a second signal would cut short what the
 * first began (a checkpoint). on_signal passes each delivery on anew but
 * for Slurm's, which reached the workers itself. */
static void begin_stop(struct agent *a, int sig, enum agent_after after)
{
	/* A worker that exited before the stop signals failed on its own, even
	 * if this loop has not heard of it yet (a stopped ddprun, the other
	 * nodes' end arriving first): it may be the root cause. Not after
	 * Slurm's signal (stop_had already): it reached the workers itself, and
	 * those it ended were stopped, not failed. */
	if (a->state == AS_RUNNING) {
		if (!a->stop_had)
			reap(a);
		agent_failure_note_failing(a);
	}
	if (a->state == AS_RUNNING || a->state == AS_STOPPING) {
		if (sig == SIGKILL) {
			kill_all(a, sig);
			mark_killed(a);
		} else if (!a->stop_had) {
			kill_all(a, sig);
			if (sig != SIGCONT)
				kill_all(a, SIGCONT);
			a->stop_had = true;
		}
	}
	if (a->state == AS_RUNNING) {
		a->state = AS_STOPPING;
		a->after = after;
		uv_timer_start(&a->kill_timer, on_kill_timer, (uint64_t)a->job->shutdown_timeout_ms,
			       0);
		a->kill_timer_on = true;
	} else if (a->state == AS_STOPPING && after != AFTER_DECIDE) {
		a->after = after; /* a signal or agent_stop overrides a restart */
	}
}

static struct agent_worker *find_worker(struct agent *a, pid_t pid)
{
	int i;

	for (i = 0; i < a->job->nproc; i++)
		if (a->w[i].running && a->w[i].pid == pid)
			return &a->w[i];
	return NULL;
}

/* A group whose leader is gone empties when its last member exits; as the
 * child subreaper, ddprun inherits those members and hears of their exits. */
static int update_groups(struct agent *a)
{
	int i, live = 0;

	for (i = 0; i < a->job->nproc; i++) {
		struct agent_worker *w = &a->w[i];

		if (w->group_live && !w->running && kill(-w->pid, 0) != 0 && errno == ESRCH) {
			/* An empty group can never be refilled: forget it for good. */
			w->group_live = false;
			agent_watchdog_forget(a, w->pid);
		}
		live += w->group_live;
	}
	return live;
}

/* Reap every exited child; true when a worker failed on its own while they
 * ran. Failures are recorded while the workers run: after the stop signals,
 * exits are ours to cause, but for those that failed (agent_failure_exit). */
static bool reap(struct agent *a)
{
	bool failed = false;
	size_t before = a->nfailures;
	int wstatus;
	pid_t pid;

	for (;;) {
		struct agent_worker *w;

		pid = waitpid(-1, &wstatus, WNOHANG);
		if (pid < 0 && errno == EINTR)
			continue;
		if (pid <= 0)
			break;
		w = find_worker(a, pid);
		if (w == NULL)
			continue; /* an adopted orphan, the watchdog, a helper of ours */
		w->running = false;
		a->nrunning--;
		if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) {
			/* Before any stop: where it is for a hang's verdict
			 * (hang.c); after, the stop ended it, however well. */
			w->exited_ok = a->state == AS_RUNNING && !a->stop_had;
			continue;
		}
		if (agent_failure_exit(a, w, wstatus))
			failed = true;
	}
	/* The attempt's first failures: tell the other nodes the root cause
	 * among them at once. */
	if (before == 0 && failed && a->has_coord && a->coord.failed != NULL &&
	    !hang_declared(a)) { /* after a hang, coord_hang.c tells the nodes */
		const struct report_entry *e = agent_failure_root(a);

		a->coord.failed(a, e, report_exit_status(e), a->coord.arg);
	}
	return failed;
}

static void on_sigchld(uv_signal_t *h, int signum)
{
	struct agent *a = h->data;

	/* A stop signal that has reached ddprun is handled before the exits
	 * (libuv's one queue for both kept their order): it decides the exit
	 * status, and one from Slurm, which reached every worker, is not
	 * followed by a failure's SIGTERM. */
	agent_sig_drain(a->stops);
	/* Failures seen in the same batch as the first one are reported too.
	 * Python workers printing their stacks after a hang are not hurried. */
	if (reap(a) && a->state == AS_RUNNING && !hang_holds(a)) {
		a->late_failures = !hang_declared(a);
		begin_stop(a, SIGTERM, AFTER_DECIDE);
	}
	check_progress(a);
}

/* A coordinator decides the end (not after its own agent_stop). */
static bool coordinated(const struct agent *a)
{
	return a->has_coord && a->coord.finished != NULL && !a->stop_requested;
}

/* Stop the workers with sig (if any run) and end the job (with a
 * coordinator: tell it, once nothing runs); the exit status has been
 * decided already. */
static void stop_and_end(struct agent *a, int sig)
{
	switch (a->state) {
	case AS_RUNNING:
	case AS_STOPPING:
		begin_stop(a, sig, AFTER_EXIT);
		break;
	case AS_DRAINING:
		a->after = AFTER_EXIT;
		break;
	case AS_IDLE:
	case AS_RDZV:
	case AS_WAITING:
		finish(a, a->status); /* with a coordinator: finished() */
		return;
	case AS_CLOSING:
		break;
	}
	check_progress(a);
}

/* The failures recorded are of an attempt this agent restarts after:
 * one already restarted (in the rendezvous of the next), or one whose stop
 * will decide on a restart that is left. A coordinator decides for a job of
 * several nodes (or a c10d one): once it has (agent_restart), or while it
 * has restarts left to decide on, as the job's restart count is every
 * node's. */
static bool failure_restarts(const struct agent *a)
{
	bool left = a->world.restart_count < a->job->max_restarts;

	if (a->state == AS_RDZV)
		return true;
	if (a->has_coord)
		return a->after == AFTER_RESTART || left;
	return a->after == AFTER_DECIDE && left;
}

/* The step's slurmstepd sent again the stop signal it sent before (22.05
 * does now and then, at the time limit; srun passes a double Ctrl-C on
 * each time it is pressed): the stop it began goes on, and that is all.
 * Where Slurm signals ddprun alone, the workers would get it twice; a
 * SIGINT is not the user's second Ctrl-C (srun wants two within a second
 * before it passes one on, and ends the step itself after); and once the
 * workers have exited, it is no further signal to this node's coordinator,
 * which would stop waiting for the other nodes (coord_leave.c: hurry) and
 * close the store under them. */
static void on_slurms_repeat(struct agent *a, const char *name, bool by_stepd)
{
	if (a->nrunning == 0) {
		agent_say("received %s from Slurm again: this node is ending for it already (a "
			  "repeat, not a further signal)",
			  name);
		return;
	}
	agent_say("received %s from Slurm again: the workers are stopping already (not sent again)",
		  name);
	/* As after its first (on_signal): Slurm's reached the workers again,
	 * and one stopped meanwhile must run to see it. */
	if (by_stepd && (a->state == AS_RUNNING || a->state == AS_STOPPING))
		kill_all(a, SIGCONT);
}

/* A signal of --signals-to-handle. by_stepd: the step's slurmstepd sent it
 * to every process of the step, these workers too (agent_sig.h): the stop
 * goes on as for any other (grace, SIGKILL, 128+sig), but the workers are
 * not sent it again. again: the step's slurmstepd sends the signal it sent
 * before in this attempt, which began the stop (a signal always ends the
 * job): Slurm's repeat, on_slurms_repeat, whether the workers had the first
 * or not (none ran when it came: stop_had is no test of it). */
static void on_signal(void *arg, int sig, enum agent_sig_from from)
{
	struct agent *a = arg;
	bool by_stepd = from == AGENT_SIG_STEPD_ALL;
	bool again = from != AGENT_SIG_ANYONE && a->stepd_sig == sig;
	int fwd = sig;
	char name[32];

	signame_of(sig, name, sizeof(name));
	if (again) { /* before it counts as a second SIGINT or a further signal */
		on_slurms_repeat(a, name, by_stepd);
		return;
	}
	if (from != AGENT_SIG_ANYONE)
		a->stepd_sig = sig;
	/* Every worker succeeded; only their multiprocessing helpers were
	 * being given time to end: the job is over, and stays a success (a
	 * wrapper that requeues on 143 must not requeue it). Not with several
	 * nodes: the others may still run, and the signal stops them too. */
	if (a->helper_timer_on && !a->has_coord) {
		agent_say("received %s: the workers have all succeeded; not waiting for the Python "
			  "multiprocessing helpers they left",
			  name);
		a->helpers_waited = true;
		check_progress(a);
		return;
	}
	if (!a->signalled)
		a->signo = sig;
	/* torchrun's agent raises SignalException, which its @record writes. */
	report_note_reason("ddprun (pid %d) on host %s received %s", (int)getpid(),
			   a->job->hostname, name);
	a->signalled = true;
	a->late_failures = false; /* exits from here on are the signal's */
	/* A worker that died before this signal came (drained before the exits
	 * are reaped, it is handled first) failed on its own and stays the root
	 * cause of the exit status. Not for Slurm's (begin_stop). */
	if (!by_stepd && a->state == AS_RUNNING)
		reap(a);
	if (sig == SIGINT && ++a->sigints >= 2) {
		agent_say("second SIGINT: killing every worker now");
		fwd = SIGKILL;
	} else if (a->nrunning > 0 && by_stepd) {
		agent_say("received %s from Slurm: stopping the workers (proctrack/linuxproc "
			  "signals every process of the step, this node's workers included: not "
			  "sent again)",
			  name);
	} else if (a->nrunning > 0 && a->state == AS_RUNNING) {
		agent_say("received %s: stopping the workers", name);
	} else if (a->nrunning > 0) {
		agent_say("received %s: passing it on to the workers, which are stopping already",
			  name);
	} else { /* in the rendezvous, or between attempts */
		agent_say("received %s: stopping (no worker is running)", name);
	}
	/* A failure already seen stays the root cause of the exit status if it
	 * ended the job; one this agent restarts after (or has: between
	 * attempts) did not, the signal does (a wrapper that requeues on 143
	 * must see a preemption that came during restarts as one). */
	if (a->nfailures > 0 && !failure_restarts(a))
		set_status(a, report_exit_status(agent_failure_root(a)));
	set_status(a, 128 + sig);
	/* Slurm's reached the workers itself (only SIGCONT goes, for a worker
	 * stopped meanwhile to see it); anyone else's is passed on even if they
	 * had one: whoever sent it meant it. */
	if (by_stepd && fwd != SIGKILL && (a->state == AS_RUNNING || a->state == AS_STOPPING))
		kill_all(a, SIGCONT);
	a->stop_had = by_stepd;
	stop_and_end(a, fwd);
}

static void start_attempt(struct agent *a)
{
	char err[512];
	int k, rc;

	/* A stop signal that came before the workers start ends the job first:
	 * Slurm's delivery of it would not reach workers started after it. */
	agent_sig_drain(a->stops);
	if (a->state != AS_RDZV)
		return;
	agent_failure_clear(a);
	a->killed = false;
	a->stop_had = false;
	a->helpers_waited = false;
	a->stepd_sig = 0;
	a->late_failures = false;
	/* With a coordinator, an attempt that could not start does not decide
	 * the end of a later one. */
	if (a->has_coord && !a->signalled)
		a->status_set = false;
	rc = logdir_attempt(&a->logdir, a->world.restart_count, a->job->nproc, err, sizeof(err));
	if (rc == 0)
		rc = agent_dup_attempt(a, err, sizeof(err));
	if (rc != 0) {
		agent_say("error: %s", err);
		finish(a, 1);
		return;
	}
	a->state = AS_RUNNING;
	hang_attempt(a);
	for (k = 0; k < a->job->nproc; k++) {
		rc = agent_worker_start(a, &a->w[k], err, sizeof(err));
		if (rc != 0) {
			agent_say("error: %s", err);
			a->failed = true;
			set_status(a, 1);
			begin_stop(a, SIGTERM, AFTER_EXIT);
			break;
		}
	}
	check_progress(a);
}

static void rendezvous(struct agent *a)
{
	struct workenv_world w = {0};

	a->state = AS_RDZV;
	if (a->has_coord && a->coord.rendezvous != NULL) {
		a->coord.rendezvous(a, a->world.restart_count, a->coord.arg);
		return;
	}
	/* PyTorch 2.x's env:// on an agent store uses no per-attempt prefix
	 * (1.x had /worker/attempt_N): a restart's workers would read the dead
	 * attempt's keys (gloo's peer addresses) and fail to connect. Each
	 * attempt gets an empty store, as if it were a new TCPStore. */
	if (a->world.restart_count > 0 && a->store != NULL &&
	    store_server_clear(a->store, NULL) != 0) {
		agent_say("error: out of memory");
		a->failed = true;
		finish(a, 1);
		return;
	}
	/* One node: the world is this node. */
	w.group_rank = 0;
	w.group_world_size = 1;
	w.rank_offset = 0;
	w.world_size = a->job->nproc;
	w.role_rank_offset = 0;
	w.role_world_size = a->job->nproc;
	w.restart_count = a->world.restart_count;
	agent_store_world(a, &w);
	agent_rendezvous_done(a, 0, &w);
}

void agent_rendezvous_done(struct agent *a, int rc, const struct workenv_world *w)
{
	if (a->state != AS_RDZV)
		return;
	if (rc != 0) {
		agent_say("rendezvous failed: %s", strerror(-rc));
		a->failed = true;
		finish(a, 1);
		return;
	}
	free(a->master_addr);
	a->world = *w;
	a->master_addr = strdup(w->master_addr ? w->master_addr : "127.0.0.1");
	if (a->master_addr == NULL) {
		finish(a, 1);
		return;
	}
	a->world.master_addr = a->master_addr;
	start_attempt(a);
}

static void print_report(struct agent *a)
{
	agent_report(a, NULL, 0, 0, NULL);
}

static void say_removed(const char *name, void *arg)
{
	agent_say("removed /dev/shm/%s, left behind by this node's workers", name);
}

/* Every worker has exited and every stream is closed: what next? */
static void attempt_over(struct agent *a)
{
	int status = 0;

	hang_report(a); /* a hang's verdict comes before the failure summary */
	/* Segments of workers that all died during ddp_init (shmsweep.h). */
	if (a->job->shm_nonce != NULL)
		shmsweep_remove("/dev/shm", a->job->shm_nonce, say_removed, NULL);
	if (a->nfailures > 0) {
		const struct report_entry *root = agent_failure_root(a);

		status = report_exit_status(root);
		if (a->after == AFTER_DECIDE && !a->has_coord &&
		    a->world.restart_count < a->job->max_restarts) {
			a->world.restart_count++;
			agent_say("worker group failed (rank %d: exit status %d); restart %d of %d",
				  root->global_rank, status, a->world.restart_count,
				  a->job->max_restarts);
			rendezvous(a);
			return;
		}
	}
	if (a->after == AFTER_RESTART) {
		a->world.restart_count++;
		rendezvous(a);
		return;
	}
	if (a->nfailures > 0) {
		a->failed = true;
		if (!a->has_coord) /* a coordinator reports for the whole job */
			print_report(a);
	}
	/* A status set by a signal, agent_stop or agent_halt is final. A
	 * coordinator may start another attempt: leave the status open then. */
	if (a->status_set)
		status = a->status;
	else if (!a->has_coord)
		set_status(a, status);
	if (status != 0)
		a->failed = true;
	if (coordinated(a)) {
		a->state = AS_WAITING;
		a->coord.finished(a, status, a->coord.arg);
		return;
	}
	finish(a, status);
}

void agent_stream_closed(struct output_stream *s)
{
	struct agent *a = s->data;

	a->open_streams--;
	check_progress(a);
}

void agent_dump_over(struct agent *a)
{
	check_progress(a);
}

static void check_progress(struct agent *a)
{
	int i;

	if ((a->state == AS_RUNNING || a->state == AS_STOPPING) && a->nrunning == 0) {
		/* A hang's aborts ended the workers (no failure's stop followed
		 * their exits, so as not to hurry their stacks): what they left
		 * in their groups is stopped as after a failure, SIGTERM first
		 * (a DataLoader's processes clean their semaphores up then), not
		 * killed as after a success. */
		if (a->state == AS_RUNNING && hang_declared(a) && update_groups(a) > 0)
			begin_stop(a, SIGTERM, AFTER_EXIT);
		/* Stopping: give what the workers left in their groups the same
		 * grace (until the groups are empty or the kill timer fires). */
		if (update_groups(a) > 0 && a->state == AS_STOPPING && !a->killed)
			return;
		/* Success: Python's multiprocessing helpers are not killed while
		 * they end on their own, the resource tracker removing the
		 * shared memory its program leaked (their exits are SIGCHLDs
		 * here: ddprun is their subreaper). */
		if (a->state == AS_RUNNING && !hang_declared(a) && wait_for_helpers(a))
			return;
		if (a->helper_timer_on) {
			uv_timer_stop(&a->helper_timer);
			a->helper_timer_on = false;
		}
		if (a->kill_timer_on) {
			uv_timer_stop(&a->kill_timer);
			a->kill_timer_on = false;
		}
		if (a->stuck_timer_on) {
			uv_timer_stop(&a->stuck_timer);
			a->stuck_timer_on = false;
		}
		/* Whatever is left once every worker is gone is an orphan now. */
		for (i = 0; i < a->job->nproc; i++) {
			struct agent_worker *w = &a->w[i];

			if (w->group_live) {
				/* After a stop they had its signal and grace; after
				 * success nothing asked them to end: say so. */
				if (a->state == AS_RUNNING)
					agent_say_group_left(a, w);
				kill(-w->pid, SIGKILL);
				w->group_live = false;
				agent_watchdog_forget(a, w->pid);
			}
		}
		agent_kill_escaped(a);
		if (a->state == AS_RUNNING)
			a->after = AFTER_EXIT;
		a->state = AS_DRAINING;
		for (i = 0; i < a->job->nproc; i++) {
			output_stream_finish(&a->w[i].stream[0]);
			output_stream_finish(&a->w[i].stream[1]);
		}
	}
	/* A stack dump's ranks come before the end's summary (and a hang's
	 * verdict after them): it is bounded (HANG_STACK_TIMEOUT_MS). */
	if (a->state == AS_DRAINING && a->open_streams == 0 && !hang_dump_running())
		attempt_over(a);
}

/* A stop signal that reached ddprun before the coordinator's word is handled
 * first: one from Slurm has reached the workers, which must not get the
 * coordinator's SIGTERM on top of it (the store's news can come in the same
 * loop iteration, before the signal's wakeup). */
void agent_stop(struct agent *a, int status)
{
	agent_sig_drain(a->stops);
	/* The coordinator's word is final, even over a local failure's status. */
	a->status = status;
	a->status_set = true;
	a->stop_requested = true;
	stop_and_end(a, SIGTERM);
}

void agent_halt(struct agent *a, int status, bool for_failure)
{
	agent_sig_drain(a->stops); /* as agent_stop */
	/* Not after a signal here (on_signal), nor a hang (its aborts are its
	 * effect). */
	if (for_failure && a->state == AS_RUNNING && !a->signalled && !hang_declared(a))
		a->late_failures = true;
	a->status = status;
	a->status_set = true;
	stop_and_end(a, SIGTERM);
}

bool agent_signalled(const struct agent *a)
{
	return a->signalled;
}

const char *agent_stop_words(const struct agent *a)
{
	if (a->nrunning == 0)
		return "the job ends";
	return a->state == AS_RUNNING ? "stopping the workers" : "the workers are stopping";
}

int agent_signal(const struct agent *a)
{
	return a->signalled ? a->signo : 0;
}

void agent_restart(struct agent *a)
{
	switch (a->state) {
	case AS_RUNNING:
	case AS_STOPPING:
		begin_stop(a, SIGTERM, AFTER_RESTART);
		break;
	case AS_DRAINING:
		a->after = AFTER_RESTART;
		break;
	case AS_WAITING:
		a->world.restart_count++;
		rendezvous(a);
		break;
	default:
		break;
	}
	check_progress(a);
}

static void open_store(struct agent *a);

static void on_store_retry(uv_timer_t *t)
{
	open_store(t->data);
}

static void store_failed(struct agent *a, const char *err)
{
	agent_say("error: %s", err);
	a->failed = true;
	finish(a, 1);
}

/* The store's host looked up (r NULL: --master-addr is an address). A
 * lookup that fails only for now (no resolver answers) is tried again for
 * join_timeout, as several nodes do (coord_start.c): said once at once, and
 * with how long when it ends the job. */
static void store_host_found(void *arg, const struct store_lookup_result *r)
{
	struct agent *a = arg;
	int gai = r != NULL ? r->gai : 0;
	char err[512];
	int64_t left;

	a->lookup = NULL;
	if (a->state != AS_RDZV) /* stopped meanwhile */
		return;
	if (gai == 0) {
		if (agent_store_open(a, r, err, sizeof(err)) != 0)
			store_failed(a, err);
		else
			rendezvous(a);
		return;
	}
	agent_store_gai_error(a, gai, err, sizeof(err));
	left = a->store_deadline_ms - util_now_ms();
	if (gai == EAI_AGAIN && left > 0) {
		if (!a->store_said)
			agent_say("%s; retrying for up to %.0f s (join_timeout)", err,
				  (double)left / 1000.0);
		a->store_said = true;
		uv_update_time(a->loop); /* timed from now */
		uv_timer_start(
			&a->store_timer, on_store_retry,
			(uint64_t)(left < JOB_RESOLVE_RETRY_MS ? left : JOB_RESOLVE_RETRY_MS), 0);
		return;
	}
	if (gai == EAI_AGAIN && a->store_said) /* for join_timeout, to its end */
		snprintf(err + strlen(err), sizeof(err) - strlen(err),
			 ", for %.0f s (join_timeout)",
			 (double)a->job->rdzv.join_timeout_ms / 1000.0);
	store_failed(a, err);
}

/* One node hosts its store at --master-addr, looked up off the loop. */
static void open_store(struct agent *a)
{
	char err[512];
	int rc;

	if (a->state != AS_RDZV)
		return;
	rc = agent_store_lookup(a, store_host_found);
	if (rc == 1) {
		store_host_found(a, NULL);
	} else if (rc < 0) {
		snprintf(err, sizeof(err), "cannot look the rendezvous store's host up: %s",
			 strerror(-rc));
		store_failed(a, err);
	}
}

static int init_handle(struct agent *a, uv_handle_t *h, int rc)
{
	if (rc == 0) {
		h->data = a;
		a->open_handles++;
	}
	return rc;
}

/* Catch the signals to handle (job_caught_signals: not one ignored at
 * startup). */
static int watch_signals(struct agent *a)
{
	int sigs[CLI_MAX_SIGNALS];
	int n = job_caught_signals(a->job, sigs);

	return agent_sig_open(a->loop, sigs, n, on_signal, a, &a->stops);
}

int agent_start(struct agent *a)
{
	int rc;

	/* Orphans of the workers become ddprun's children: their exits are
	 * events, and ddprun knows when a worker's process group is empty. */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	rc = init_handle(a, (uv_handle_t *)&a->sigchld, uv_signal_init(a->loop, &a->sigchld));
	if (rc == 0)
		rc = uv_signal_start(&a->sigchld, on_sigchld, SIGCHLD);
	if (rc == 0)
		rc = init_handle(a, (uv_handle_t *)&a->kill_timer,
				 uv_timer_init(a->loop, &a->kill_timer));
	if (rc == 0)
		rc = init_handle(a, (uv_handle_t *)&a->stuck_timer,
				 uv_timer_init(a->loop, &a->stuck_timer));
	if (rc == 0)
		rc = init_handle(a, (uv_handle_t *)&a->helper_timer,
				 uv_timer_init(a->loop, &a->helper_timer));
	if (rc == 0)
		rc = init_handle(a, (uv_handle_t *)&a->store_timer,
				 uv_timer_init(a->loop, &a->store_timer));
	if (rc == 0)
		rc = watch_signals(a);
	if (rc == 0)
		rc = agent_fwd_start(a);
	if (rc == 0 && hang_start(a) != 0)
		agent_say("warning: hang detection is off (out of memory)");
	if (rc != 0) {
		agent_say("cannot set up the event loop: %s", uv_strerror(rc));
		finish(a, 1);
		return rc;
	}
	if (a->has_coord) {
		rendezvous(a);
		return 0;
	}
	a->state = AS_RDZV; /* a stop signal while the store waits ends the job */
	a->store_deadline_ms = util_now_ms() + a->job->rdzv.join_timeout_ms;
	open_store(a);
	return 0;
}
