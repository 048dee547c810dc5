/* hang_dump: the per-rank dump and the verdict of a hang (see hang.h). */
#include "hang.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent_int.h"
#include "output.h"
#include "proc_info.h"
#include "prog.h"
#include "progress_slot.h"
#include "text.h"

extern char **environ;

/* This much of a stack tool's output is kept (HANG_STACK_TIMEOUT_MS: how long). */
#define STACK_MAX_BYTES (64 * 1024)

/* A rank's processes (its descendants) looked at, and how many are listed. */
#define DUMP_TREE_MAX	64
#define DUMP_KIDS_SHOWN 16
/* A rank's processes share its stderr, so their SIGABRTs go one at a time:
 * the next once this one is gone (its stack out) or after this long, all
 * of them within HANG_ABORT_GRACE_MS. They and the rank are held stopped
 * until their turn (a DataLoader that saw its worker die would stop waiting
 * where it hung, and end its other workers before their stacks were out);
 * the rank goes last. Ranks go side by side. */
#define DUMP_ABORT_EACH_MS 1000
#define DUMP_ABORT_TICK_MS 10

/* Room kept for " and 4294967295 more" while entries follow. */
#define RANK_LIST_MORE 24

void hang_rule(void)
{
	static const char rule[] = "============================================================\n";

	output_console_write(2, rule, sizeof(rule) - 1);
}

void hang_rank_list(const int *r, size_t n, char *buf, size_t len)
{
	size_t i = 0, k = 0;
	char item[32];

	if (len == 0)
		return;
	buf[0] = '\0';
	while (i < n) {
		size_t j = i;
		int m;

		while (j + 1 < n && r[j + 1] == r[j] + 1)
			j++;
		if (j > i)
			m = snprintf(item, sizeof(item), "%s%d-%d", k ? "," : "", r[i], r[j]);
		else
			m = snprintf(item, sizeof(item), "%s%d", k ? "," : "", r[i]);
		/* Whole entries only (a cut one names another rank), and room
		 * to say how many did not fit. */
		if (k + (size_t)m + (j + 1 < n ? RANK_LIST_MORE : 0) >= len) {
			snprintf(buf + k, len - k, "%s%zu more", k ? " and " : "", n - i);
			return;
		}
		memcpy(buf + k, item, (size_t)m + 1);
		k += (size_t)m;
		i = j + 1;
	}
}

/* ---- the verdict ----------------------------------------------------------------- */

static int cmp_int(const void *x, const void *y)
{
	int a = *(const int *)x, b = *(const int *)y;

	return (a > b) - (a < b);
}

/* "all_reduce #42", "all_reduce #42 (<what it waits for>)", "ddp_init
 * (joining its peers)" or "no collective (last completed #41)". */
static void where_text(const struct hang_where *w, char *buf, size_t len)
{
	const char *wait = ddpi_progress_wait_text(w->wait);

	if (w->init)
		snprintf(buf, len, "ddp_init (joining its peers)");
	else if (w->in)
		snprintf(buf, len, "%s #%llu%s%s%s", ddpi_progress_op_name(w->op),
			 (unsigned long long)w->entered, *wait ? " (" : "", wait, *wait ? ")" : "");
	else if (w->completed > 0)
		snprintf(buf, len, "no collective (last completed #%llu)",
			 (unsigned long long)w->completed);
	else
		snprintf(buf, len, "no collective (none completed yet)");
}

/* Inside the collective, but it never started there: the rank's own GPU work
 * before it still runs. Such a rank is not where its peers are. */
static bool behind_own_work(const struct hang_where *w)
{
	return w->in && w->wait == DDPI_WAIT_OWN_GPU_WORK;
}

/* Where a rank waits for its peers, in the order a rank gets there (0: it
 * does not wait): ddp_init after collective #c (a later context's; 2c + 1)
 * comes before collective #c + 1 (2c + 2). */
static uint64_t wait_order(const struct hang_where *w)
{
	return w->in ? 2 * w->entered : w->init ? 2 * w->completed + 1 : 0;
}

static bool same_place(const struct hang_where *a, const struct hang_where *b)
{
	return a->in == b->in && a->init == b->init &&
	       (a->in ? a->entered == b->entered && a->op == b->op &&
				behind_own_work(a) == behind_own_work(b)
		      : a->completed == b->completed);
}

/* Append one line: "<indent>ranks 0,2-3 wait in all_reduce #42". What they
 * wait for is said only when every rank of the group said the same. */
static void group_line(struct text *t, const char *indent, const int *ranks, size_t n,
		       const struct hang_where *w, bool waiters, bool same_wait)
{
	char list[512], where[256];
	struct hang_where g = *w;

	if (!same_wait)
		g.wait = DDPI_WAIT_UNKNOWN;
	hang_rank_list(ranks, n, list, sizeof(list));
	where_text(&g, where, sizeof(where));
	text_printf(t, "%s%s %s %s %s\n", indent, n == 1 ? "rank" : "ranks", list,
		    w->in || w->init ? (n == 1 ? "waits in" : "wait in")
				     : (n == 1 ? "is in" : "are in"),
		    where);
	(void)waiters;
}

/* The libddp ranks at ref's place from w[from] on, into ranks (those in
 * done skipped and marked, when done is given); *same: all said the same
 * wait. Returns how many. */
static size_t gather(const struct hang_where *w, size_t n, size_t from,
		     const struct hang_where *ref, bool *done, int *ranks, bool *same)
{
	size_t j, k = 0;

	*same = true;
	for (j = from; j < n; j++) {
		if (w[j].rank < 0 || !w[j].libddp || (done && done[j]) || !same_place(&w[j], ref))
			continue;
		ranks[k++] = w[j].rank;
		*same = *same && w[j].wait == ref->wait;
		if (done)
			done[j] = true;
	}
	qsort(ranks, k, sizeof(int), cmp_int);
	return k;
}

static bool is_stopped(const struct hang_where *w)
{
	return w->rank >= 0 && !w->exited && w->stopped;
}

static bool is_exited(const struct hang_where *w)
{
	return w->rank >= 0 && w->exited;
}

static bool is_unknown(const struct hang_where *w)
{
	return w->rank >= 0 && w->unknown;
}

static bool is_other(const struct hang_where *w)
{
	return w->rank >= 0 && !w->exited && !w->unknown && !w->libddp;
}

/* The ranks of w[0..n) that pred holds for, sorted into ranks and listed
 * into list ("0-3,5"); how many. */
static size_t ranks_that(const struct hang_where *w, size_t n,
			 bool (*pred)(const struct hang_where *), int *ranks, char *list,
			 size_t len)
{
	size_t i, k = 0;

	for (i = 0; i < n; i++)
		if (pred(&w[i]))
			ranks[k++] = w[i].rank;
	qsort(ranks, k, sizeof(int), cmp_int);
	hang_rank_list(ranks, k, list, len);
	return k;
}

char *hang_verdict(const struct hang_where *w, size_t n, const char *indent, int *culprits)
{
	char list[512];
	struct text t = {0};
	int *ranks = malloc((n + 1) * sizeof(int));
	bool *done = calloc(n + 1, sizeof(bool));
	uint64_t top = 0;
	size_t i, k, nlib = 0, nother = 0, nstopped = 0, nexited = 0, nunknown = 0;
	bool same;
	const struct hang_where *lead = NULL;

	*culprits = 0;
	if (ranks == NULL || done == NULL)
		goto out;
	/* Stopped ranks first: nothing moves them until they are continued,
	 * whatever the others wait for (ddprun's own stop sends SIGCONT). */
	nstopped = ranks_that(w, n, is_stopped, ranks, list, sizeof(list));
	if (nstopped > 0)
		text_printf(&t,
			    "%s%s %s %s stopped (a stop signal, as ^Z sends, or a debugger): "
			    "nothing runs there until %s continued (SIGCONT)\n",
			    indent, nstopped == 1 ? "rank" : "ranks", list,
			    nstopped == 1 ? "is" : "are", nstopped == 1 ? "it is" : "they are");
	/* Then those that are gone: every collective, and ddp_init's join,
	 * needs every rank, so the others can only wait for them. */
	nexited = ranks_that(w, n, is_exited, ranks, list, sizeof(list));
	if (nexited > 0)
		text_printf(&t,
			    "%s%s %s exited (status 0) while the others run: no collective or "
			    "ddp_init they wait in can complete without %s\n",
			    indent, nexited == 1 ? "rank" : "ranks", list,
			    nexited == 1 ? "it" : "them");
	/* Then those whose node sent no positions: any of them may be the one
	 * the others wait for, so nothing is concluded that needs every rank. */
	nunknown = ranks_that(w, n, is_unknown, ranks, list, sizeof(list));
	if (nunknown > 0)
		text_printf(&t,
			    "%s%s %s: not known where %s (%s node sent no positions); the "
			    "others may be waiting for %s\n",
			    indent, nunknown == 1 ? "rank" : "ranks", list,
			    nunknown == 1 ? "it is" : "they are", nunknown == 1 ? "its" : "their",
			    nunknown == 1 ? "it" : "them");
	/* The waiters: the ranks inside the furthest collective (or ddp_init),
	 * those whose collective runs rather than those still behind their own
	 * GPU work. */
	for (i = 0; i < n; i++) {
		uint64_t o = wait_order(&w[i]);

		if (w[i].rank < 0 || w[i].exited || w[i].unknown)
			continue;
		if (!w[i].libddp) {
			nother++;
			continue;
		}
		nlib++;
		if (o > 0 && (o > top || (o == top && lead != NULL && behind_own_work(lead) &&
					  !behind_own_work(&w[i])))) {
			top = o;
			lead = &w[i];
		}
	}
	if (nlib == 0) {
		/* PyTorch's ranks: what their stacks say (hang_torch.c). */
		int torch_culprits = hang_torch_verdict(
			&t, w, n, indent, nstopped == 0 && nexited == 0 && nunknown == 0);

		if (torch_culprits >= 0) {
			*culprits += torch_culprits;
			goto out;
		}
		if (nother > 0 || nunknown == 0)
			text_printf(&t,
				    "%sno rank reports its collectives (none uses libddp): see "
				    "each rank's dump above\n",
				    indent);
		goto out;
	}
	/* Every group of ranks at the same place, the waiters' group last. */
	for (i = 0; i < n; i++) {
		if (w[i].rank < 0 || !w[i].libddp || done[i] ||
		    (lead != NULL && same_place(&w[i], lead)))
			continue;
		k = gather(w, n, i, &w[i], done, ranks, &same);
		*culprits += (int)k;
		group_line(&t, indent, ranks, k, &w[i], false, same);
	}
	if (lead != NULL) {
		k = gather(w, n, 0, lead, NULL, ranks, &same);
		group_line(&t, indent, ranks, k, lead, true, same);
		if (*culprits == 0 && behind_own_work(lead)) {
			/* Nobody is ahead: the program's own GPU work is what hangs. */
			*culprits = (int)k;
			text_printf(&t,
				    "%sthe collective never started on %s: the program's own "
				    "GPU work before it (a kernel or host function) is stuck or "
				    "slow, not a peer\n",
				    indent, k == 1 ? "its GPU" : "their GPUs");
		} else if (lead->init && nother > 0) {
			/* The join waits for every rank: those that never came. */
			*culprits += (int)nother;
		} else if (*culprits == 0 && nstopped == 0 && nexited == 0 && nunknown == 0 &&
			   lead->init) {
			text_printf(&t,
				    "%severy rank is in ddp_init: the join itself does not "
				    "complete (a node or the store out of reach), not one "
				    "rank's program\n",
				    indent);
		} else if (*culprits == 0 && nstopped == 0 && nexited == 0 && nunknown == 0) {
			text_printf(
				&t,
				"%severy rank is in the same collective: the hang is inside it (a "
				"lost peer or message), not in one rank's program\n",
				indent);
		}
	} else if (*culprits > 0 && nlib > 1) {
		text_printf(&t, "%sno rank is inside a collective: each is in its own code\n",
			    indent);
		*culprits = 0;
	}
	if (nother > 0) {
		k = ranks_that(w, n, is_other, ranks, list, sizeof(list));
		if (lead != NULL && lead->init)
			text_printf(&t,
				    "%s%s %s never called ddp_init (%s in %s own code before it, "
				    "or not libddp): the ranks in ddp_init wait for %s\n",
				    indent, k == 1 ? "rank" : "ranks", list,
				    k == 1 ? "it is" : "they are", k == 1 ? "its" : "their",
				    k == 1 ? "it" : "them");
		else
			text_printf(&t,
				    "%s%s %s %s no collectives (not libddp, or before ddp_init)\n",
				    indent, k == 1 ? "rank" : "ranks", list,
				    k == 1 ? "reports" : "report");
	}
out:
	*culprits += (int)nexited;
	if (*culprits == 0)
		*culprits = (int)nstopped; /* nobody else to name */
	free(ranks);
	free(done);
	return t.p != NULL ? t.p : strdup("");
}

/* ---- stacks ---------------------------------------------------------------------- */

/* The stack tool on PATH: "eu-stack" or "gdb", NULL: neither. */
static const char *stack_tool(char *path, size_t len)
{
	static const char *const tools[] = {"eu-stack", "gdb"};
	const char *env = getenv("PATH");
	size_t i;

	for (i = 0; i < 2; i++) {
		char *found = NULL;

		if (prog_lookup(tools[i], env, &found) == 0) {
			snprintf(path, len, "%s", found);
			free(found);
			return tools[i];
		}
		free(found);
	}
	return NULL;
}

/* Start path with argv, its stdout and stderr into a pipe, in its own
 * process group; *fd gets the pipe's read end. The tool is reaped by the
 * agent's SIGCHLD handler, which ignores children that are not workers. */
static pid_t spawn_tool(const char *path, char *const argv[], int *fd)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t none, dfl;
	int p[2], rc;
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) != 0)
		return -errno;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, p[1], 1);
	posix_spawn_file_actions_adddup2(&fa, p[1], 2);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawnattr_init(&attr);
	sigemptyset(&none);
	sigfillset(&dfl);
	sigdelset(&dfl, SIGKILL);
	sigdelset(&dfl, SIGSTOP);
	posix_spawnattr_setsigmask(&attr, &none);
	posix_spawnattr_setsigdefault(&attr, &dfl);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
						POSIX_SPAWN_SETPGROUP);
	rc = posix_spawn(&pid, path, &fa, &attr, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	close(p[1]);
	if (rc != 0) {
		close(p[0]);
		return -rc;
	}
	*fd = p[0];
	return pid;
}

/* The tool's output as the dump shows it, indented, into t (of_wrapped:
 * pid is the program the rank waits for, not the rank). */
static void format_stack(struct text *t, const char *tool, pid_t pid, bool of_wrapped,
			 const struct text *raw)
{
	const char *line;

	text_printf(t, "  native stack (%s -p %d%s):\n", tool, (int)pid,
		    of_wrapped ? ", the Python program the rank runs and waits for" : "");
	for (line = raw->p; line != NULL && *line != '\0';) {
		const char *nl = strchr(line, '\n');
		size_t n = nl ? (size_t)(nl - line) : strlen(line);

		/* gdb's chatter (symbol loading, LWP notes) is not the stack. */
		if (strcmp(tool, "gdb") != 0 ||
		    (n > 0 && (line[0] == '#' || !strncmp(line, "Thread", 6) || line[0] == '(' ||
			       !strncmp(line, "ptrace", 6)))) {
			text_add(t, "    ", 4);
			text_add(t, line, n);
			text_add(t, "\n", 1);
		}
		line = nl ? nl + 1 : NULL;
	}
}

/* ---- the dump -------------------------------------------------------------------- */

static double age_s(struct agent *a, struct agent_worker *w)
{
	int64_t last = hang_last_output_ms(w);

	return last < 0 ? -1.0 : (double)((int64_t)uv_now(a->loop) - last) / 1000.0;
}

/* One rank's part of a dump. */
struct dump_rank {
	struct hang_dump *d;
	bool running, py;
	bool fh;      /* py, with faulthandler on: a SIGABRT prints its stack */
	bool stopped; /* state T: a SIGABRT would wait for a SIGCONT */
	pid_t pid, tool;
	/* Whose native stack is taken: the rank, or the Python program it
	 * waits for (a wrapper's, a launcher's: stack_process). */
	pid_t stack_pid;
	bool stack_py;		   /* stack_pid is a Python program */
	pid_t kids[DUMP_TREE_MAX]; /* its descendants when the dump began */
	int nkids;
	pid_t seq[DUMP_TREE_MAX]; /* its processes to SIGABRT in turn */
	int nseq, at;		  /* at: the one signalled last */
	uint64_t at_ms;		  /* when */
	bool held;		  /* the rank is SIGSTOPped while they go */
	bool said;		  /* its error file says they were sent SIGABRT */
	struct text head, raw;
	bool raw_cut; /* the tool's output is not all in raw (too long, too slow) */
	uv_pipe_t pipe;
	bool reading; /* the pipe is open and read */
};

struct hang_dump {
	struct agent *a;
	char why[400];
	bool *aborted; /* NULL: no SIGABRT */
	const char *tool;
	char toolpath[4096];
	struct dump_rank *r;
	struct hang_where *w; /* the positions (the torch places are added) */
	int n;
	int pending;	/* stack tools still being read */
	bool trace_any; /* proc_self_may_trace_any() */
	int seqs;	/* ranks whose SIGABRTs are still going (DUMP_ABORT_EACH_MS) */
	uint64_t seq_end_ms;
	int open; /* handles not yet closed */
	uv_timer_t timer;
	bool finished;
	hang_dump_cb done;
	void *arg;
};

/* One dump at a time (SIGUSR2 while one runs is told so). */
static struct hang_dump *current;

static void dump_free(struct hang_dump *d)
{
	int i;

	for (i = 0; i < d->n; i++) {
		free(d->r[i].head.p);
		free(d->r[i].raw.p);
	}
	free(d->r);
	free(d);
}

static void on_dump_closed(uv_handle_t *h)
{
	struct hang_dump *d = h->data;

	if (--d->open == 0 && d->finished)
		dump_free(d);
}

/* The stacks faulthandler prints after the SIGABRT say no rank: without a
 * prefix of its own (--tag-output, --tee), the rank's stderr gets one from
 * here on, so that two ranks' stacks are told apart. */
static void tag_stack(struct agent *a, struct agent_worker *wk)
{
	char buf[32];
	char *p;

	if (wk->stream[1].prefix_len > 0 || !wk->stream[1].open)
		return;
	snprintf(buf, sizeof(buf), "[rank%d]: ", a->world.rank_offset + wk->local_rank);
	p = strdup(buf);
	if (p == NULL)
		return;
	free(wk->prefix[1]);
	wk->prefix[1] = p;
	wk->stream[1].prefix = p;
	wk->stream[1].prefix_len = strlen(p);
}

static bool program_process(const struct dump_rank *r, pid_t p, int depth);

/* Whether p, a parent, is where the program's own processes come from: the
 * rank, one of them, or multiprocessing's fork server under those. */
static bool program_source(const struct dump_rank *r, pid_t p, int depth)
{
	struct proc_info pi;

	if (p == r->pid)
		return true;
	if (depth <= 0 || proc_info_read(p, &pi) != 0)
		return false;
	if (proc_is_mp_helper(p))
		return program_source(r, pi.ppid, depth - 1);
	return program_process(r, p, depth - 1);
}

/* Whether p is one of the program's own Python processes: a
 * multiprocessing worker (forked or spawned: a DataLoader's) of the rank or
 * of another such process, the Python program a wrapper script (a rank
 * that is no Python) runs, under no other Python, or the program whose
 * stack stands for the rank's (stack_process: under a launcher).
 * Not any other Python the program starts (a tool's service process,
 * wandb's, that saves its work on SIGTERM: it gets the job's stop, as any
 * process does). */
static bool program_process(const struct dump_rank *r, pid_t p, int depth)
{
	struct proc_info pi;
	pid_t up;

	if (depth <= 0 || proc_info_read(p, &pi) != 0 || !proc_is_python(p) || proc_is_mp_helper(p))
		return false;
	if (p == r->stack_pid && p != r->pid)
		return true;
	if (proc_forked_from_parent(p) || proc_is_mp_spawned(p))
		return program_source(r, pi.ppid, depth - 1);
	if (r->py)
		return false;
	for (up = pi.ppid; up != r->pid; up = pi.ppid)
		if (--depth <= 0 || proc_info_read(up, &pi) != 0 || proc_is_python(up))
			return false;
	return true;
}

/* Whose native stack tells where rank r is (dump_rank.stack_pid): the
 * rank's, or, while the process there waits for its child
 * (proc_waits_for_child: a shell running the program, a launcher's
 * subprocess.call, timeout, tini; proc_reads_output_of: conda run, a
 * launcher that captures the output) and has one Python program among its
 * children (not multiprocessing's; where it waits for one by its pid, only
 * that one counts), that program's, down the chain, through a wrapper that
 * is not Python where it is the one child (a shell's `timeout python ...`):
 * a waiting parent's own stack is a wait for its
 * child, nothing of torch.distributed. Not a libddp rank's (it reports its
 * place), not where two programs run side by side (no one place), nor
 * where the stack tool may not attach to a worker's child: under Yama's
 * ptrace_scope 1 only the rank names ddprun its tracer (spawn_worker.c). */
static pid_t stack_process(const struct dump_rank *r, bool libddp)
{
	pid_t at = r->pid, found = r->pid;
	int depth, i;

	if (libddp || !r->d->trace_any)
		return r->pid;
	for (depth = 0; depth < DUMP_TREE_MAX; depth++) {
		struct proc_info pi;
		pid_t py = 0, other = 0, next, waited;
		int npy = 0, nother = 0, nkids = 0;

		if (proc_info_read(at, &pi) != 0)
			break;
		/* One waited for by its pid is the one (a service beside it, or a
		 * multiprocessing child it joins, is not the program). */
		waited = proc_waited_child(at);
		for (i = 0; i < r->nkids && npy < 2; i++) {
			struct proc_info ki;
			pid_t k = r->kids[i];

			if (proc_info_read(k, &ki) != 0 || ki.ppid != at ||
			    (waited > 0 && k != waited))
				continue;
			nkids++;
			if (!proc_is_python(k)) {
				other = k;
				nother++;
			} else if (!proc_is_mp_helper(k) && !proc_forked_from_parent(k) &&
				   !proc_is_mp_spawned(k)) {
				py = k;
				npy++;
			}
		}
		if (npy == 1)
			next = py;
		else if (nkids == 1 && nother == 1)
			next = other; /* a wrapper, its only child */
		else
			break;
		if (!proc_waits_for_child(&pi) && !proc_reads_output_of(at, &pi, next))
			break;
		at = next;
		if (next == py)
			found = py;
	}
	return found;
}

/* The rank's processes whose Python stacks a hang asks for (SIGABRT: the
 * faulthandler they inherit prints them): the program's own
 * (program_process), still the rank's descendants (no pid reused
 * meanwhile), neither stopped nor a zombie, and with faulthandler on (one
 * without would die without a word). Deepest first, so no parent sees a
 * child's death before its own stack is out. */
static int python_kids(const struct dump_rank *r, pid_t *out)
{
	int i, n = 0;

	for (i = r->nkids - 1; i >= 0; i--) {
		struct proc_info pi;

		if (proc_info_read(r->kids[i], &pi) != 0 || pi.state == 'T' || pi.state == 't' ||
		    pi.state == 'Z' || !proc_descends(r->kids[i], r->pid, DUMP_TREE_MAX) ||
		    !program_process(r, r->kids[i], DUMP_TREE_MAX) ||
		    !proc_python_faulthandler(r->kids[i]))
			continue;
		out[n++] = r->kids[i];
	}
	return n;
}

/* A hang's SIGABRTs of rank i (r) and of its Python processes (kids, nk),
 * said in t; false: none. */
static bool abort_rank(struct hang_dump *d, int i, bool rank_too, const pid_t *kids, int nk,
		       struct text *t)
{
	struct agent_worker *wk = &d->a->w[i];
	const char *where =
		wk->stream[1].open ? "below" : "to the rank's stderr (its log file, if redirected)";
	int k;

	if (!rank_too && nk == 0)
		return false;
	if (nk == 0) {
		text_printf(
			t,
			"  Python stack: SIGABRT to pid %d, faulthandler prints every thread %s\n",
			(int)d->r[i].pid, where);
	} else {
		text_printf(t, "  Python stacks: SIGABRT to its process%s", nk == 1 ? "" : "es");
		for (k = 0; k < nk; k++)
			text_printf(t, "%s %d", k ? "," : "", (int)kids[k]);
		if (rank_too)
			text_printf(t, ", then to pid %d (the rank)", (int)d->r[i].pid);
		text_printf(t, ", in turn; faulthandler prints every thread of each %s\n", where);
	}
	return true;
}

/* The rank's error file, as its SIGABRT (rank_too), or its processes'
 * first, goes: what the summary says is what was sent (a stop may come in
 * the middle of the sequence). */
static void say_aborted(struct hang_dump *d, const struct dump_rank *r, bool rank_too)
{
	size_t i = (size_t)(r - d->r);
	/* One the others waited for is the failure to name first, where this
	 * node's ranks are the whole job (with several nodes the job's
	 * verdict, coord_hang.c, is made after every node's dump). */
	bool culprit = d->w != NULL && d->a->world.world_size == d->n &&
		       hang_torch_culprit(d->w, (size_t)d->n, i);
	char msg[700];

	snprintf(
		msg, sizeof(msg),
		"Hang: %sddprun sent SIGABRT%s: %s; faulthandler printed the %s on its stderr",
		!culprit ? ""
		: d->w[i].torch == HANG_TORCH_NOGROUP
			? "the rank had not formed its process group while other ranks waited in "
			  "torch.distributed; "
			: "the rank was in its own code, in no torch.distributed collective, while "
			  "other ranks waited in torch.distributed; ",
		rank_too ? "" : " to the rank's Python processes", d->why,
		rank_too ? "rank's Python stack" : "Python stacks of its processes");
	hang_write_error_file(d->a->w[i].error_file, msg, culprit ? NULL : REPORT_CAUSE_HANG);
}

/* The rank may get a signal while ddprun has not reaped it. */
static bool rank_ours(struct hang_dump *d, const struct dump_rank *r)
{
	const struct agent_worker *wk = &d->a->w[r - d->r];

	return wk->running && wk->pid == r->pid;
}

static bool seq_gone(pid_t pid)
{
	struct proc_info pi;

	return proc_info_read(pid, &pi) != 0 || pi.state == 'Z' || pi.state == 'X';
}

/* SIGABRT, then SIGCONT: a stopped process gets the SIGABRT first, before
 * any SIGCHLD held meanwhile (lower signals first), so it prints its stack
 * where it was. A pid stopped here stays that process until it is
 * continued (only SIGKILL ends it meanwhile). */
static void abort_held(pid_t pid)
{
	kill(pid, SIGABRT);
	kill(pid, SIGCONT);
}

/* SIGABRT r->seq[r->at] on (skipping those gone meanwhile), or, once they
 * are all done, the rank itself (a Python one), and let it go on. */
static void seq_next(struct hang_dump *d, struct dump_rank *r, uint64_t now)
{
	while (r->at < r->nseq && seq_gone(r->seq[r->at]))
		r->at++;
	if (r->at < r->nseq) {
		if (!r->said && rank_ours(d, r))
			say_aborted(d, r, false);
		r->said = true;
		abort_held(r->seq[r->at]);
		r->at_ms = now;
		return;
	}
	if (rank_ours(d, r)) {
		if (r->fh) {
			say_aborted(d, r, true);
			kill(r->pid, SIGABRT); /* delivered before the held SIGCHLDs */
		}
		if (r->held)
			kill(r->pid, SIGCONT);
	}
	d->seqs--;
}

static void on_seq_tick(uv_timer_t *t)
{
	struct hang_dump *d = t->data;
	uint64_t now = uv_now(d->a->loop);
	int i;

	for (i = 0; i < d->n && d->seqs > 0; i++) {
		struct dump_rank *r = &d->r[i];

		if (r->at >= r->nseq ||
		    (!seq_gone(r->seq[r->at]) && now < r->at_ms + DUMP_ABORT_EACH_MS &&
		     now < d->seq_end_ms))
			continue;
		if (now >= d->seq_end_ms) { /* out of time: the rest at once */
			while (++r->at < r->nseq)
				if (!seq_gone(r->seq[r->at]))
					abort_held(r->seq[r->at]);
		} else {
			r->at++;
		}
		seq_next(d, r, now);
	}
	if (d->seqs == 0) {
		uv_timer_stop(t);
		uv_close((uv_handle_t *)t, on_dump_closed); /* counted in open since */
	}
}

/* Every stack is in: print the ranks in order, then SIGABRT the Python
 * workers and their Python processes (after their native stacks:
 * faulthandler output follows). */
static void dump_finish(struct hang_dump *d)
{
	struct agent *a = d->a;
	int i, naborted = 0;

	if (d->finished)
		return;
	d->finished = true;
	current = NULL;
	uv_timer_stop(&d->timer);
	/* Where PyTorch's ranks are, from their stacks, before any SIGABRT's
	 * error file names the one the others wait for. */
	for (i = 0; i < d->n; i++)
		if (d->w != NULL && d->w[i].rank >= 0 && !d->w[i].libddp && d->r[i].running &&
		    !d->r[i].stopped)
			d->w[i].torch = hang_torch_place(d->r[i].raw.p, d->r[i].raw.len,
							 (long)d->r[i].stack_pid, d->r[i].stack_py,
							 !d->r[i].raw_cut);
	for (i = 0; i < d->n; i++) {
		struct dump_rank *r = &d->r[i];
		struct agent_worker *wk = &a->w[i];
		struct text t = {0};
		bool live = r->running && !r->stopped && d->aborted != NULL && wk->running &&
			    wk->pid == r->pid;
		pid_t kids[DUMP_TREE_MAX];
		int nk = live ? python_kids(r, kids) : 0;
		bool abort_it;

		if (r->head.p != NULL)
			text_add(&t, r->head.p, r->head.len);
		if (r->running && d->tool != NULL)
			format_stack(&t, d->tool, r->stack_pid, r->stack_pid != r->pid, &r->raw);
		if (r->stopped && d->aborted != NULL && wk->running && wk->pid == r->pid) {
			char msg[600];

			/* Nothing runs there: no Python stack comes, and this rank,
			 * not those waiting for it, is the failure to name first
			 * (written before theirs, and as no consequence). */
			if (r->py)
				text_puts(&t, "  Python stack: none, the rank is stopped (it would "
					      "print it only once continued)\n");
			snprintf(msg, sizeof(msg),
				 "Hang: the rank was stopped (a stop signal, as ^Z sends, or a "
				 "debugger), so nothing ran there: %s",
				 d->why);
			hang_write_error_file(wk->error_file, msg, NULL);
		}
		if (live && r->py && !r->fh)
			text_puts(&t,
				  "  Python stack: none, faulthandler is off for it (-E, -I, or an "
				  "empty PYTHONFAULTHANDLER): no SIGABRT\n");
		abort_it = live && abort_rank(d, i, r->fh, kids, nk, &t);
		if (t.p != NULL)
			output_console_write(2, t.p, t.len);
		free(t.p);
		if (d->aborted != NULL) {
			d->aborted[i] = false;
			if (abort_it) {
				tag_stack(a, wk);
				memcpy(r->seq, kids, (size_t)nk * sizeof(*kids));
				r->nseq = nk;
				r->held = nk > 0 && kill(r->pid, SIGSTOP) == 0;
				for (int k = 0; k < nk; k++)
					kill(kids[k],
					     SIGSTOP); /* (python_kids: still the rank's) */
				d->seqs++;
				seq_next(d, r, uv_now(a->loop));
				d->aborted[i] = true;
				naborted++;
			}
		}
	}
	d->open++; /* the timer: closed now, or once the SIGABRTs are over */
	if (d->seqs > 0) {
		/* (the rank, last, keeps a moment of the grace for its own) */
		d->seq_end_ms = uv_now(a->loop) + HANG_ABORT_GRACE_MS - DUMP_ABORT_EACH_MS;
		uv_timer_start(&d->timer, on_seq_tick, DUMP_ABORT_TICK_MS, DUMP_ABORT_TICK_MS);
	} else {
		uv_close((uv_handle_t *)&d->timer, on_dump_closed);
	}
	if (d->done != NULL)
		d->done(a, naborted, d->arg);
	agent_dump_over(a);
}

bool hang_dump_running(void)
{
	return current != NULL;
}

static void rank_closed(uv_handle_t *h)
{
	struct dump_rank *r = h->data;
	struct hang_dump *d = r->d;

	if (--d->pending == 0)
		dump_finish(d);
	on_dump_closed((uv_handle_t *)&d->timer);
}

static void rank_stop(struct dump_rank *r)
{
	if (!r->reading)
		return;
	r->reading = false;
	uv_close((uv_handle_t *)&r->pipe, rank_closed);
}

static void on_stack_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	static char chunk[16384];

	buf->base = chunk;
	buf->len = sizeof(chunk);
}

static void on_stack_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
	struct dump_rank *r = st->data;

	if (nread > 0 && r->raw.len < STACK_MAX_BYTES)
		text_add(&r->raw, buf->base, (size_t)nread);
	else if (nread > 0)
		r->raw_cut = true;
	else if (nread < 0)
		rank_stop(r); /* EOF: the tool is done */
}

/* A tool that takes too long: kill it, show what came. */
static void on_dump_timeout(uv_timer_t *t)
{
	struct hang_dump *d = t->data;
	int i;

	for (i = 0; i < d->n; i++)
		if (d->r[i].reading) {
			kill(-d->r[i].tool, SIGKILL);
			d->r[i].raw_cut = true;
			text_add(&d->r[i].raw, "(the stack tool did not finish in time)\n", 40);
			rank_stop(&d->r[i]);
		}
	if (d->pending == 0)
		dump_finish(d);
}

/* Spawn the stack tool for r; false if it could not start (said in raw). */
static bool rank_start(struct hang_dump *d, struct dump_rank *r)
{
	char pidstr[16];
	int fd = -1;
	pid_t pid;

	snprintf(pidstr, sizeof(pidstr), "%d", (int)r->stack_pid);
	if (strcmp(d->tool, "eu-stack") == 0) {
		char *const argv[] = {d->toolpath, "-p", pidstr, NULL};

		pid = spawn_tool(d->toolpath, argv, &fd);
	} else {
		char *const argv[] = {d->toolpath, "-p",
				      pidstr,	   "-batch",
				      "-nx",	   "-q",
				      "-ex",	   "set pagination off",
				      "-ex",	   "thread apply all -ascending bt",
				      NULL};

		pid = spawn_tool(d->toolpath, argv, &fd);
	}
	if (pid < 0) {
		text_printf(&r->raw, "(cannot run %s: %s)\n", d->toolpath, strerror((int)-pid));
		return false;
	}
	r->tool = pid;
	if (uv_pipe_init(d->a->loop, &r->pipe, 0) != 0) {
		close(fd);
		kill(-pid, SIGKILL);
		return false;
	}
	r->pipe.data = r;
	d->open++;
	r->reading = true;
	d->pending++;
	if (uv_pipe_open(&r->pipe, fd) != 0) {
		close(fd);
		kill(-pid, SIGKILL);
		rank_stop(r);
		return true;
	}
	if (uv_read_start((uv_stream_t *)&r->pipe, on_stack_alloc, on_stack_read) != 0) {
		kill(-pid, SIGKILL);
		rank_stop(r);
	}
	return true;
}

/* The rank's own processes, one line each: a rank that waits for its
 * DataLoader's workers, or a wrapper script whose Python program does the
 * work, is explained by them. */
static void kids_head(struct dump_rank *r, struct text *t)
{
	pid_t tree[DUMP_TREE_MAX];
	int i, n = proc_tree(r->pid, tree, DUMP_TREE_MAX);

	for (i = 1; i < n; i++) {
		struct proc_info pi;

		if (proc_info_read(tree[i], &pi) != 0)
			continue; /* gone meanwhile */
		r->kids[r->nkids++] = tree[i];
		if (r->nkids > DUMP_KIDS_SHOWN)
			continue;
		text_printf(t,
			    "  its process %d (%s), child of %d: state %c (%s), wchan %s, cpu %.2f "
			    "s, %d thread%s%s\n",
			    (int)tree[i], pi.comm, (int)pi.ppid, pi.state,
			    proc_state_name(pi.state), pi.wchan, proc_ticks_s(pi.cpu_ticks),
			    pi.nthreads, pi.nthreads == 1 ? "" : "s",
			    proc_is_mp_helper(tree[i]) ? " (Python multiprocessing's helper)" : "");
	}
	if (r->nkids > DUMP_KIDS_SHOWN)
		text_printf(t, "  and %d more of its processes\n", r->nkids - DUMP_KIDS_SHOWN);
	if (n == DUMP_TREE_MAX)
		text_printf(t, "  (its processes beyond the first %d were not looked at)\n",
			    DUMP_TREE_MAX - 1);
}

static void rank_head(struct hang_dump *d, int i, const struct hang_where *w)
{
	struct agent *a = d->a;
	struct agent_worker *wk = &a->w[i];
	struct dump_rank *r = &d->r[i];
	struct text *t = &r->head;
	char where[160];
	struct proc_info pi;
	double age;

	r->d = d;
	r->running = wk->running;
	r->pid = wk->pid;
	if (!wk->running) {
		text_printf(t, "ddprun: rank %d (local rank %d): not running\n",
			    a->world.rank_offset + i, i);
		return;
	}
	if (proc_info_read(wk->pid, &pi) != 0)
		snprintf(pi.comm, sizeof(pi.comm), "?");
	r->stopped = pi.state == 'T' || pi.state == 't';
	age = age_s(a, wk);
	r->py = proc_is_python(wk->pid);
	r->fh = r->py && proc_python_faulthandler(wk->pid);
	if (w->libddp)
		where_text(w, where, sizeof(where));
	else
		snprintf(where, sizeof(where), "not reported (not libddp, or before ddp_init)");
	text_printf(t,
		    "ddprun: rank %d (local rank %d): pid %d (%s), state %c (%s), wchan %s, cpu "
		    "%.2f s, %d thread%s, ",
		    w->rank, i, (int)wk->pid, pi.comm, pi.state, proc_state_name(pi.state),
		    pi.wchan, proc_ticks_s(proc_tree_ticks(wk->pid, 64)), pi.nthreads,
		    pi.nthreads == 1 ? "" : "s");
	if (age < 0)
		text_printf(t, "no output seen, ");
	else
		text_printf(t, "last output %.1f s ago, ", age);
	text_printf(t, "%s%s\n", w->init ? "collective: none, in " : "collective: ", where);
	kids_head(r, t);
	r->stack_pid = stack_process(r, w->libddp);
	r->stack_py = r->stack_pid == r->pid ? r->py : proc_is_python(r->stack_pid);
}

int hang_dump_start(struct agent *a, const char *why, bool *aborted, struct hang_where *w,
		    hang_dump_cb done, void *arg)
{
	struct hang_dump *d;
	int i;

	if (current != NULL)
		return -EBUSY;
	d = calloc(1, sizeof(*d));
	if (d == NULL)
		return -ENOMEM;
	d->r = calloc((size_t)a->job->nproc, sizeof(*d->r));
	if (d->r == NULL || uv_timer_init(a->loop, &d->timer) != 0) {
		free(d->r);
		free(d);
		return -ENOMEM;
	}
	d->a = a;
	d->n = a->job->nproc;
	d->w = w;
	d->aborted = aborted;
	d->done = done;
	d->arg = arg;
	d->timer.data = d;
	snprintf(d->why, sizeof(d->why), "%s", why);
	d->tool = stack_tool(d->toolpath, sizeof(d->toolpath));
	d->trace_any = proc_self_may_trace_any();
	current = d;
	uv_update_time(a->loop);
	hang_where_local(a, w);
	agent_say("stack dump of node %d (host %s): %s", a->world.group_rank, a->job->hostname,
		  why);
	if (d->tool == NULL)
		agent_say(
			"no native stacks: neither eu-stack nor gdb is installed (Debian: apt-get "
			"install elfutils gdb)");
	/* The tools run side by side, the loop goes on (heartbeats, the
	 * store): the dump takes as long as the slowest, bounded. */
	for (i = 0; i < d->n; i++) {
		rank_head(d, i, &w[i]);
		if (d->r[i].running && d->tool != NULL)
			rank_start(d, &d->r[i]);
	}
	uv_timer_start(&d->timer, on_dump_timeout, d->pending > 0 ? HANG_STACK_TIMEOUT_MS : 0, 0);
	return 0;
}
