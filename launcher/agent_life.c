/* agent_life: creating, querying and destroying an agent (see agent.h); the
 * state machine itself is agent.c. */
#include "agent_int.h"
#include "agent_fwd.h"
#include "agent_sig.h"
#include "hang.h"
#include "watchdog.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int agent_create(uv_loop_t *loop, const struct agent_config *cfg, const struct agent_coord *coord,
		 struct agent **out, char *err, size_t errlen)
{
	struct agent *a = calloc(1, sizeof(*a));
	bool redirected;
	int i, rc;

	if (a == NULL)
		return -ENOMEM;
	a->loop = loop;
	a->cfg = *cfg;
	a->job = cfg->job;
	a->devnull = -1;
	a->dup_fd[0] = a->dup_fd[1] = -1;
	if (coord != NULL) {
		a->coord = *coord;
		a->has_coord = true;
	}
	a->w = calloc((size_t)a->job->nproc, sizeof(*a->w));
	a->failures = calloc((size_t)a->job->nproc, sizeof(*a->failures));
	if (a->w == NULL || a->failures == NULL) {
		rc = -ENOMEM;
		goto fail;
	}
	for (i = 0; i < a->job->nproc; i++) {
		a->w[i].a = a;
		a->w[i].local_rank = i;
	}
	a->devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (a->devnull < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot open /dev/null: %s", strerror(errno));
		goto fail;
	}
	/* -r/-t without --log-dir: torchrun's layout in a kept temporary dir,
	 * only where a log is written (a map of other nodes' local ranks
	 * leaves this one the removable error-file directory, unnamed). */
	redirected = job_writes_logs(a->job);
	rc = logdir_create(&a->logdir, a->job->log_dir, a->job->run_id, redirected, err, errlen);
	if (rc != 0)
		goto fail;
	/* kill -9 of ddprun: the watchdog removes what the end would have. */
	if (a->logdir.temporary && a->cfg.watchdog != NULL)
		watchdog_tmpdir(a->cfg.watchdog, a->logdir.base);
	if (a->job->log_dir == NULL && redirected)
		agent_say("logs are in %s", a->logdir.run_dir);
	*out = a;
	return 0;
fail:
	agent_destroy(a);
	return rc;
}

uv_loop_t *agent_loop(struct agent *a)
{
	return a->loop;
}

int agent_exit_status(const struct agent *a)
{
	return a->status;
}

void agent_destroy(struct agent *a)
{
	size_t k;
	int i;

	if (a == NULL)
		return;
	hang_destroy(a);
	agent_fwd_destroy(a);
	agent_sig_destroy(a->stops);
	for (i = 0; a->w != NULL && i < a->job->nproc; i++) {
		free(a->w[i].error_file);
		free(a->w[i].prefix[0]);
		free(a->w[i].prefix[1]);
		output_stream_release(&a->w[i].stream[0]);
		output_stream_release(&a->w[i].stream[1]);
	}
	for (k = 0; k < a->nfailures; k++)
		report_entry_free(&a->failures[k]);
	if (a->devnull >= 0)
		close(a->devnull);
	agent_dup_close(a);
	if (a->logdir.temporary && !a->keep_logdir)
		logdir_remove(&a->logdir);
	logdir_free(&a->logdir);
	free(a->master_addr);
	free(a->store_host);
	free(a->failures);
	free(a->w);
	free(a);
}
