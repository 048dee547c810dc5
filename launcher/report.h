/* report: torchrun's failure summary.
 *
 * A failure is a worker that exited non-zero or was killed by a signal. Its
 * entry takes message and timestamp from the worker's torchelastic error file
 * (written by PyTorch's @record or libddp) when there is one:
 *   {"message": {"message": "...", "extraInfo": {"py_callstack": "...",
 *                                                "timestamp": "<epoch s>"}}}
 *   or {"message": "...", "timestamp": <epoch s>}
 * else the message says how the worker ended. The root cause is the failure
 * with the earliest timestamp (the first observed on ties). The layout is
 * torchrun's ChildFailedError text, so tools that grep it keep working. */
#ifndef DDP_REPORT_H
#define DDP_REPORT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define REPORT_MAX_ERROR_FILE (4u << 20)

struct report_entry {
	int global_rank;
	int local_rank;
	pid_t pid;
	int exitcode;	   /* exit code, or -signal (torchrun's convention) */
	int64_t timestamp; /* epoch seconds */
	char *error_file;  /* path of the error file the worker wrote; NULL: none */
	char *message;	   /* what the traceback line shows */
	char *error_json;  /* the error file as read, for the parent's error file */
	char *host;	   /* where it ran, when not the report's host; NULL: that host */
};

/* Fill e for a worker that ended with wait status wstatus. error_file is
 * where the worker was told to write (it is read if it exists); now is the
 * epoch time to use when the file gives none. 0 or -ENOMEM. */
int report_entry_init(struct report_entry *e, int global_rank, int local_rank, pid_t pid,
		      int wstatus, const char *error_file, int64_t now);
void report_entry_free(struct report_entry *e);

/* ddprun's exit status for a failure: the exit code, or 128 + signal. */
int report_exit_status(const struct report_entry *e);

size_t report_root_cause(const struct report_entry *e, size_t n);

/* Parse an error file's text: *message (malloc'd) and *timestamp (left alone
 * when the file has none). 0, -EINVAL (not the expected JSON) or -ENOMEM. */
int report_parse_error_json(const char *json, size_t len, char **message, int64_t *timestamp);

/* The summary text (malloc'd, ends with '\n'); NULL on ENOMEM.
 * title: "<entrypoint> FAILED" is built from entrypoint. host is shown for
 * entries without their own. */
char *report_format(const char *entrypoint, const char *host, const struct report_entry *e,
		    size_t n);
/* The same with the root cause chosen by the caller (e[root], root < n): a
 * job spanning nodes knows which failure came first from the store. */
char *report_format_root(const char *entrypoint, const char *host, const struct report_entry *e,
			 size_t n, size_t root);

/* Copy the root cause's error file to path (ddprun's own TORCHELASTIC_ERROR_FILE
 * when an outer launcher set one), adding message.errorCode like torchrun.
 * Nothing is written when the worker wrote no error file. 0 or -errno. */
int report_write_parent_error(const char *path, const struct report_entry *root);

#endif
