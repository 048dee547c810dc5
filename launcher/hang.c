/* hang: the hang monitor, the on-demand dump and the end of a hung job (see
 * hang.h). */
#include "hang.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>

#include "agent_int.h"
#include "proc_info.h"
#include "workenv.h"
#include "progress_slot.h"

/* CPU time counts as work from this share of one CPU up (in percent): an
 * idle runtime's background threads (gloo's event loop takes about 2%)
 * must not make a hung PyTorch job look busy for ever. */
#define HANG_CPU_WORK_PCT 10

struct hang_sample {
	bool valid;
	uint64_t entered, completed, ticks;
	uint64_t at_ms; /* when it was taken */
	int64_t out_ms;
	int64_t mtime_ns;
};

/* Whether a rank used at least HANG_CPU_WORK_PCT of a CPU between o and n. */
static bool cpu_worked(const struct hang_sample *o, const struct hang_sample *n)
{
	static long hz;
	uint64_t used_ms, span_ms = n->at_ms - o->at_ms;

	if (hz <= 0 && (hz = sysconf(_SC_CLK_TCK)) <= 0)
		hz = 100;
	if (n->ticks <= o->ticks)
		return false;
	used_ms = (n->ticks - o->ticks) * 1000u / (uint64_t)hz;
	return used_ms * 100u >= span_ms * HANG_CPU_WORK_PCT;
}

struct hang {
	struct agent *a;
	int64_t timeout_ms; /* 0: no hang detection */
	uv_timer_t tick;
	bool tick_init;
	uv_signal_t usr2;
	bool usr2_init;
	int prog_fd;
	char prog_path[64];
	struct ddpi_progress_slot *slots;
	size_t map_len;
	struct hang_sample *s;
	struct hang_where *where;
	uint64_t last_progress_ms;
	bool fired;	/* this attempt's hang was declared */
	bool dumping;	/* a dump of ours runs (hang_dump_start) */
	bool closed;	/* hang_close: the agent is ending */
	bool reported;	/* its verdict was printed */
	bool holding;	/* Python workers print their stacks */
	bool for_hang;	/* the dump under way is for another node's hang */
	bool ask_again; /* this node's hang request failed during that dump */
	bool *aborted;
	uint64_t hold_until_ms;
	char why[160];
	struct hang_ftimer *ft;
	struct hang_remote remote; /* request NULL: one node */
	void (*done)(void *arg, const struct hang_where *w, size_t n);
	void *done_arg;
};

static void on_closed(uv_handle_t *h)
{
	(void)h;
}

/* The node's progress file: a memfd the workers reopen through /proc (so
 * nothing is ever left on a disk or in /dev/shm, whatever ends ddprun). */
static int open_progress(struct hang *h, int nproc)
{
	long page = sysconf(_SC_PAGESIZE);
	size_t len = (size_t)nproc * DDPI_PROGRESS_SLOT;
	void *p;

	len = (len + (size_t)page - 1) / (size_t)page * (size_t)page;
	h->prog_fd = memfd_create("ddprun-progress", MFD_CLOEXEC);
	if (h->prog_fd < 0)
		return -errno;
	if (ftruncate(h->prog_fd, (off_t)len) != 0)
		return -errno;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, h->prog_fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	h->slots = p;
	h->map_len = len;
	snprintf(h->prog_path, sizeof(h->prog_path), "/proc/%d/fd/%d", (int)getpid(), h->prog_fd);
	return 0;
}

/* Read local rank lr's slot into w, if the worker pid or a process it
 * started wrote it; *who (who may be NULL): that process (0: none). */
static bool slot_read(const struct hang *h, int lr, pid_t pid, struct hang_where *w, pid_t *who)
{
	const struct ddpi_progress_slot *s;

	w->libddp = false;
	w->in = w->init = false;
	w->entered = w->completed = 0;
	w->op = w->wait = 0;
	if (who != NULL)
		*who = 0;
	if (h->slots == NULL)
		return false;
	s = &h->slots[lr];
	uint32_t magic = __atomic_load_n(&s->magic, __ATOMIC_ACQUIRE);
	int32_t owner = __atomic_load_n(&s->pid, __ATOMIC_RELAXED);

	if (magic != DDPI_PROGRESS_MAGIC && magic != DDPI_PROGRESS_MAGIC_EARLY)
		return false;
	/* The worker, or a process it started (a wrapper script's program):
	 * not an earlier attempt's, whose pid may have been reused. */
	if (owner != (int32_t)pid && !proc_descends((pid_t)owner, pid, 8))
		return false;
	w->libddp = true;
	if (who != NULL)
		*who = (pid_t)owner;
	w->completed = __atomic_load_n(&s->completed, __ATOMIC_ACQUIRE);
	w->entered = __atomic_load_n(&s->entered, __ATOMIC_ACQUIRE);
	w->op = __atomic_load_n(&s->op, __ATOMIC_RELAXED);
	w->wait = __atomic_load_n(&s->wait, __ATOMIC_RELAXED);
	w->in = w->entered > w->completed;
	w->init = !w->in && __atomic_load_n(&s->phase, __ATOMIC_ACQUIRE) == DDPI_PHASE_INIT;
	return true;
}

/* /proc state T or t: a stop signal (^Z) or a tracer holds it. */
static bool is_stopped(pid_t pid)
{
	struct proc_info pi;

	return proc_info_read(pid, &pi) == 0 && (pi.state == 'T' || pi.state == 't');
}

void hang_where_local(struct agent *a, struct hang_where *w)
{
	int i;

	for (i = 0; i < a->job->nproc; i++) {
		pid_t who;

		w[i] = (struct hang_where){.rank = a->world.rank_offset + i};
		/* A worker that exited 0 while the job ran (before any stop,
		 * agent.c): the others may wait for it. Any other end (a
		 * failure, the stop's signals, however well a worker ended on
		 * them, the hang's SIGABRT) is the job's stop, not a place. */
		if (!a->w[i].running) {
			w[i].exited = a->w[i].exited_ok;
			if (!w[i].exited)
				w[i].rank = -1;
			continue;
		}
		slot_read(a->hang, i, a->w[i].pid, &w[i], &who);
		/* The program under a wrapper (sh -c, a Python launcher) is
		 * the rank: stopped if it is, or the worker itself. */
		w[i].stopped = is_stopped(a->w[i].pid) ||
			       (who > 0 && who != a->w[i].pid && is_stopped(who));
	}
}

/* The newest modification time of a worker's log files (for streams that go
 * straight to a file, which the agent does not see). */
static int64_t log_mtime(struct agent *a, int lr)
{
	static const char *const names[2] = {"stdout.log", "stderr.log"};
	int64_t best = 0;
	int s;

	if (a->logdir.flat)
		return 0;
	for (s = 0; s < 2; s++) {
		char *p = logdir_path(&a->logdir, lr, names[s]);
		struct stat st;

		if (p != NULL && stat(p, &st) == 0) {
			int64_t t = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;

			if (t > best)
				best = t;
		}
		free(p);
	}
	return best;
}

/* A console whose reader is behind (a pager, Ctrl-S, a slow link) holds
 * its workers' output: whether a thread of w's waits in a write into a
 * pipe of w's that ddprun does not read for that reader (then w is not
 * hung; one that waits elsewhere may be). */
static bool waits_on_console(struct agent_worker *w)
{
	char names[2][64];
	const char *links[2];
	int k, n = 0;

	for (k = 0; k < 2; k++)
		if (output_paused(&w->stream[k]) &&
		    output_pipe_name(&w->stream[k], names[n], sizeof(names[n]))) {
			links[n] = names[n];
			n++;
		}
	return n > 0 && proc_tree_writes_to(w->pid, 64, links, n);
}

/* One sample: true when some rank made progress since the last one. */
static bool sample(struct hang *h)
{
	struct agent *a = h->a;
	bool progress = false;
	int i;

	for (i = 0; i < a->job->nproc; i++) {
		struct agent_worker *w = &a->w[i];
		struct hang_sample n = {.valid = true};
		struct hang_sample *o = &h->s[i];
		struct hang_where wh;
		bool spinning;

		if (!w->running)
			continue;
		slot_read(h, i, w->pid, &wh, NULL);
		n.entered = wh.entered;
		n.completed = wh.completed;
		n.ticks = proc_tree_ticks(w->pid, 64);
		n.at_ms = uv_now(a->loop);
		n.out_ms = hang_last_output_ms(w);
		n.mtime_ns = log_mtime(a, i);
		/* Inside a collective or ddp_init, CPU time is waiting, not work. */
		spinning = wh.libddp && (wh.in || wh.init);
		if (!o->valid || n.entered != o->entered || n.completed != o->completed ||
		    n.out_ms != o->out_ms || n.mtime_ns != o->mtime_ns ||
		    (!spinning && cpu_worked(o, &n)) || waits_on_console(w))
			progress = true;
		*o = n;
	}
	return progress;
}

static void finish_hang(struct hang *h);

/* The hang's dump is printed: give Python workers their time, or end. */
static void after_dump(struct agent *a, int naborted, void *arg)
{
	struct hang *h = arg;

	h->dumping = false;
	if (h->closed)
		return;
	if (naborted > 0) {
		h->holding = true;
		h->hold_until_ms = uv_now(a->loop) + HANG_ABORT_GRACE_MS;
		return;
	}
	finish_hang(h);
}

/* This node's ranks only: their dump, their verdict, and the hang's end. */
static void dump_here(struct hang *h)
{
	h->dumping = true;
	if (hang_dump_start(h->a, h->why, h->aborted, h->where, after_dump, h) != 0) {
		h->dumping = false;
		finish_hang(h);
	}
}

static void fire(struct hang *h)
{
	struct agent *a = h->a;

	h->fired = true;
	snprintf(h->why, sizeof(h->why), "no rank made progress for %.1f s (--hang-timeout %g)",
		 (double)(uv_now(a->loop) - h->last_progress_ms) / 1000.0,
		 (double)h->timeout_ms / 1000.0);
	/* The hang decides the exit status, whatever the dump makes happen. */
	a->status = HANG_EXIT;
	a->status_set = true;
	a->failed = true;
	/* Several nodes: every node dumps its ranks; this one's verdict and end
	 * come from coord_hang.c. */
	if (h->remote.request != NULL && h->remote.request(h->remote.arg, true, h->why) == 0) {
		h->reported = true;
		return;
	}
	dump_here(h);
}

void hang_ask_failed(struct agent *a)
{
	struct hang *h = a->hang;

	if (h == NULL || !h->fired || !h->reported || a->state != AS_RUNNING)
		return;
	/* Another node's request is being dumped here (this node's hang was
	 * found as it came): ours goes once it is over, or the hang is lost;
	 * unless that request is a hang's, whose requester ends the job. */
	if (h->dumping || h->holding) {
		h->ask_again = !h->for_hang;
		return;
	}
	agent_say("the job hung; dumping this node's ranks only");
	h->reported = false;
	dump_here(h);
}

/* The dump under way is over: this node's hang, if its request failed
 * meanwhile (hang_ask_failed). */
static void ask_again(struct hang *h)
{
	if (!h->ask_again)
		return;
	h->ask_again = false;
	hang_ask_failed(h->a);
}

/* Every aborted worker is gone and its output read, or the grace is over. */
static bool hold_over(struct hang *h)
{
	struct agent *a = h->a;
	int i;

	if (uv_now(a->loop) >= h->hold_until_ms)
		return true;
	for (i = 0; i < a->job->nproc; i++)
		if (h->aborted[i] &&
		    (a->w[i].running || a->w[i].stream[0].open || a->w[i].stream[1].open))
			return false;
	return true;
}

/* The hang's verdict, once per hang: after the Python stacks, before the
 * failure summary. */
static void print_verdict(struct hang *h)
{
	struct agent *a = h->a;
	char *verdict, head[256];
	int culprits;
	int n;

	if (!h->fired || h->reported)
		return;
	h->reported = true;
	verdict = hang_verdict(h->where, (size_t)a->job->nproc, "  ", &culprits);
	n = snprintf(head, sizeof(head), "ddprun: the job hung: %s; stopping it (exit status %d)\n",
		     h->why, HANG_EXIT);
	hang_rule();
	output_console_write(2, head, (size_t)n);
	if (verdict != NULL)
		output_console_write(2, verdict, strlen(verdict));
	hang_rule();
	free(verdict);
}

static void finish_hang(struct hang *h)
{
	h->holding = false;
	print_verdict(h);
	/* A signal or the end may have come meanwhile: theirs is the stop.
	 * With several nodes the coordinator ends the round once the workers
	 * are gone (agent_stop is its own word: it would not be told). */
	if (h->a->state == AS_RUNNING && h->a->has_coord)
		agent_halt(h->a, HANG_EXIT, false);
	else if (h->a->state == AS_RUNNING)
		agent_stop(h->a, HANG_EXIT);
}

/* A remote dump's positions to coord_hang.c: those taken as it began, the
 * hang's (the ranks it aborted are gone since, and would be no place). */
static void remote_done(struct hang *h)
{
	void (*done)(void *, const struct hang_where *, size_t) = h->done;

	h->holding = false;
	h->done = NULL;
	if (done != NULL)
		done(h->done_arg, h->where, (size_t)h->a->job->nproc);
	ask_again(h);
}

void hang_report(struct agent *a)
{
	struct hang *h = a->hang;

	if (h == NULL)
		return;
	/* Every worker ended before the hold did (the aborted ones among
	 * them): a remote dump's positions go now, before this node's end. */
	if (h->done != NULL)
		remote_done(h);
	h->holding = false;
	print_verdict(h);
}

static void on_tick(uv_timer_t *t)
{
	struct hang *h = t->data;
	struct agent *a = h->a;
	uint64_t now = uv_now(a->loop);
	bool progress;

	if (h->dumping)
		return; /* after_dump goes on */
	if (h->holding) {
		if (!hold_over(h))
			return;
		if (h->done != NULL) { /* a remote dump: coord_hang.c goes on */
			remote_done(h);
			return;
		}
		finish_hang(h);
		return;
	}
	/* No worker runs while the agent waits for what they left (their
	 * multiprocessing helpers, after success): nothing can hang. */
	if (a->state != AS_RUNNING || h->fired || h->timeout_ms <= 0 || a->nrunning == 0)
		return;
	progress = sample(h);
	if (progress)
		h->last_progress_ms = now;
	/* Several nodes: another node's progress is the job's too (a node
	 * waiting in a collective for a node that computes is not hung). */
	if (h->remote.tick != NULL) {
		uint64_t other = h->remote.tick(h->remote.arg, progress);

		if (other > h->last_progress_ms)
			h->last_progress_ms = other;
	}
	if (!progress && (int64_t)(now - h->last_progress_ms) >= h->timeout_ms)
		fire(h);
}

static void after_usr2(struct agent *a, int naborted, void *arg)
{
	struct hang *h = arg;
	int culprits;
	char *verdict = hang_verdict(h->where, (size_t)a->job->nproc, "ddprun:   ", &culprits);

	/* The workers may have ended (or failed) during the dump: the job
	 * ends, or restarts. */
	agent_say("where the ranks are (%s):",
		  a->state == AS_RUNNING ? "the job goes on" : "the workers have stopped");
	if (verdict != NULL)
		output_console_write(2, verdict, strlen(verdict));
	free(verdict);
}

#define USR2_BUSY   "SIGUSR2: a stack dump is already being made"
#define USR2_ENDING "SIGUSR2: the job hung and its stacks were dumped; it is ending"

static void on_usr2(uv_signal_t *s, int sig)
{
	struct hang *h = s->data;
	struct agent *a = h->a;
	int rc;

	if (a->state != AS_RUNNING && a->state != AS_STOPPING) {
		agent_say("SIGUSR2: no workers are running");
		return;
	}
	rc = h->remote.request != NULL
		     ? h->remote.request(h->remote.arg, false, "on demand (SIGUSR2)")
		     : -ENOTCONN;
	if (rc == 0)
		return;
	if (rc == -EALREADY)
		agent_say("%s", USR2_ENDING);
	else if (rc == -EBUSY)
		agent_say("%s", USR2_BUSY);
	else
		hang_dump_on_demand(a);
}

void hang_dump_on_demand(struct agent *a)
{
	struct hang *h = a->hang;

	if (h == NULL || (a->state != AS_RUNNING && a->state != AS_STOPPING))
		return;
	/* Not over the hang's dump: its positions (h->where) are the verdict's. */
	if (h->fired)
		agent_say("%s", USR2_ENDING);
	else if (h->dumping || h->holding ||
		 hang_dump_start(a, "on demand (SIGUSR2)", NULL, h->where, after_usr2, h) != 0)
		agent_say("%s", USR2_BUSY);
}

/* SIGUSR2 is ours unless the user asked ddprun to forward it (to stop the
 * job, or to notify the workers: agent_fwd.h). */
static bool usr2_free(const struct agent *a)
{
	int i;

	for (i = 0; i < a->job->nsignals; i++)
		if (a->job->signals[i] == SIGUSR2)
			return false;
	for (i = 0; i < a->job->nfwd_signals; i++)
		if (a->job->fwd_signals[i] == SIGUSR2)
			return false;
	return true;
}

int hang_start(struct agent *a)
{
	struct hang *h = calloc(1, sizeof(*h));
	int rc;

	if (h == NULL)
		return -ENOMEM;
	h->a = a;
	h->prog_fd = -1;
	h->timeout_ms = a->job->hang_timeout_ms;
	h->s = calloc((size_t)a->job->nproc, sizeof(*h->s));
	h->where = calloc((size_t)a->job->nproc, sizeof(*h->where));
	h->aborted = calloc((size_t)a->job->nproc, sizeof(*h->aborted));
	a->hang = h;
	if (h->s == NULL || h->where == NULL || h->aborted == NULL) {
		hang_destroy(a);
		return -ENOMEM;
	}
	rc = open_progress(h, a->job->nproc);
	if (rc != 0) {
		agent_say("warning: no collective progress file (%s): hang reports cannot say "
			  "where libddp ranks are",
			  strerror(-rc));
		if (h->slots == NULL && h->prog_fd >= 0) {
			close(h->prog_fd);
			h->prog_fd = -1;
		}
	}
	if (uv_timer_init(a->loop, &h->tick) == 0) {
		h->tick.data = h;
		h->tick_init = true;
	}
	if (usr2_free(a) && uv_signal_init(a->loop, &h->usr2) == 0) {
		h->usr2.data = h;
		h->usr2_init = true;
		uv_signal_start(&h->usr2, on_usr2, SIGUSR2);
		/* A ddprun waiting for its workers must not keep the loop alive
		 * for this alone. */
		uv_unref((uv_handle_t *)&h->usr2);
	}
	rc = hang_ftimer_start(a, &h->ft);
	if (rc != 0)
		agent_say("warning: TORCHELASTIC_ENABLE_FILE_TIMER: cannot set up the timer file: "
			  "%s",
			  strerror(-rc));
	return 0;
}

void hang_attempt(struct agent *a)
{
	struct hang *h = a->hang;
	int i;

	if (h == NULL)
		return;
	if (h->slots != NULL)
		memset(h->slots, 0, h->map_len);
	for (i = 0; i < a->job->nproc; i++)
		h->s[i].valid = false;
	h->fired = false;
	h->reported = false;
	h->holding = false;
	h->dumping = false;
	h->for_hang = false;
	h->ask_again = false;
	h->done = NULL;
	h->last_progress_ms = uv_now(a->loop);
	if (h->tick_init && (h->timeout_ms > 0)) {
		uint64_t every = (uint64_t)h->timeout_ms / 4;

		if (every > 1000)
			every = 1000;
		if (every < 50)
			every = 50;
		uv_timer_start(&h->tick, on_tick, every, every);
	}
}

int64_t hang_last_output_ms(const struct agent_worker *w)
{
	int64_t a = output_last_line_ms(&w->stream[0]), b = output_last_line_ms(&w->stream[1]);

	return a > b ? a : b;
}

void hang_set_remote(struct agent *a, const struct hang_remote *r)
{
	if (a->hang != NULL)
		a->hang->remote = *r;
}

bool hang_declared(const struct agent *a)
{
	return a->hang != NULL && a->hang->fired;
}

static void after_remote_dump(struct agent *a, int naborted, void *arg)
{
	struct hang *h = arg;
	void (*done)(void *, const struct hang_where *, size_t) = h->done;

	h->dumping = false;
	if (h->closed || done == NULL)
		return;
	if (naborted > 0) { /* on_tick calls done once they have printed */
		h->holding = true;
		h->hold_until_ms = uv_now(a->loop) + HANG_ABORT_GRACE_MS;
		if (h->tick_init && !uv_is_active((uv_handle_t *)&h->tick))
			uv_timer_start(&h->tick, on_tick, 100, 100);
		return;
	}
	remote_done(h);
}

void hang_remote_dump(struct agent *a, bool fail, const char *why,
		      void (*done)(void *arg, const struct hang_where *w, size_t n), void *arg)
{
	struct hang *h = a->hang;

	/* Every worker here exited 0: nothing to dump, but the others may
	 * wait for them, which the requester's verdict says. */
	if (h != NULL && !a->failed && (a->state == AS_DRAINING || a->state == AS_WAITING)) {
		hang_where_local(a, h->where);
		done(arg, h->where, (size_t)a->job->nproc);
		return;
	}
	if (h == NULL || (a->state != AS_RUNNING && a->state != AS_STOPPING) || h->holding ||
	    h->dumping) {
		struct hang_where none = {.rank = -1};

		done(arg, &none, 0);
		return;
	}
	if (fail) {
		h->fired = true;
		h->reported = true; /* the verdict is the requester's */
		a->status = HANG_EXIT;
		a->status_set = true;
		a->failed = true;
	}
	h->done = done;
	h->done_arg = arg;
	h->dumping = true;
	h->for_hang = fail;
	if (hang_dump_start(a, why, fail ? h->aborted : NULL, h->where, after_remote_dump, h) !=
	    0) {
		h->dumping = false;
		h->done = NULL;
		hang_where_local(a, h->where);
		done(arg, h->where, (size_t)a->job->nproc);
	}
}

void hang_env(struct agent *a, struct workenv_job *j)
{
	struct hang *h = a->hang;

	if (h == NULL)
		return;
	j->progress_file = h->slots != NULL ? h->prog_path : NULL;
	j->timer_file = h->ft != NULL ? hang_ftimer_path(h->ft) : NULL;
	j->faulthandler = true;
}

bool hang_holds(const struct agent *a)
{
	return a->hang != NULL && (a->hang->holding || a->hang->dumping);
}

void hang_close(struct agent *a)
{
	struct hang *h = a->hang;

	if (h == NULL)
		return;
	h->holding = false;
	h->done = NULL;
	h->closed = true;
	if (h->tick_init && !uv_is_closing((uv_handle_t *)&h->tick))
		uv_close((uv_handle_t *)&h->tick, on_closed);
	if (h->usr2_init && !uv_is_closing((uv_handle_t *)&h->usr2))
		uv_close((uv_handle_t *)&h->usr2, on_closed);
	if (h->ft != NULL)
		hang_ftimer_close(h->ft);
}

void hang_destroy(struct agent *a)
{
	struct hang *h = a->hang;

	if (h == NULL)
		return;
	if (h->slots != NULL)
		munmap(h->slots, h->map_len);
	if (h->prog_fd >= 0)
		close(h->prog_fd);
	hang_ftimer_destroy(h->ft);
	free(h->s);
	free(h->where);
	free(h->aborted);
	free(h);
	a->hang = NULL;
}

void hang_write_error_file(const char *path, const char *message, const char *caused_by)
{
	char *text;
	int fd;

	/* caused_by: libddp's marker of a secondary failure (report.h): the
	 * hang is the root cause, not this rank. */
	if (path == NULL || (text = report_error_doc(message, NULL, caused_by)) == NULL)
		return;
	/* O_EXCL: the worker's own error file, if it wrote one, is the better
	 * account. */
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd >= 0) {
		(void)!write(fd, text, strlen(text));
		close(fd);
	}
	free(text);
}
