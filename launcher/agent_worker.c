/* agent_worker: start one worker: its log files, output pipes, environment
 * and arguments, then spawn (see agent.h, spawn_worker.h, output.h). */
#include "agent_int.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hang.h"
#include "spawn_worker.h"
#include "workenv.h"

static const char *const stream_file[2] = {"stdout.log", "stderr.log"};

static int open_log(const char *path, char *err, size_t errlen)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	if (fd < 0) {
		int rc = -errno;

		snprintf(err, errlen, "cannot open %.300s: %s", path, strerror(errno));
		return rc;
	}
	return fd;
}

/* The console prefix of one stream: --tag-output's "[rankN]: ", else for a
 * tee'd stream torchrun's "[<role><local_rank>]:" or the template of
 * --log-line-prefix-template or TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE
 * (torchrun 2.x's order; ${hostname} is gethostname()'s name, not cut at
 * its first dot), else nothing. */
static char *make_prefix(struct agent *a, struct agent_worker *w, bool tee)
{
	static const char *const names[] = {"role_name", "rank", "local_rank", "hostname"};
	int rank = a->world.rank_offset + w->local_rank;
	const char *tpl = a->job->log_line_prefix;
	char buf[96], r[16], lr[16];
	const char *values[] = {a->job->role, r, lr, a->job->hostname};

	if (a->job->tag_output) {
		snprintf(buf, sizeof(buf), "[rank%d]: ", rank);
		return strdup(buf);
	}
	if (!tee)
		return strdup("");
	snprintf(r, sizeof(r), "%d", rank);
	snprintf(lr, sizeof(lr), "%d", w->local_rank);
	if (tpl != NULL)
		return prog_template(tpl, names, values, 4, true);
	{
		size_t n = strlen(a->job->role) + 24;
		char *p = malloc(n);

		if (p != NULL)
			snprintf(p, n, "[%s%d]:", a->job->role, w->local_rank);
		return p;
	}
}

/* Where stream s (0 stdout, 1 stderr) of local rank lr goes: /dev/null, a
 * log file, a pipe the agent reads, or a pipe the agent reads and copies to
 * a log file (tee). */
enum stream_way { WAY_NULL, WAY_FILE, WAY_PIPE, WAY_TEE };

static enum stream_way stream_way(const struct job *job, int lr, int s)
{
	int bit = s == 0 ? CLI_STD_OUT : CLI_STD_ERR;
	bool tee = (cli_std_get(&job->tee, lr) & bit) != 0;
	bool redirect = tee || (cli_std_get(&job->redirects, lr) & bit) != 0;
	bool shown = job_rank_shown(job, lr);

	if (redirect)
		return tee && shown ? WAY_TEE : WAY_FILE;
	/* a hidden stderr is still read: its last lines go in the report */
	return !shown && s == 0 ? WAY_NULL : WAY_PIPE;
}

int agent_worker_fds(const struct job *job)
{
	int n = 0;

	/* Each stream's pipe (and tee file). Not a store connection: a worker
	 * may make none, and on a node that does not host the store it is
	 * another node's. */
	for (int lr = 0; lr < job->nproc; lr++) {
		for (int s = 0; s < 2; s++) {
			enum stream_way way = stream_way(job, lr, s);
			n += way == WAY_TEE ? 2 : way == WAY_PIPE;
		}
	}
	return n;
}

/* Decide where stream s (0 stdout, 1 stderr) of w goes. On success *child_fd
 * is what the worker gets (a file, /dev/null or a pipe's write end), and for
 * a pumped stream *read_fd / *file_fd are the pipe's read end and the tee
 * file (or -1). */
static int plan_stream(struct agent *a, struct agent_worker *w, int s, int *child_fd, int *read_fd,
		       int *file_fd, char *err, size_t errlen)
{
	enum stream_way way = stream_way(a->job, w->local_rank, s);
	int f = -1, p[2];

	*child_fd = *read_fd = *file_fd = -1;
	if (way == WAY_FILE || way == WAY_TEE) {
		char *path = logdir_path(&a->logdir, w->local_rank, stream_file[s]);

		if (path == NULL)
			return -ENOMEM;
		f = open_log(path, err, errlen);
		free(path);
		if (f < 0)
			return f;
		if (way == WAY_FILE) { /* straight to the file */
			*child_fd = f;
			return 0;
		}
	} else if (way == WAY_NULL) {
		*child_fd = a->devnull;
		return 0;
	}
	if (pipe2(p, O_CLOEXEC) != 0) {
		int rc = -errno;

		snprintf(err, errlen, "cannot make a pipe: %s", strerror(errno));
		if (f >= 0)
			close(f);
		return rc;
	}
	free(w->prefix[s]);
	w->prefix[s] = make_prefix(a, w, way == WAY_TEE);
	if (w->prefix[s] == NULL) {
		close(p[0]);
		close(p[1]);
		if (f >= 0)
			close(f);
		return -ENOMEM;
	}
	*child_fd = p[1];
	*read_fd = p[0];
	*file_fd = f;
	return 0;
}

static void close_fd(int fd, int keep)
{
	if (fd >= 0 && fd != keep)
		close(fd);
}

int agent_worker_start(struct agent *a, struct agent_worker *w, char *err, size_t errlen)
{
	/* The worker contract: this attempt's world and the job's fixed part. */
	struct workenv_job contract = {
		.world = a->world,
		.local_world_size = a->job->nproc,
		.role = a->job->role,
		.run_id = a->job->run_id,
		.max_restarts = a->job->max_restarts,
		.shm_nonce = a->job->shm_nonce,
		.signals_to_handle = a->job->signals_to_handle,
		.virtual_local_rank = a->job->virtual_local_rank,
	};
	int child_fd[2] = {-1, -1}, read_fd[2] = {-1, -1}, file_fd[2] = {-1, -1};
	struct spawn_req req = {
		.path = a->job->prog.path,
		.watch_fd = a->cfg.watchdog ? a->cfg.watchdog->fd : -1,
		.dfl_sigs = a->cfg.dfl_sigs,
		.ndfl_sigs = a->cfg.ndfl_sigs,
		.nofile = a->cfg.nofile,
		.ptracer = a->cfg.ptracer,
	};
	char **env = NULL, **argv = NULL;
	int64_t started_us;
	pid_t pid;
	int s, rc;

	free(w->error_file);
	w->error_file = NULL; /* --log-dir /dev/null: none */
	if (!a->job->logs_off &&
	    (w->error_file = logdir_path(&a->logdir, w->local_rank, "error.json")) == NULL)
		return -ENOMEM;
	for (s = 0; s < 2; s++) {
		rc = plan_stream(a, w, s, &child_fd[s], &read_fd[s], &file_fd[s], err, errlen);
		if (rc != 0)
			goto fail;
	}
	hang_env(a, &contract);
	env = workenv_build(a->cfg.worker_env, &contract, w->local_rank,
			    a->job->logs_off ? "" : w->error_file);
	argv = prog_argv_for(&a->job->prog, w->local_rank);
	rc = -ENOMEM;
	if (env == NULL || argv == NULL)
		goto fail;
	req.argv = argv;
	req.envp = env;
	if (a->job->cpu_sets != NULL)
		req.affinity = &a->job->cpu_sets[w->local_rank];
	req.stdout_fd = child_fd[0];
	req.stderr_fd = child_fd[1];
	/* Before the spawn: the worker may write its error file at once. */
	started_us = report_start_us();
	pid = spawn_worker(&req);
	if (pid < 0) {
		rc = pid;
		snprintf(err, errlen, "cannot start worker %d: fork: %s", w->local_rank,
			 strerror(-rc));
		goto fail;
	}
	w->pid = pid;
	w->running = true;
	w->exited_ok = false;
	w->started_us = started_us;
	w->group_live = true;
	a->nrunning++;
	for (s = 0; s < 2; s++) {
		close_fd(child_fd[s], a->devnull);
		if (read_fd[s] < 0)
			continue;
		w->stream[s].console_fd = job_rank_shown(a->job, w->local_rank) ? s + 1 : -1;
		w->stream[s].keep_tail = s == 1;
		w->stream[s].file_fd = file_fd[s];
		w->stream[s].prefix = w->prefix[s];
		w->stream[s].prefix_len = strlen(w->prefix[s]);
		w->stream[s].line_cb = agent_dup_cb(
			a, s, (cli_std_get(&a->job->tee, w->local_rank) & (s + 1)) != 0);
		w->stream[s].closed_cb = agent_stream_closed;
		w->stream[s].data = a;
		if (output_stream_start(a->loop, &w->stream[s], read_fd[s]) == 0)
			a->open_streams++;
	}
	free(env);
	prog_argv_free(&a->job->prog, argv);
	return 0;
fail:
	for (s = 0; s < 2; s++) {
		close_fd(child_fd[s], a->devnull);
		close_fd(read_fd[s], -1);
		close_fd(file_fd[s], child_fd[s]);
	}
	free(env);
	prog_argv_free(&a->job->prog, argv);
	return rc;
}

void agent_worker_failure_output(struct agent *a, struct agent_worker *w, struct report_entry *e)
{
	bool to_file = (cli_std_get(&a->job->redirects, w->local_rank) & CLI_STD_ERR) != 0 ||
		       (cli_std_get(&a->job->tee, w->local_rank) & CLI_STD_ERR) != 0;
	char *log = to_file ? logdir_path(&a->logdir, w->local_rank, stream_file[1]) : NULL;
	static char tail[REPORT_TAIL_BYTES];
	struct report_output out = {
		.python = a->job->prog.python,
		.interpreter = a->job->prog.path,
		.interp_name = a->job->prog.exe_name,
		.from_env = a->job->prog.exe_from_env,
		.log_file = log,
		.reader_gone = output_console_reader_gone(1) || output_console_reader_gone(2),
	};
	ssize_t n;

	/* The worker has exited: all it wrote is in the pipe, or in its file. */
	if (w->stream[1].open)
		output_stream_drain(&w->stream[1]);
	if (w->stream[1].keep_tail) {
		out.tail_len = output_tail(&w->stream[1], tail, sizeof(tail), &out.tail_cut);
		out.tail = tail;
	} else if (log != NULL &&
		   (n = report_file_tail(log, tail, sizeof(tail), &out.tail_cut)) >= 0) {
		out.tail_len = (size_t)n;
		out.tail = tail;
	}
	report_entry_add_output(e, &out); /* ENOMEM: the entry without it */
	free(log);
}

void agent_worker_signal(struct agent_worker *w, int sig)
{
	if (!w->group_live || (sig == SIGKILL && agent_test_no_sigkill()))
		return;
	if (kill(-w->pid, sig) == 0)
		return;
	/* ESRCH while the worker runs: it has not called setsid() yet. Signal it
	 * directly; its handlers are the default ones by then (spawn_worker.c). */
	if (errno == ESRCH && w->running)
		kill(w->pid, sig);
}

void agent_watchdog_forget(struct agent *a, pid_t pgid)
{
	if (a->cfg.watchdog != NULL)
		watchdog_forget(a->cfg.watchdog, pgid);
}
