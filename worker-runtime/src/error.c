/* error: error codes and texts, the per-thread detailed message and its
 * cause, and failures recorded in torchelastic's error-file format for the
 * launcher.
 *
 * A failure caused by another rank's (it exited, disconnected or timed out)
 * carries that rank in the error file as message.extraInfo.ddp_caused_by, so
 * that the launcher's report puts the rank that failed on its own first. */
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>

#include "ddp_internal.h"
#include "util.h"
#include "workenv.h"

#define DDPI_CAUSE_MAX 160

static __thread char errmsg[512];
static __thread char errcause[DDPI_CAUSE_MAX]; /* errmsg's cause; "" when its own */
static int log_rank = -1;
/* The cause of the failure that broke this process's communicator (or its
 * ddp_init); "" when none. The communication thread may set it. */
static pthread_mutex_t cause_lock = PTHREAD_MUTEX_INITIALIZER;
static char proc_cause[DDPI_CAUSE_MAX];

const char *ddp_strerror(int err)
{
	switch (err) {
	case 0:
		return "success";
	case -ETIMEDOUT:
		return "timed out (see DDP_TIMEOUT)";
	case DDP_EBROKEN:
		return "communicator broken by an earlier failure";
	case DDP_ENOGPU:
		return "nccl backend requested but no GPU is visible";
	case DDP_ENOTBUILT:
		return "not built into this libddp (rebuild with CUDA=1)";
	case DDP_ENCCL:
		return "NCCL error";
	case DDP_ECUDA:
		return "CUDA error";
	case DDP_ENOTREADY:
		return "a parameter's gradient was never marked ready";
	case DDP_EPEER:
		return "a peer rank failed (exited, disconnected or gave up on the call)";
	case DDP_ECHILD:
		return "a spawned process failed";
	case DDP_EENV:
		return "inconsistent launcher environment";
	}
	if (err < 0 && err > -4096)
		return strerror(-err); /* glibc: static text for known codes */
	return "unknown error";
}

const char *ddp_errmsg(void)
{
	return errmsg;
}

int ddpi_err(int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(errmsg, sizeof(errmsg), fmt, ap);
	va_end(ap);
	errcause[0] = '\0'; /* a new error: its own until said otherwise */
	return code;
}

int ddpi_caused_by(int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(errcause, sizeof(errcause), fmt, ap);
	va_end(ap);
	return code;
}

const char *ddpi_cause(void)
{
	return errcause;
}

int ddpi_err_prefix(int code, const char *what)
{
	char tmp[sizeof(errmsg)];

	/* Truncation is fine: the message is for humans. */
	if (snprintf(tmp, sizeof(tmp), "%s: %s", what, errmsg[0] ? errmsg : ddp_strerror(code)) < 0)
		return code;
	memcpy(errmsg, tmp, sizeof(errmsg));
	return code;
}

void ddpi_set_log_rank(int rank)
{
	log_rank = rank;
}

int ddpi_log_rank(void)
{
	return log_rank;
}

/* Appends text to the growing string *out (NULL after an allocation failure). */
static void append(char **out, size_t *len, size_t *cap, const char *text)
{
	size_t add = strlen(text);

	if (!*out)
		return;
	if (*len + add + 1 > *cap) {
		while (*len + add + 1 > *cap)
			*cap *= 2;
		char *p = realloc(*out, *cap);
		if (!p) {
			free(*out);
			*out = NULL;
			return;
		}
		*out = p;
	}
	memcpy(*out + *len, text, add + 1);
	*len += add;
}

/* The calling thread's stack (less its skip innermost frames: libddp's own
 * error path), then the message, the way a Python traceback ends with the
 * exception: that is what the launcher's report shows. Frame names need the
 * program linked with -rdynamic; addresses are always there. */
__attribute__((noinline)) static char *traceback_text(const char *msg, int skip)
{
	void *frames[64];
	int n = backtrace(frames, 64);
	char **syms = backtrace_symbols(frames, n);
	size_t cap = 256, len = 0;
	char *out = malloc(cap);

	if (out)
		out[0] = '\0';
	append(&out, &len, &cap, "C backtrace (most recent call first):\n");
	for (int i = skip; i < n; i++) {
		char line[512];
		snprintf(line, sizeof(line), "  #%d %s\n", i - skip, syms ? syms[i] : "?");
		append(&out, &len, &cap, line);
	}
	append(&out, &len, &cap, msg);
	free(syms);
	return out;
}

/* The error file: msg, the stack (less skip frames), cause when not "".
 * Not inlined, like traceback_text: skip counts frames. */
__attribute__((noinline)) static int write_error_file(const char *msg, const char *cause, int skip)
{
	const char *path = getenv(WORKENV_TORCHELASTIC_ERROR_FILE);
	cJSON *root = NULL, *m, *extra;
	char *text = NULL, *stack = NULL, ts[32], tmp[4200];
	int fd = -1, rc = -ENOMEM;

	if (!path || !*path)
		return 0;
	if (strlen(path) > 4000)
		return -ENAMETOOLONG;
	stack = traceback_text(msg ? msg : "", skip);
	snprintf(ts, sizeof(ts), "%lld", (long long)time(NULL));
	root = cJSON_CreateObject();
	m = cJSON_AddObjectToObject(root, "message");
	if (!m || !cJSON_AddStringToObject(m, "message", msg ? msg : ""))
		goto out;
	extra = cJSON_AddObjectToObject(m, "extraInfo");
	if (!extra || !cJSON_AddStringToObject(extra, "py_callstack", stack ? stack : "") ||
	    !cJSON_AddStringToObject(extra, "timestamp", ts))
		goto out;
	if (cause[0] && !cJSON_AddStringToObject(extra, "ddp_caused_by", cause))
		goto out;
	text = cJSON_PrintUnformatted(root);
	if (!text || util_utf8_repair(&text) < 0)
		goto out;
	/* Write then rename, so a reader never sees half a file; the thread id
	 * keeps the communication thread's file apart from the program's. */
	snprintf(tmp, sizeof(tmp), "%s.tmp%d.%ld", path, (int)getpid(), (long)gettid());
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = -errno;
		goto out;
	}
	rc = util_write_all(fd, text, strlen(text));
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, path) < 0)
		rc = -errno;
	if (rc < 0)
		unlink(tmp);
out:
	free(text);
	free(stack);
	cJSON_Delete(root);
	return rc;
}

void ddpi_note_failure(void)
{
	if (!errcause[0])
		return;
	pthread_mutex_lock(&cause_lock);
	if (!proc_cause[0]) /* the first peer lost is the most direct cause */
		snprintf(proc_cause, sizeof(proc_cause), "%s", errcause);
	pthread_mutex_unlock(&cause_lock);
	/* Frames: traceback_text, write_error_file, this function. */
	write_error_file(errmsg, errcause, 3);
}

void ddpi_forget_failure(void)
{
	pthread_mutex_lock(&cause_lock);
	proc_cause[0] = '\0';
	pthread_mutex_unlock(&cause_lock);
}

int ddp_record_error(const char *msg)
{
	char cause[DDPI_CAUSE_MAX];
	int rc;

	pthread_mutex_lock(&cause_lock);
	memcpy(cause, proc_cause, sizeof(cause));
	pthread_mutex_unlock(&cause_lock);
	/* Frames: traceback_text, write_error_file, this function. */
	rc = write_error_file(msg, cause, 3);
	if (rc < 0) /* here only: ddpi_note_failure keeps the failure's message */
		ddpi_err(rc, "ddp_record_error: cannot write %s=%.200s: %s",
			 WORKENV_TORCHELASTIC_ERROR_FILE, getenv(WORKENV_TORCHELASTIC_ERROR_FILE),
			 strerror(-rc));
	return rc;
}

void ddp_fatal(struct ddp_ctx *ctx, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	int rank = ddpi_ctx_known(ctx) ? ctx->env.rank : log_rank;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fflush(stdout);
	ddp_record_error(msg);
	if (rank >= 0)
		fprintf(stderr, "[rank%d] fatal: %s\n", rank, msg);
	else
		fprintf(stderr, "fatal: %s\n", msg);
	exit(1);
}
