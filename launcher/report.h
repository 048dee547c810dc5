/* report: torchrun's failure summary.
 *
 * A failure is a worker that exited non-zero or was killed by a signal. Its
 * entry records when it failed (the timestamp in its error file, as torchrun
 * dates it, else when it wrote that file or the agent observed it:
 * CLOCK_REALTIME, in microseconds) and takes its message from the worker's torchelastic error
 * file (written by PyTorch's @record or libddp) when there is one:
 *   {"message": {"message": "...", "extraInfo": {"py_callstack": "...",
 *                "timestamp": "<epoch s>", "ddp_caused_by": "<who>"}}}
 *   or {"message": "...", "timestamp": <epoch s>}
 * else the message says how the worker ended. ddp_caused_by is libddp's
 * marker of a secondary failure: one caused by another rank's (it exited,
 * disconnected or timed out); it names that rank.
 *
 * The root cause (torchrun's "first observed failure"), on one node and
 * across nodes alike: primary failures before secondary ones; among the same
 * kind, the earliest observed; ties by global rank. The layout is torchrun's
 * ChildFailedError text (plus a caused_by line for secondary failures and
 * microseconds on the time line), so tools that grep it keep working. */
#ifndef DDP_REPORT_H
#define DDP_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define REPORT_MAX_ERROR_FILE (4u << 20)
/* A larger one is copied to the parent's error file unread, up to this. */
#define REPORT_MAX_COPY (64u << 20)
/* How long the parent's error file may take no data before ddprun gives up
 * on it (a reader that never reads). */
#define REPORT_PARENT_STALL_MS 5000

struct report_entry {
	int global_rank;
	int local_rank;
	pid_t pid;
	int exitcode;	  /* exit code, or -signal (torchrun's convention) */
	int64_t time_us;  /* when it failed (report_entry_init): epoch microseconds */
	char *caused_by;  /* secondary: the rank whose failure caused it; NULL: primary */
	bool stopped;	  /* failing (its error file written) but running when stopped */
	bool late;	  /* its error file came after the stop began (and stopped) */
	char *error_file; /* path of the error file the worker wrote; NULL: none */
	char *message;	  /* what the traceback line shows */
	char *error_json; /* the error file as read, for the parent's error file */
	bool error_big;	  /* error_file is this node's, too large to read: copied as is */
	char *host;	  /* where it ran, when not the report's host; NULL: that host */
	/* What shows the cause when the error file does not (report_cause.c). */
	char *tail;	   /* its last stderr lines, cleaned; NULL: not known */
	char *log_file;	   /* its stderr log file; NULL: none */
	char *cause;	   /* the likely cause of an exit 126/127 or a loader error */
	char *interpreter; /* for a Python worker: which one ran it, and why */
};

/* The message of an entry whose error file is not torchelastic JSON. */
#define REPORT_BAD_ERROR_FILE "<error file is not torchelastic JSON>"

/* The longest caused_by kept (longer markers are cut). */
#define REPORT_CAUSE_MAX 256
/* The caused_by of a worker that ddprun stopped for a hang (hang_dump.c). */
#define REPORT_CAUSE_HANG "the hang (--hang-timeout)"

/* Fill e for a worker started at started_us that ended with wait status
 * wstatus, failed at time_us (report_failure_time_us). error_file is where
 * the worker was told to write (read if it exists: message, marker and, as
 * torchrun dates a failure, the timestamp in it: e->time_us is that second
 * when it lies between started_us and time_us, else time_us). 0 or -ENOMEM. */
int report_entry_init(struct report_entry *e, int global_rank, int local_rank, pid_t pid,
		      int wstatus, const char *error_file, int64_t started_us, int64_t time_us);
void report_entry_free(struct report_entry *e);

/* How a failed worker ran, for report_entry_add_output. */
struct report_output {
	bool python;		 /* run by the interpreter (a .py, -m, --run-path) */
	const char *interpreter; /* the executable that ran it (resolved) */
	const char *interp_name; /* what was looked up ("python3", $PYTHON_EXEC) */
	bool from_env;		 /* interp_name came from PYTHON_EXEC */
	const char *tail;	 /* its last stderr bytes (raw), tail_len of them */
	size_t tail_len;
	bool tail_cut;	      /* earlier bytes were dropped */
	const char *log_file; /* its stderr log file, or NULL */
	bool reader_gone;     /* the reader of ddprun's output there went away */
};

/* The most the report shows of a worker's stderr. */
#define REPORT_TAIL_LINES 20
#define REPORT_TAIL_BYTES 4096

/* Add to e (made by report_entry_init) what shows the cause: the last
 * REPORT_TAIL_LINES lines of its stderr (as a terminal would show them:
 * what follows a line's last carriage return, escape sequences and other
 * control characters dropped), the likely cause of an exit 127 or 126 or a
 * shared library the loader could not find, and for a Python worker the
 * interpreter; a worker that is not Python and wrote no error file gets no
 * PyTorch advice. 0 or -ENOMEM. */
int report_entry_add_output(struct report_entry *e, const struct report_output *o);
/* The cleaned last lines of raw stderr bytes (malloc'd; "" when none), at
 * most max_lines; cut: the bytes start mid-line. NULL on ENOMEM. */
char *report_tail_lines(const char *raw, size_t n, bool cut, int max_lines);
/* The likely cause of a failure with this exit code and stderr tail
 * (malloc'd), or NULL when there is nothing more to say. */
char *report_guess_cause(int exitcode, const char *tail);
/* The last bytes of the file at path (at most cap) into buf; *cut: the file
 * is longer. The number of bytes, or a negative errno. */
ssize_t report_file_tail(const char *path, char *buf, size_t cap, bool *cut);

/* ddprun's exit status for a failure: the exit code, or 128 + signal. */
int report_exit_status(const struct report_entry *e);

/* The entries of e[0..n) of rank whose caused_by is cause become primary
 * failures (a hang's verdict found that rank to be the one the others
 * waited for); how many. */
size_t report_make_primary(struct report_entry *e, size_t n, int rank, const char *cause);
/* The root-cause rule: true when a comes before b (a primary failure before
 * a secondary one, then the earlier observed, then the lower global rank). */
bool report_cause_before(const struct report_entry *a, const struct report_entry *b);
/* The index of the root cause of e[0..n) by that rule (0 when n is 0). */
size_t report_root_cause(const struct report_entry *e, size_t n);
/* The current time as report entries record it (CLOCK_REALTIME, epoch us). */
int64_t report_now_us(void);
/* A worker's start for report_failure_time_us, read before it is spawned:
 * CLOCK_REALTIME_COARSE, the clock the kernel dates files by (or later, with
 * multigrain timestamps). CLOCK_REALTIME runs up to a tick ahead of it: an
 * error file written in the tick the worker started looked older than the
 * start, stale, and its failure was dated from a late reaping instead. */
int64_t report_start_us(void);
/* When a worker started at started_us (report_start_us) and observed to have
 * failed at now_us failed, for the root-cause rule: when it wrote its error
 * file (path, may be NULL) if that is in between, else now_us. An agent slow
 * to reap, on a busy node, must not make a consequence on another node come
 * first (a compat run showed rank 0's "peer closed" ahead of rank 2's own
 * error); a file from before the start is a stale one. */
int64_t report_failure_time_us(const char *error_file, int64_t started_us, int64_t now_us);

/* No timestamp in an error file (report_parse_error_json). */
#define REPORT_NO_TIMESTAMP INT64_MIN

/* Parse an error file's text: *message (malloc'd) and *caused_by (malloc'd
 * libddp marker, at most REPORT_CAUSE_MAX bytes; NULL when absent or empty).
 * *timestamp (when not NULL): torchrun's int() of message.extraInfo.timestamp
 * (or the top-level timestamp beside a string message), epoch seconds, or
 * REPORT_NO_TIMESTAMP where torchrun's would raise or take 0 for a missing
 * one. 0, -EINVAL (not the expected JSON) or -ENOMEM. */
int report_parse_error_json(const char *json, size_t len, char **message, char **caused_by,
			    int64_t *timestamp);

/* torchrun's int() of an error file's timestamp field v (NULL: none): true
 * and *sec where torchrun's report would take v (see report_time.c). */
struct cJSON;
bool report_timestamp_of(const struct cJSON *v, int64_t *sec);
/* When a failure that time_us dates (report_failure_time_us) happened, for
 * a worker started at started_us whose error file holds timestamp ts
 * (seconds, or REPORT_NO_TIMESTAMP): ts when it lies in between, else
 * time_us. */
int64_t report_dated_us(int64_t ts, int64_t started_us, int64_t time_us);

/* The summary text (malloc'd, ends with '\n'); NULL on ENOMEM.
 * title: "<entrypoint> FAILED" is built from entrypoint. host is shown for
 * entries without their own. */
char *report_format(const char *entrypoint, const char *host, const struct report_entry *e,
		    size_t n);
/* The same with the root cause chosen by the caller (e[root], root < n): a
 * job spanning nodes knows which failure came first from the store.
 * elsewhere: NULL, or where the job's root cause ran when e (this node's
 * own failures) does not hold it ("rank 0 (local rank 0) on node 0 (host
 * a)"): a note on e[root] says it is only this node's first. */
char *report_format_root(const char *entrypoint, const char *host, const struct report_entry *e,
			 size_t n, size_t root, const char *elsewhere);

/* Copy the root cause's error file to path (ddprun's own TORCHELASTIC_ERROR_FILE
 * when an outer launcher set one), adding message.errorCode like torchrun.
 * root must be this node's own (another node's error file is not here).
 * One too large to read (REPORT_MAX_ERROR_FILE) is copied as it is, up to
 * REPORT_MAX_COPY (-EFBIG above); nothing is written when the worker wrote no
 * error file, or one that is not JSON (-EBADMSG). path may be any file (a FIFO nobody reads: -ENXIO; one whose
 * reader takes nothing for REPORT_PARENT_STALL_MS: -ETIMEDOUT). 0 or -errno. */
int report_write_parent_error(const char *path, const struct report_entry *root);

/* An error file in the layout of PyTorch's @record (report_parse reads it):
 * {"message": {"message": message, "extraInfo": {"py_callstack": callstack,
 * "timestamp": now, "ddp_caused_by": caused_by}}}, each of the last two left
 * out when NULL; valid UTF-8 whatever the bytes given. malloc'd, NULL on
 * ENOMEM. */
char *report_error_doc(const char *message, const char *callstack, const char *caused_by);

/* ddprun's own error, for the parent's error file when the job ends with
 * no failure of this node's workers to pass on (report_parent_reported): as
 * torchrun's @record on its main records the agent's exception (a signal, a
 * lost store, a port in use). The first reason noted is the one written. */
void report_note_reason(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* report_write_parent_error was the parent's account (written or not). */
void report_parent_reported(void);
/* At the end, status != 0: the reason noted to path (NULL: none asked for),
 * unless a worker's failure was reported. 0 or -errno, as
 * report_write_parent_error; 0 when there is nothing to write. */
int report_write_parent_reason(const char *path, int status);

#endif
