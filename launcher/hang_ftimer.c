/* hang_ftimer: torchrun's file timer (TORCHELASTIC_ENABLE_FILE_TIMER=1).
 *
 * As torchrun's FileTimerServer: a FIFO at TORCHELASTIC_TIMER_FILE (ddprun's
 * own value, else <tmp>/watchdog_timer_<random>, tmpdir.h), given to the workers in
 * the same variable. torch.distributed.elastic.timer.FileTimerClient writes
 * one JSON request per line, {"version": 1, "pid": P, "scope_id": S,
 * "expiration_time": T, "signal": N} (T in epoch seconds; T < 0 releases
 * (P, S)); the same in PyTorch 1.13 and 2.x. When a timer expires, its pid
 * gets its signal (FileTimerClient's default: SIGKILL; a signal <= 0 only
 * says so), its timers are dropped, and the rank's error file says why, so
 * the failure report does. Unlike torchrun, only processes of this node's
 * worker process groups are ever signalled (a request naming any other pid
 * is refused), and ddprun itself is not killed. */
#include "hang.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>

#include "agent_int.h"
#include "signame.h"
#include "tmpdir.h"
#include "workenv.h"

#define FT_MAX_TIMERS 4096
#define FT_MAX_LINE   4096 /* requests are at most PIPE_BUF */
#define FT_TICK_MS    100

struct ft_timer {
	int pid;
	char scope[128];
	double expires; /* epoch seconds */
	int sig;
};

struct hang_ftimer {
	struct agent *a;
	char path[4096];
	uv_pipe_t pipe;
	bool pipe_init;
	uv_timer_t tick;
	bool tick_init, tick_on;
	char line[FT_MAX_LINE];
	size_t nline;
	bool skipping; /* an over-long line: drop it to its end */
	bool ok;       /* serving: the workers get the path */
	struct ft_timer *t;
	size_t n;
	char buf[FT_MAX_LINE];
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The local worker whose process group holds pid, or NULL. */
static struct agent_worker *owner(struct agent *a, int pid)
{
	pid_t pg = getpgid((pid_t)pid);
	int i;

	if (pid <= 0 || pg < 0)
		return NULL;
	for (i = 0; i < a->job->nproc; i++)
		if (a->w[i].group_live && a->w[i].pid == pg)
			return &a->w[i];
	return NULL;
}

static void drop(struct hang_ftimer *f, size_t i)
{
	f->t[i] = f->t[--f->n];
}

static void on_tick(uv_timer_t *t);

static void request(struct hang_ftimer *f, const char *line)
{
	cJSON *j = cJSON_Parse(line);
	const cJSON *pid, *scope, *exp, *sig;
	size_t i;

	if (j == NULL) {
		agent_say("file timer: ignored a request that is not JSON");
		return;
	}
	pid = cJSON_GetObjectItemCaseSensitive(j, "pid");
	scope = cJSON_GetObjectItemCaseSensitive(j, "scope_id");
	exp = cJSON_GetObjectItemCaseSensitive(j, "expiration_time");
	sig = cJSON_GetObjectItemCaseSensitive(j, "signal");
	if (!cJSON_IsNumber(pid) || !cJSON_IsString(scope) || !cJSON_IsNumber(exp) ||
	    (sig != NULL && !cJSON_IsNumber(sig))) {
		agent_say("file timer: ignored a request without pid, scope_id and "
			  "expiration_time");
		goto out;
	}
	for (i = 0; i < f->n; i++)
		if (f->t[i].pid == pid->valueint && strcmp(f->t[i].scope, scope->valuestring) == 0)
			break;
	if (exp->valuedouble < 0) { /* release */
		if (i < f->n)
			drop(f, i);
		goto out;
	}
	if (owner(f->a, pid->valueint) == NULL) {
		agent_say("file timer: refused a timer for pid %d: not a worker of this node",
			  pid->valueint);
		goto out;
	}
	if (i == f->n) {
		if (f->n == FT_MAX_TIMERS) {
			agent_say("file timer: more than %d timers: ignored scope '%.100s'",
				  FT_MAX_TIMERS, scope->valuestring);
			goto out;
		}
		f->n++;
	}
	f->t[i].pid = pid->valueint;
	snprintf(f->t[i].scope, sizeof(f->t[i].scope), "%s", scope->valuestring);
	f->t[i].expires = exp->valuedouble;
	f->t[i].sig = sig != NULL ? sig->valueint : 0;
	if (f->tick_init && !f->tick_on) {
		uv_timer_start(&f->tick, on_tick, FT_TICK_MS, FT_TICK_MS);
		f->tick_on = true;
	}
out:
	cJSON_Delete(j);
}

/* Expire: per pid, the earliest expired timer with a signal decides (as
 * torchrun's FileTimerServer). */
static void on_tick(uv_timer_t *tm)
{
	struct hang_ftimer *f = tm->data;
	struct agent *a = f->a;
	double now = now_s();
	size_t i, k;

	for (i = 0; i < f->n;) {
		struct ft_timer *best = NULL;
		struct agent_worker *w;
		int pid = f->t[i].pid;
		char name[32], msg[512];

		if (f->t[i].expires > now || a->state != AS_RUNNING) {
			i++;
			continue;
		}
		for (k = 0; k < f->n; k++)
			if (f->t[k].pid == pid && f->t[k].expires <= now && f->t[k].sig > 0 &&
			    (best == NULL || f->t[k].expires < best->expires))
				best = &f->t[k];
		w = owner(a, pid);
		if (best == NULL) {
			agent_say("file timer '%.100s' of pid %d expired; it has no signal: not "
				  "killed",
				  f->t[i].scope, pid);
		} else if (w == NULL) {
			agent_say("file timer '%.100s' of pid %d expired; the process is gone",
				  best->scope, pid);
		} else {
			signame_of(best->sig, name, sizeof(name));
			snprintf(msg, sizeof(msg),
				 "TimerExpired: file timer '%.100s' of pid %d expired; ddprun sent "
				 "it %s (TORCHELASTIC_ENABLE_FILE_TIMER)",
				 best->scope, pid, name);
			agent_say("rank %d (local rank %d): file timer '%.100s' of pid %d expired: "
				  "%s",
				  a->world.rank_offset + w->local_rank, w->local_rank, best->scope,
				  pid, name);
			if (pid == (int)w->pid)
				hang_write_error_file(w->error_file, msg, NULL);
			kill((pid_t)pid, best->sig);
		}
		/* Every timer of that pid goes (torchrun: clear_timers). */
		for (k = 0; k < f->n;)
			if (f->t[k].pid == pid)
				drop(f, k);
			else
				k++;
		i = 0;
	}
	/* Timers of processes that are gone (2.x's FileTimerServer). */
	for (i = 0; i < f->n;)
		if (kill((pid_t)f->t[i].pid, 0) != 0 && errno == ESRCH)
			drop(f, i);
		else
			i++;
	if (f->n == 0 && f->tick_on) {
		uv_timer_stop(&f->tick);
		f->tick_on = false;
	}
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	struct hang_ftimer *f = h->data;

	buf->base = f->buf;
	buf->len = sizeof(f->buf);
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
	struct hang_ftimer *f = st->data;
	ssize_t i;

	if (nread < 0) {
		/* O_RDWR: there is always a writer (us), so no EOF; an error ends
		 * the timer service. */
		agent_say("file timer: reading %s failed: %s", f->path, uv_strerror((int)nread));
		uv_read_stop(st);
		return;
	}
	for (i = 0; i < nread; i++) {
		char c = buf->base[i];

		if (c == '\n') {
			f->line[f->nline] = '\0';
			if (!f->skipping && f->nline > 0)
				request(f, f->line);
			f->nline = 0;
			f->skipping = false;
		} else if (f->nline + 1 < sizeof(f->line)) {
			f->line[f->nline++] = c;
		} else {
			f->skipping = true;
		}
	}
}

static void on_closed(uv_handle_t *h)
{
	(void)h;
}

int hang_ftimer_start(struct agent *a, struct hang_ftimer **out)
{
	const char *on = getenv("TORCHELASTIC_ENABLE_FILE_TIMER");
	const char *path = getenv(WORKENV_TORCHELASTIC_TIMER_FILE);
	struct hang_ftimer *f;
	int fd, rc;

	*out = NULL;
	if (on == NULL || strcmp(on, "1") != 0)
		return 0;
	f = calloc(1, sizeof(*f));
	if (f == NULL)
		return -ENOMEM;
	f->a = a;
	f->t = calloc(FT_MAX_TIMERS, sizeof(*f->t));
	if (f->t == NULL) {
		free(f);
		return -ENOMEM;
	}
	if (path != NULL && path[0] != '\0') {
		snprintf(f->path, sizeof(f->path), "%s", path);
	} else {
		char tmp[sizeof(f->path) - 40]; /* room left for the name below */
		unsigned r;

		rc = tmpdir_find(tmp, sizeof(tmp));
		if (rc != 0)
			goto fail;
		if (getentropy(&r, sizeof(r)) != 0)
			r = (unsigned)getpid() ^ (unsigned)time(NULL);
		snprintf(f->path, sizeof(f->path), "%s/watchdog_timer_%d_%08x", tmp, (int)getpid(),
			 r);
	}
	unlink(f->path); /* as torchrun: a stale file is replaced */
	if (mkfifo(f->path, 0600) != 0) {
		rc = -errno;
		goto fail;
	}
	/* Read and write: the FIFO never reports end-of-file between clients. */
	fd = open(f->path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		unlink(f->path);
		goto fail;
	}
	rc = uv_pipe_init(a->loop, &f->pipe, 0);
	if (rc != 0) {
		close(fd);
		unlink(f->path);
		goto fail;
	}
	f->pipe.data = f;
	f->pipe_init = true;
	rc = uv_pipe_open(&f->pipe, fd);
	if (rc != 0)
		close(fd); /* not taken by the handle */
	if (rc == 0)
		rc = uv_read_start((uv_stream_t *)&f->pipe, on_alloc, on_read);
	if (rc == 0) {
		uv_unref((uv_handle_t *)&f->pipe);
		rc = uv_timer_init(a->loop, &f->tick);
	}
	if (rc != 0) {
		hang_ftimer_close(f);
		*out = f; /* its handle closes in the loop: freed by hang_ftimer_destroy */
		return rc;
	}
	f->tick.data = f;
	f->tick_init = true;
	f->ok = true;
	agent_say("file timer: workers' requests are read from %s (TORCHELASTIC_TIMER_FILE)",
		  f->path);
	*out = f;
	return 0;
fail:
	free(f->t);
	free(f);
	return rc;
}

const char *hang_ftimer_path(const struct hang_ftimer *f)
{
	return f->ok ? f->path : NULL;
}

void hang_ftimer_close(struct hang_ftimer *f)
{
	if (f == NULL)
		return;
	if (f->pipe_init && !uv_is_closing((uv_handle_t *)&f->pipe)) {
		uv_close((uv_handle_t *)&f->pipe, on_closed);
		unlink(f->path);
	}
	if (f->tick_init && !uv_is_closing((uv_handle_t *)&f->tick))
		uv_close((uv_handle_t *)&f->tick, on_closed);
}

void hang_ftimer_destroy(struct hang_ftimer *f)
{
	if (f == NULL)
		return;
	free(f->t);
	free(f);
}
