/* report: failure entries and torchrun's failure summary (see report.h). */
#include "report.h"

#include <cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "signame.h"
#include "text.h"
#include "util.h"
#include "workenv.h"

#define NO_TRACEBACK "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
#define WIDTH_MAX    60
#define NOT_REGULAR  (-EINVAL) /* an error file that is no regular file */

/* Opens an error file without blocking: a worker may leave a FIFO there,
 * whose open would wait for a writer with the event loop inside it (no
 * signal, no output served). */
static int open_error_file(const char *path, int flags, struct stat *st)
{
	int fd = open(path, flags | O_NONBLOCK | O_CLOEXEC, 0644);

	if (fd < 0)
		return -errno;
	if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
		close(fd);
		return NOT_REGULAR;
	}
	return fd;
}

/* The whole file; NULL if it does not exist or cannot be read, and *why
 * says so for one that exists but is not read: NOT_REGULAR (not a regular
 * file) or -EFBIG (over REPORT_MAX_ERROR_FILE). */
static char *slurp(const char *path, size_t *len, int *why)
{
	struct stat st;
	char *buf = NULL;
	size_t n = 0;
	int fd = open_error_file(path, O_RDONLY, &st);

	*why = fd == NOT_REGULAR ? fd : 0;
	if (fd < 0)
		return NULL;
	if ((size_t)st.st_size > REPORT_MAX_ERROR_FILE) {
		*why = -EFBIG;
		goto out;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (buf == NULL)
		goto out;
	while (n < (size_t)st.st_size) {
		ssize_t r = read(fd, buf + n, (size_t)st.st_size - n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	buf[n] = '\0';
	*len = n;
out:
	close(fd);
	return buf;
}

/* libddp's marker of a secondary failure (report.h): one line, cut to
 * REPORT_CAUSE_MAX. */
static int cause_of(const cJSON *extra, char **caused_by)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(extra, "ddp_caused_by");
	char *p;

	if (!cJSON_IsString(v) || v->valuestring[0] == '\0')
		return 0;
	*caused_by = strndup(v->valuestring, REPORT_CAUSE_MAX);
	if (*caused_by == NULL)
		return -ENOMEM;
	for (p = *caused_by; *p != '\0'; p++)
		if ((unsigned char)*p < ' ')
			*p = ' ';
	return 0;
}

int report_parse_error_json(const char *json, size_t len, char **message, char **caused_by,
			    int64_t *timestamp)
{
	cJSON *root = cJSON_ParseWithLength(json, len);
	const cJSON *msg, *ts = NULL;
	const char *text = NULL;
	int64_t sec;
	int rc = -EINVAL;

	*caused_by = NULL;
	if (timestamp != NULL)
		*timestamp = REPORT_NO_TIMESTAMP;
	if (root == NULL)
		return -EINVAL;
	msg = cJSON_GetObjectItemCaseSensitive(root, "message");
	if (cJSON_IsString(msg)) {
		text = msg->valuestring;
		/* torchrun takes 0 (1970) for a missing one: none here. */
		ts = cJSON_GetObjectItemCaseSensitive(root, "timestamp");
	} else if (cJSON_IsObject(msg)) {
		const cJSON *extra = cJSON_GetObjectItemCaseSensitive(msg, "extraInfo");
		const cJSON *stack = cJSON_GetObjectItemCaseSensitive(extra, "py_callstack");
		const cJSON *m = cJSON_GetObjectItemCaseSensitive(msg, "message");

		ts = cJSON_GetObjectItemCaseSensitive(extra, "timestamp");
		/* torchrun shows the Python call stack, else the message. */
		if (cJSON_IsString(stack))
			text = stack->valuestring;
		else if (cJSON_IsString(m))
			text = m->valuestring;
		else
			text = "<N/A>";
		if (cause_of(extra, caused_by) != 0) {
			rc = -ENOMEM;
			goto out;
		}
	}
	if (text != NULL) {
		size_t n = strlen(text);

		while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r'))
			n--; /* tracebacks end in a newline */
		*message = strndup(text, n);
		rc = *message ? 0 : -ENOMEM;
		if (rc == 0 && timestamp != NULL && report_timestamp_of(ts, &sec))
			*timestamp = sec;
	}
out:
	if (rc != 0) {
		free(*caused_by);
		*caused_by = NULL;
	}
	cJSON_Delete(root);
	return rc;
}

int report_entry_init(struct report_entry *e, int global_rank, int local_rank, pid_t pid,
		      int wstatus, const char *error_file, int64_t started_us, int64_t time_us)
{
	char buf[160], sname[32];
	size_t len = 0;
	int why = 0;

	memset(e, 0, sizeof(*e));
	e->global_rank = global_rank;
	e->local_rank = local_rank;
	e->pid = pid;
	e->exitcode = WIFSIGNALED(wstatus) ? -WTERMSIG(wstatus) : WEXITSTATUS(wstatus);
	e->time_us = time_us;
	if (error_file != NULL)
		e->error_json = slurp(error_file, &len, &why);
	e->error_big = why == -EFBIG;
	if (why != 0) {
		/* There is a file, unread: the summary names it and says why. */
		e->error_file = strdup(error_file);
		if (e->error_file == NULL)
			return -ENOMEM;
		snprintf(buf, sizeof(buf),
			 why == -EFBIG ? "<error file over %u MiB: not read, see the file>"
				       : "<error file is not a regular file: not read>",
			 REPORT_MAX_ERROR_FILE >> 20);
	} else if (e->error_json != NULL) {
		int64_t ts;
		int rc;

		e->error_file = strdup(error_file);
		if (e->error_file == NULL)
			return -ENOMEM;
		rc = report_parse_error_json(e->error_json, len, &e->message, &e->caused_by, &ts);
		if (rc == -ENOMEM)
			return rc;
		if (rc == 0) {
			e->time_us = report_dated_us(ts, started_us, time_us);
			return 0;
		}
		snprintf(buf, sizeof(buf), "%s", REPORT_BAD_ERROR_FILE);
	} else if (e->exitcode < 0) {
		/* One without a name is torchrun's "<N/A>" (signal.Signals has
		 * none for it). */
		signame_of(-e->exitcode, sname, sizeof(sname));
		snprintf(buf, sizeof(buf), "Signal %d (%s) received by PID %d", -e->exitcode,
			 isdigit((unsigned char)sname[3]) ? "<N/A>" : sname, (int)pid);
	} else {
		snprintf(buf, sizeof(buf), "%s", NO_TRACEBACK);
	}
	e->message = strdup(buf);
	return e->message ? 0 : -ENOMEM;
}

void report_entry_free(struct report_entry *e)
{
	free(e->caused_by);
	free(e->error_file);
	free(e->message);
	free(e->error_json);
	free(e->host);
	free(e->tail);
	free(e->log_file);
	free(e->cause);
	free(e->interpreter);
	memset(e, 0, sizeof(*e));
}

int report_exit_status(const struct report_entry *e)
{
	if (e->exitcode < 0)
		return 128 + -e->exitcode;
	return e->exitcode;
}

bool report_cause_before(const struct report_entry *a, const struct report_entry *b)
{
	bool a2 = a->caused_by != NULL, b2 = b->caused_by != NULL;

	/* After the stop, whatever it says: the stop may be what it failed of
	 * (a checkpoint on SIGTERM that fails against peers already gone). */
	if (a->late != b->late)
		return !a->late;
	if (a2 != b2)
		return !a2; /* a primary failure caused what followed it */
	/* One that ended on its own before the stop comes first: one still
	 * running then may have written its error file before its agent saw
	 * the first exit only because that agent was slow. */
	if (a->stopped != b->stopped)
		return !a->stopped;
	if (a->time_us != b->time_us)
		return a->time_us < b->time_us;
	return a->global_rank < b->global_rank;
}

size_t report_make_primary(struct report_entry *e, size_t n, int rank, const char *cause)
{
	size_t i, k = 0;

	for (i = 0; i < n; i++)
		if (e[i].global_rank == rank && e[i].caused_by != NULL &&
		    strcmp(e[i].caused_by, cause) == 0) {
			free(e[i].caused_by);
			e[i].caused_by = NULL;
			k++;
		}
	return k;
}

size_t report_root_cause(const struct report_entry *e, size_t n)
{
	size_t i, best = 0;

	for (i = 1; i < n; i++)
		if (report_cause_before(&e[i], &e[best]))
			best = i;
	return best;
}

/* What report_cause.c found: cause, interpreter, the last stderr lines
 * (indented by four spaces) and where the whole of it is. */
static void format_output(struct text *t, const struct report_entry *e)
{
	const char *p, *nl;
	int n = 0;

	if (e->cause != NULL)
		text_printf(t, "  cause     : %s\n", e->cause);
	if (e->interpreter != NULL)
		text_printf(t, "  python    : %s\n", e->interpreter);
	if (e->tail == NULL) {
		if (e->log_file != NULL)
			text_printf(t, "  stderr    : %s\n", e->log_file);
		return;
	}
	for (p = e->tail; *p != '\0'; p = nl ? nl + 1 : p + strlen(p), n++)
		nl = strchr(p, '\n');
	text_puts(t, "  stderr    : ");
	if (n == 0)
		text_puts(t, "<empty>");
	else
		text_printf(t, "last %d line%s", n, n == 1 ? "" : "s");
	if (e->log_file != NULL) {
		text_puts(t, n == 0 ? " (log: " : " (whole log: ");
		text_puts(t, e->log_file);
		text_puts(t, ")");
	}
	text_puts(t, n == 0 ? "\n" : ":\n");
	for (p = e->tail; *p != '\0'; p = nl ? nl + 1 : p + strlen(p)) {
		nl = strchr(p, '\n');
		text_puts(t, "    ");
		text_add(t, p, nl ? (size_t)(nl - p) : strlen(p));
		text_puts(t, "\n");
	}
}

/* One "[idx]:" block, multi-line messages indented by two spaces; note: a
 * "note" line after caused_by, or NULL. */
static void format_failure(struct text *t, size_t idx, const char *host,
			   const struct report_entry *e, const char *note)
{
	char when[32];
	struct tm tm;
	/* Floor division: a time before 1970 rounds down like one after it. */
	int64_t s = e->time_us / 1000000 - (e->time_us % 1000000 < 0);
	time_t ts = (time_t)s;
	const char *m, *nl;

	localtime_r(&ts, &tm);
	strftime(when, sizeof(when), "%Y-%m-%d_%H:%M:%S", &tm);
	text_printf(t, "[%zu]:\n", idx);
	/* torchrun's layout shows whole seconds; the microseconds only order
	 * the failures (report_cause_before). */
	text_printf(t, "  time      : %s\n", when);
	text_puts(t, "  host      : ");
	text_puts(t, e->host ? e->host : host);
	text_puts(t, "\n");
	text_printf(t, "  rank      : %d (local_rank: %d)\n", e->global_rank, e->local_rank);
	/* torchrun 2.x names a signal after the pid, two spaces on: "-11 (pid: 7)
	 * (SIGSEGV)"; one without a name (SIG40), as Python's, not. */
	char sig[32];
	if (e->exitcode < 0 &&
	    !isdigit((unsigned char)signame_of(-e->exitcode, sig, sizeof(sig))[3])) {
		text_printf(t, "  exitcode  : %d (pid: %d)  (%s)\n", e->exitcode, (int)e->pid, sig);
	} else {
		text_printf(t, "  exitcode  : %d (pid: %d)\n", e->exitcode, (int)e->pid);
	}
	text_puts(t, "  error_file: ");
	text_puts(t, e->error_file ? e->error_file : "<N/A>");
	if (e->caused_by != NULL) {
		text_puts(t, "\n  caused_by : ");
		text_puts(t, e->caused_by);
	}
	if (e->late)
		text_puts(t,
			  "\n  note      : failed after the stop began (its error file came then)");
	if (note != NULL) {
		text_puts(t, "\n  note      : ");
		text_puts(t, note);
	}
	text_puts(t, "\n  traceback : ");
	for (m = e->message; (nl = strchr(m, '\n')) != NULL; m = nl + 1) {
		text_add(t, m, (size_t)(nl - m + 1));
		text_puts(t, "  ");
	}
	text_puts(t, m);
	text_puts(t, "\n");
	format_output(t, e);
}

static size_t widest_line(const char *s)
{
	size_t w = 0;

	while (*s != '\0') {
		const char *nl = strchr(s, '\n');
		size_t n = nl ? (size_t)(nl - s) : strlen(s);

		if (n > w)
			w = n;
		s += n + (nl ? 1 : 0);
	}
	return w;
}

static void rule(struct text *t, char c, size_t width)
{
	char line[WIDTH_MAX + 1];

	memset(line, c, width);
	line[width] = '\n';
	text_add(t, line, width + 1);
}

char *report_format(const char *entrypoint, const char *host, const struct report_entry *e,
		    size_t n)
{
	return report_format_root(entrypoint, host, e, n, report_root_cause(e, n), NULL);
}

/* The rank that the root cause's error says it waited for in vain
 * (WORKENV_CAUSE_LATE_FMT, exactly: the text is the worker's, so a number
 * of more than 9 digits, a sign, other spaces or more after it are not
 * that) when that rank has no failure among e: it was still running, and
 * is what the job waited on. -1 otherwise. */
static int late_rank(const struct report_entry *e, size_t n, size_t r, int *pid)
{
	const char *cause = r < n ? e[r].caused_by : NULL, *p;
	char again[REPORT_CAUSE_MAX + 1];
	size_t digits = 0, i;
	int rank;

	if (cause == NULL)
		return -1;
	for (p = cause; *p != '\0'; p++) /* sscanf's %d must not overflow */
		if ((digits = isdigit((unsigned char)*p) ? digits + 1 : 0) > 9)
			return -1;
	if (sscanf(cause, WORKENV_CAUSE_LATE_FMT, &rank, pid) != 2 || rank < 0 ||
	    snprintf(again, sizeof(again), WORKENV_CAUSE_LATE_FMT, rank, *pid) < 0 ||
	    strcmp(again, cause) != 0)
		return -1;
	for (i = 0; i < n; i++) /* one after the stop is not its own */
		if (e[i].global_rank == rank && !e[i].late)
			return -1;
	return rank;
}

char *report_format_root(const char *entrypoint, const char *host, const struct report_entry *e,
			 size_t n, size_t r, const char *elsewhere)
{
	struct text root = {0}, others = {0}, out = {0}, note = {0};
	size_t i, idx = 0, width;
	int late, pid = 0;

	/* Each node prints its own failures, as torchrun's agents do; the
	 * heading stays torchrun's, the note says whose first it is. */
	if (elsewhere != NULL)
		text_printf(&note,
			    "this node's first failure only: the job's root cause\n"
			    "              is %s",
			    elsewhere);
	if ((late = late_rank(e, n, r, &pid)) >= 0)
		text_printf(&note,
			    "%srank %d (pid %d) has no failure of its own on record: it\n"
			    "              was still running when the others gave up waiting for\n"
			    "              it (ddprun --hang-timeout shows where such a rank is)",
			    note.len > 0 ? "\n              " : "", late, pid);
	else if (r < n && e[r].caused_by != NULL && strcmp(e[r].caused_by, REPORT_CAUSE_HANG) == 0)
		/* Not the hang's cause: a hang's SIGABRTs come at once, and
		 * which rank the clock saw first says nothing. */
		text_printf(&note,
			    "%sddprun stopped this rank for the hang: it is first only by\n"
			    "              the clock (the hang's verdict says which rank, if any,\n"
			    "              the others waited for)",
			    note.len > 0 ? "\n              " : "");
	for (i = 0; i < n; i++) {
		if (i == r)
			format_failure(&root, idx++, host, &e[i], note.len > 0 ? note.p : NULL);
		else
			format_failure(&others, idx++, host, &e[i], NULL);
	}
	if (others.len == 0)
		text_puts(&others, "  <NO_OTHER_FAILURES>\n");
	width = strlen(entrypoint) + 7;
	if (root.p != NULL && widest_line(root.p) > width)
		width = widest_line(root.p);
	if (widest_line(others.p) > width)
		width = widest_line(others.p);
	if (width > WIDTH_MAX)
		width = WIDTH_MAX;
	rule(&out, '=', width);
	text_puts(&out, entrypoint);
	text_puts(&out, " FAILED\n");
	rule(&out, '-', width);
	text_puts(&out, "Failures:\n");
	text_add(&out, others.p, others.len);
	rule(&out, '-', width);
	text_puts(&out, "Root Cause (first observed failure):\n");
	if (root.p != NULL)
		text_add(&out, root.p, root.len);
	rule(&out, '=', width);
	free(root.p);
	free(others.p);
	free(note.p);
	if (root.oom || others.oom || out.oom || note.oom) {
		free(out.p);
		return NULL;
	}
	return out.p;
}

/* The parent's error file, whatever it is (torchrun's open(path, "w")
 * writes to /dev/stderr or a FIFO too), but never waited for: a FIFO
 * nobody reads is ENXIO, and the descriptor stays non-blocking for
 * write_parent. Our own open file description: a /dev/stderr pipe or
 * terminal keeps its flags. */
static int open_parent_file(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NONBLOCK | O_CLOEXEC, 0644);

	return fd < 0 ? -errno : fd;
}

/* Writes it all, as fast as the reader takes it, but gives up (-ETIMEDOUT)
 * once REPORT_PARENT_STALL_MS pass without a byte taken: a FIFO whose
 * reader never reads, a terminal stopped by ^S, would hold ddprun (its
 * exit, its signals) for ever. */
static int write_parent(int fd, const char *p, size_t len)
{
	int64_t deadline = util_now_ms() + REPORT_PARENT_STALL_MS;

	while (len > 0) {
		ssize_t n = write(fd, p, len);
		struct pollfd pfd = {.fd = fd, .events = POLLOUT};
		int64_t left;

		if (n > 0) {
			p += n;
			len -= (size_t)n;
			deadline = util_now_ms() + REPORT_PARENT_STALL_MS;
			continue;
		}
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return -errno;
		left = deadline - util_now_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		if (poll(&pfd, 1, (int)left) < 0 && errno != EINTR)
			return -errno;
	}
	return 0;
}

/* An error file too large to read whole goes to the parent's as it is (its
 * errorCode not rewritten), in bounded pieces, up to REPORT_MAX_COPY. */
static int copy_error_file(const char *path, const char *from)
{
	char chunk[65536];
	struct stat st;
	int in = open_error_file(from, O_RDONLY, &st), out, rc = 0;
	ssize_t n;

	if (in < 0)
		return in == NOT_REGULAR ? 0 : in; /* the summary said why, nothing to pass */
	if ((uint64_t)st.st_size > REPORT_MAX_COPY) {
		close(in);
		return -EFBIG;
	}
	out = open_parent_file(path);
	if (out < 0) {
		close(in);
		return out;
	}
	while (rc == 0 && (n = read(in, chunk, sizeof(chunk))) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		rc = n < 0 ? -errno : write_parent(out, chunk, (size_t)n);
	}
	close(in);
	close(out);
	return rc;
}

static int write_parent_text(const char *path, const char *text)
{
	int fd = open_parent_file(path), rc;

	if (fd < 0)
		return fd;
	rc = write_parent(fd, text, strlen(text));
	close(fd);
	return rc;
}

char *report_error_doc(const char *message, const char *callstack, const char *caused_by)
{
	cJSON *root = cJSON_CreateObject(), *msg, *extra;
	char ts[32], *text = NULL;

	snprintf(ts, sizeof(ts), "%lld", (long long)time(NULL));
	msg = cJSON_AddObjectToObject(root, "message");
	if (msg == NULL || cJSON_AddStringToObject(msg, "message", message) == NULL)
		goto out;
	extra = cJSON_AddObjectToObject(msg, "extraInfo");
	if (extra == NULL ||
	    (callstack != NULL &&
	     cJSON_AddStringToObject(extra, "py_callstack", callstack) == NULL) ||
	    cJSON_AddStringToObject(extra, "timestamp", ts) == NULL ||
	    (caused_by != NULL &&
	     cJSON_AddStringToObject(extra, "ddp_caused_by", caused_by) == NULL))
		goto out;
	text = cJSON_PrintUnformatted(root);
	if (text != NULL)
		util_utf8_repair(&text);
out:
	cJSON_Delete(root);
	return text;
}

static char parent_reason[600];
static bool parent_reported;

void report_note_reason(const char *fmt, ...)
{
	va_list ap;

	if (parent_reason[0] != '\0')
		return;
	va_start(ap, fmt);
	vsnprintf(parent_reason, sizeof(parent_reason), fmt, ap);
	va_end(ap);
}

void report_parent_reported(void)
{
	parent_reported = true;
}

int report_write_parent_reason(const char *path, int status)
{
	char *text;
	int rc;

	if (status == 0 || path == NULL || parent_reported || parent_reason[0] == '\0')
		return 0;
	/* torchrun's callstack is the agent's Python traceback; ddprun has
	 * none to give, and says again what happened. */
	text = report_error_doc(parent_reason, parent_reason, NULL);
	if (text == NULL)
		return -ENOMEM;
	rc = write_parent_text(path, text);
	free(text);
	return rc;
}

int report_write_parent_error(const char *path, const struct report_entry *root)
{
	cJSON *j;
	cJSON *msg;
	char *text;
	int rc;

	/* Only this node's: another node's error_file (a root cause the
	 * coordinator passed on) names a file there, not here. */
	if (root->error_big)
		return copy_error_file(path, root->error_file);
	if (root->error_json == NULL)
		return 0;
	j = cJSON_Parse(root->error_json);
	if (j == NULL) /* nothing a reader could parse: the caller says so */
		return -EBADMSG;
	msg = cJSON_GetObjectItemCaseSensitive(j, "message");
	if (cJSON_IsObject(msg) && root->exitcode != 0) {
		cJSON_DeleteItemFromObjectCaseSensitive(msg, "errorCode");
		cJSON_AddNumberToObject(msg, "errorCode", root->exitcode);
	}
	/* A failure made primary since its file was written (a hang's verdict
	 * named the rank, report_make_primary) is no consequence to an outer
	 * launcher either: it reads the marker as this report did. */
	if (cJSON_IsObject(msg) && root->caused_by == NULL) {
		cJSON *extra = cJSON_GetObjectItemCaseSensitive(msg, "extraInfo");

		/* (every copy: a reader may take another than cause_of did) */
		while (cJSON_GetObjectItemCaseSensitive(extra, "ddp_caused_by") != NULL)
			cJSON_DeleteItemFromObjectCaseSensitive(extra, "ddp_caused_by");
	}
	text = cJSON_PrintUnformatted(j);
	cJSON_Delete(j);
	if (text == NULL || util_utf8_repair(&text) < 0)
		return -ENOMEM;
	rc = write_parent_text(path, text);
	free(text);
	return rc;
}
