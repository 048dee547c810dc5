/* agent_failure: the record of an attempt's worker failures (see agent.h,
 * agent_int.h). The state machine (agent.c) decides when the workers stop;
 * this file decides which of their exits are failures, and builds the
 * report entries (report.h) from which the root cause, the exit status, the
 * coordinator's word to the other nodes, the failure summary and ddprun's
 * own error file are made. While the workers run, every non-zero exit is a
 * failure; after the stop signals, exits are the stop's doing but for those
 * of workers that failed on their own, as their error files tell. */
#include "agent_int.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A worker whose error file is there (the run directory and the attempt are
 * new: it wrote it) is failing on its own, though not dead yet: however it
 * ends after the stop signals, it failed (all ranks hit the same error, and
 * one was first to exit). */
void agent_failure_note_failing(struct agent *a)
{
	int i;

	for (i = 0; i < a->job->nproc; i++) {
		struct agent_worker *w = &a->w[i];

		w->failing =
			w->running && w->error_file != NULL && access(w->error_file, F_OK) == 0;
	}
}

/* stopped: it was still running when the stop began; late: its error file
 * came after that (failed_after_stop). */
static void record_failure(struct agent *a, struct agent_worker *w, int wstatus, bool stopped,
			   bool late)
{
	struct report_entry *e = &a->failures[a->nfailures];
	int64_t t = report_failure_time_us(w->error_file, w->started_us, report_now_us());

	/* The root-cause rule orders failures by this time. */
	if (report_entry_init(e, a->world.rank_offset + w->local_rank, w->local_rank, w->pid,
			      wstatus, w->error_file, w->started_us, t) != 0) {
		report_entry_free(e);
		return; /* out of memory: the exit status still tells */
	}
	e->stopped = stopped;
	e->late = late;
	agent_worker_failure_output(a, w, e);
	a->nfailures++;
}

/* Whether w, gone after the stop signals, failed rather than stopped: 1, its
 * error file was there when they went (agent_failure_note_failing); 2, the
 * stop is for a failure and it wrote one since. This node's failing worker
 * can be the one that saw what went wrong (a ring's bad frame) and still be
 * slower to exit than the other nodes' word. A worker the stop merely ends
 * writes none (libddp leaves SIGTERM alone, torchrun's @record writes for an
 * exception only); one whose SIGTERM handler fails (a checkpoint against
 * peers already gone) does, so such failures come after every other
 * (report.c). */
static int failed_after_stop(const struct agent *a, const struct agent_worker *w)
{
	if (w->failing)
		return 1;
	return a->late_failures && w->error_file != NULL && access(w->error_file, F_OK) == 0 ? 2
											     : 0;
}

bool agent_failure_exit(struct agent *a, struct agent_worker *w, int wstatus)
{
	int how;

	if (a->state == AS_RUNNING) {
		record_failure(a, w, wstatus, false, false);
		return true;
	}
	if ((how = failed_after_stop(a, w)) > 0)
		record_failure(a, w, wstatus, true, how == 2);
	return false;
}

const struct report_entry *agent_failure_root(const struct agent *a)
{
	return &a->failures[report_root_cause(a->failures, a->nfailures)];
}

void agent_failure_clear(struct agent *a)
{
	size_t i;

	for (i = 0; i < a->nfailures; i++)
		report_entry_free(&a->failures[i]);
	a->nfailures = 0;
}

const struct report_entry *agent_failures(const struct agent *a, size_t *n)
{
	*n = a->nfailures;
	return a->failures;
}

void agent_hang_culprit(struct agent *a, int rank)
{
	report_make_primary(a->failures, a->nfailures, rank, REPORT_CAUSE_HANG);
}

const struct report_entry *agent_own_failure(const struct agent *a, const struct report_entry *e)
{
	size_t i;

	for (i = 0; i < a->nfailures; i++)
		if (a->failures[i].global_rank == e->global_rank && a->failures[i].pid == e->pid &&
		    a->failures[i].time_us == e->time_us)
			return &a->failures[i];
	return NULL;
}

/* report_write_parent_error failed with rc for mine: say why in one line. */
static void warn_parent_error(const struct agent *a, const struct report_entry *mine, int rc)
{
	char why[PATH_MAX + 64];
	struct stat st;

	if (rc == -EFBIG)
		snprintf(why, sizeof(why), "the worker's error file is over %u MiB",
			 REPORT_MAX_COPY >> 20);
	else if (rc == -EBADMSG)
		snprintf(why, sizeof(why), "the worker's error file (%s) is %s",
			 mine->error_file ? mine->error_file : "?",
			 mine->error_json && mine->error_json[0] ? "not JSON" : "empty");
	else if (rc == -ETIMEDOUT)
		snprintf(why, sizeof(why), "its reader took no data for %d s, gave up",
			 REPORT_PARENT_STALL_MS / 1000);
	else if (rc == -ENXIO && stat(a->cfg.parent_error_file, &st) == 0 &&
		 (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)))
		/* open() says ENXIO for both: "No such device or address" */
		snprintf(why, sizeof(why), "%s",
			 S_ISFIFO(st.st_mode) ? "a FIFO that no process reads"
					      : "a socket, which cannot be opened");
	else
		snprintf(why, sizeof(why), "%s", strerror(-rc));
	agent_say("warning: cannot write the root cause's error report to %s "
		  "(TORCHELASTIC_ERROR_FILE): %s",
		  a->cfg.parent_error_file, why);
}

void agent_report(struct agent *a, const struct report_entry *e, size_t n, size_t root,
		  const char *elsewhere)
{
	const struct report_entry *mine;
	char *text;
	size_t i;
	int rc;

	if (e == NULL) {
		e = a->failures;
		n = a->nfailures;
		root = report_root_cause(e, n);
	}
	if (n == 0 || root >= n)
		return;
	text = report_format_root(a->job->prog.entrypoint, a->job->hostname, e, n, root, elsewhere);
	if (text != NULL) {
		output_console_write(2, text, strlen(text));
		free(text);
	}
	/* A temporary log directory outlives the job only if the report points
	 * into it. */
	for (i = 0; i < a->nfailures; i++)
		if (a->failures[i].error_file != NULL || a->failures[i].log_file != NULL)
			a->keep_logdir = true;
	if (a->cfg.parent_error_file == NULL || a->nfailures == 0)
		return;
	/* The job's root cause if it ran here, else this node's first failure,
	 * as each of torchrun's agents writes its own; not one after the stop,
	 * which may be the stop's doing (the outer launcher would take it for
	 * this node's failure). */
	mine = agent_own_failure(a, &e[root]);
	if (mine == NULL)
		mine = agent_failure_root(a);
	if (mine->late)
		return;
	report_parent_reported();
	if ((rc = report_write_parent_error(a->cfg.parent_error_file, mine)) < 0)
		warn_parent_error(a, mine, rc);
}
