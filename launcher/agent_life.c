/* agent_life: creating, querying and destroying an agent (see agent.h); the
 * state machine itself is agent.c. */
#include "agent_int.h"
#include "agent_fwd.h"
#include "agent_sig.h"
#include "hang.h"
#include "watchdog.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* Beside the workers' descriptors and those open now (the loop's, the
 * coordinator's): /dev/null, the store's listener and its loop, a worker's
 * pipes while it starts, the logs' directory. The workers' store
 * connections are not counted (agent_worker_fds). */
#define AGENT_FDS_RESERVE 16

static long fds_open_now(void)
{
	DIR *d = opendir("/proc/self/fd");
	long n = 0;

	if (d == NULL)
		return 32; /* no /proc: a guess */
	while (readdir(d) != NULL)
		n++;
	closedir(d);
	return n - 3; /* ".", ".." and the directory's own */
}

/* The workers' descriptors must fit the open-files limit (main.c raised it
 * to the hard one): else the job would stop part-way through starting its
 * workers ("cannot make a pipe: Too many open files"). Refused before any. */
static int check_fds(const struct job *job, char *err, size_t errlen)
{
	struct rlimit rl;
	long need = (long)agent_worker_fds(job) + fds_open_now() + AGENT_FDS_RESERVE;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
	    (rlim_t)need <= rl.rlim_cur)
		return 0;
	snprintf(err, errlen,
		 "%d workers need about %ld open files here, but the limit is %llu (ulimit -n, "
		 "its hard limit): raise it, or start fewer workers on this node",
		 job->nproc, need, (unsigned long long)rl.rlim_cur);
	return -EMFILE;
}

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
	if ((rc = check_fds(a->job, err, errlen)) != 0)
		goto fail;
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
	/* --log-dir /dev/null: nothing is written (no error file either), so
	 * no directory is made. */
	rc = a->job->logs_off ? 0
			      : logdir_create(&a->logdir, a->job->log_dir, a->job->run_id,
					      redirected, err, errlen);
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
	agent_failure_clear(a);
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
