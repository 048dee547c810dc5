/* ddprun: a torchrun-compatible launcher for distributed data-parallel jobs.
 * main(): parse the command line, resolve it into the job (job.h: the
 * program, the number of workers, ...), start the watchdog, run the agent's
 * loop (with a coordinator for several nodes), exit with its status. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <uv.h>

#include "agent.h"
#include "agent_sig.h"
#include "cli.h"
#include "coord.h"
#include "job.h"
#include "output.h"
#include "store_server.h"
#include "util.h"
#include "watchdog.h"
#include "workenv.h"

extern char **environ;

static const char *env_get(const char *name)
{
	return getenv(name);
}

/* An outer launcher's error file for this ddprun; NULL: none. Empty is
 * none, as libddp and PyTorch's @record read it (torchrun 2.x gives its
 * workers "" under --log-dir /dev/null, and so does ddprun). */
static const char *parent_error_file(void)
{
	const char *p = getenv(WORKENV_TORCHELASTIC_ERROR_FILE);

	return p != NULL && p[0] != '\0' ? p : NULL;
}

/* Workers and pipes must never land on 0-2 by accident. */
static void ensure_std_fds(void)
{
	int fd;

	while ((fd = open("/dev/null", O_RDWR)) >= 0 && fd <= 2)
		;
	if (fd > 2)
		close(fd);
}

/* A parent may hand ddprun signals blocked (a Python program that blocked
 * them before exec, some job wrappers): the event loop would then never see
 * its workers exit (SIGCHLD) or a stop (SIGTERM), and hang with zombie
 * workers until SIGKILL. A supervisor starts from an empty mask, which its
 * workers inherit; signals ignored at start (nohup) stay ignored. */
static void unblock_signals(void)
{
	sigset_t none;

	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
}

/* Inside Slurm, say what came from the allocation (a wrong guess is then
 * easy to spot). */
static void say_slurm(const struct cli_opts *o)
{
	char line[400] = "";
	size_t n = 0;

	if (o->slurm_nnodes)
		n += (size_t)snprintf(line + n, sizeof(line) - n, " --nnodes %d", o->max_nodes);
	if (o->slurm_node_rank)
		n += (size_t)snprintf(line + n, sizeof(line) - n, " --node-rank %d", o->node_rank);
	if (o->slurm_master_addr)
		n += (size_t)snprintf(line + n, sizeof(line) - n, " --master-addr %.200s",
				      o->master_addr);
	if (o->slurm_rdzv_id)
		snprintf(line + n, sizeof(line) - n, " --rdzv-id %.60s", o->rdzv_id);
	if (line[0] != '\0')
		fprintf(stderr, "ddprun: from Slurm:%s\n", line);
}

int main(int argc, char **argv)
{
	struct cli_opts o;
	struct job job = {0};
	struct watchdog wd = {.pid = 0, .fd = -1};
	struct agent *agent = NULL;
	struct agent_config cfg = {0};
	struct coord *coord = NULL;
	struct agent_coord hooks;
	uv_loop_t loop;
	struct sigaction old_act;
	struct rlimit nofile;
	uint64_t fdlimit;
	char err[512];
	int dfl[2 * CLI_MAX_SIGNALS + 3], ndfl = 0, status = 1, rc, i;

	ensure_std_fds();
	unblock_signals();
	rc = cli_parse(argc, argv, env_get, &o, err, sizeof(err));
	if (rc == CLI_HELP || rc == CLI_VERSION) {
		if (rc == CLI_HELP)
			cli_usage(stdout);
		else
			printf("ddprun %s\n", DDP_VERSION);
		/* A full disk or a closed pipe is said, not taken for success. */
		if (fflush(stdout) != 0 || ferror(stdout)) {
			fprintf(stderr, "ddprun: error: cannot write to standard output: %s\n",
				strerror(errno));
			return 1;
		}
		return 0;
	}
	if (rc != 0) {
		fprintf(stderr, "ddprun: error: %s (see ddprun --help)\n", err);
		return JOB_EXIT_USAGE;
	}
	if (o.slurm_stray != NULL)
		fprintf(stderr,
			"ddprun: warning: %s is set but SLURM_JOB_ID is not: this is no Slurm "
			"allocation, so ddprun ignores SLURM_* (run it under srun, or give "
			"--nnodes, --node-rank and --master-addr)\n",
			o.slurm_stray);
	if (o.slurm_step_ignored[0] != '\0')
		fprintf(stderr, "ddprun: warning: ignoring SLURM_STEP_*: %s\n",
			o.slurm_step_ignored);
	status = job_resolve(&job, &o, env_get);
	if (status != 0)
		goto out;
	status = 1;

	/* ddprun's writes to a reader gone (SIGPIPE) or past a file size limit
	 * (SIGXFSZ, ulimit -f) fail with EPIPE or EFBIG instead, and are said
	 * (output_console.c, output.c). A worker must not inherit what ddprun
	 * does to signals: libuv's handlers (reset before exec,
	 * spawn_worker.c) and these ignores, unless ignored already. */
	for (i = 0; i < 2; i++) {
		int sig = i == 0 ? SIGPIPE : SIGXFSZ;

		sigaction(sig, NULL, &old_act);
		if (old_act.sa_handler != SIG_IGN)
			dfl[ndfl++] = sig;
		signal(sig, SIG_IGN);
	}
	dfl[ndfl++] = SIGCHLD;
	/* One ignored at startup stays so in the workers too (nohup). */
	ndfl += job_caught_signals(&job, dfl + ndfl);
	for (i = 0; i < job.nfwd_signals; i++)
		dfl[ndfl++] = job.fwd_signals[i];

	/* Two pipes per worker and a store connection each: allow as many
	 * descriptors as the hard limit does (the workers get the original). */
	if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && store_server_raise_nofile(&fdlimit) == 0)
		cfg.nofile = &nofile;
	/* The hang dump's stack tool attaches to the workers (spawn_worker.c). */
	if (util_yama_ptrace_scope() == 1)
		cfg.ptracer = getpid();

	rc = watchdog_start(&wd, job.shm_nonce);
	if (rc != 0)
		fprintf(stderr,
			"ddprun: warning: no watchdog (%s): if ddprun is killed, workers' "
			"children may outlive it\n",
			strerror(-rc));

	cfg.job = &job;
	cfg.worker_env = environ;
	cfg.parent_error_file = parent_error_file();
	cfg.watchdog = wd.pid > 0 ? &wd : NULL;
	cfg.dfl_sigs = dfl;
	cfg.ndfl_sigs = ndfl;
	if (uv_loop_init(&loop) != 0) {
		fprintf(stderr, "ddprun: error: cannot create the event loop\n");
		report_note_reason("cannot create the event loop");
		goto out;
	}
	if (job.multinode) {
		rc = coord_create(&loop, &job, &coord, err, sizeof(err));
		if (rc != 0) {
			fprintf(stderr, "ddprun: error: %s\n", err);
			report_note_reason("%s", err);
			status = JOB_EXIT_USAGE;
			uv_loop_close(&loop);
			goto out;
		}
		coord_hooks(coord, &hooks);
	}
	say_slurm(&o);
	/* From here on, a reader that stalls on our stdout cannot stall the job. */
	output_console_open(&loop);
	rc = agent_create(&loop, &cfg, coord ? &hooks : NULL, &agent, err, sizeof(err));
	if (rc != 0) {
		fprintf(stderr, "ddprun: error: %s\n", err[0] ? err : strerror(-rc));
		report_note_reason("%s", err[0] ? err : strerror(-rc));
	} else {
		agent_start(agent);
		uv_run(&loop, UV_RUN_DEFAULT);
		status = agent_exit_status(agent);
		agent_destroy(agent);
	}
	uv_loop_close(&loop);
	agent_sig_exit_with(status);
	output_console_finish();
	coord_destroy(coord);
out:
	/* As torchrun's @record on its main: why ddprun itself failed. */
	rc = report_write_parent_reason(parent_error_file(), status);
	if (rc < 0)
		fprintf(stderr,
			"ddprun: warning: cannot write why the job failed to %s "
			"(TORCHELASTIC_ERROR_FILE): %s\n",
			parent_error_file(), strerror(-rc));
	watchdog_stop(&wd);
	job_free(&job);
	cli_free(&o);
	return status;
}
