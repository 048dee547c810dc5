/* ddprun: a torchrun-compatible launcher for distributed data-parallel jobs.
 * main(): parse the command line, decide the program and the number of
 * workers, start the watchdog, run the agent's loop, exit with its status. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "agent.h"
#include "cli.h"
#include "coord.h"
#include "nproc.h"
#include "numa.h"
#include "output.h"
#include "prog.h"
#include "shmsweep.h"
#include "store_server.h"
#include "watchdog.h"
#include "workenv.h"

extern char **environ;

#define EXIT_USAGE 2

static const char *env_get(const char *name)
{
	return getenv(name);
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

/* torchrun --standalone: a random run id (uuid4 there, 32 hex digits here);
 * also the shared-memory nonce (len - 1 hex digits, at most 32). */
static void random_hex(char *buf, size_t len)
{
	unsigned char r[16] = {0};
	size_t i;

	if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
		unsigned long x = (unsigned long)getpid() ^ (unsigned long)time(NULL);

		memcpy(r, &x, sizeof(x) < sizeof(r) ? sizeof(x) : sizeof(r));
	}
	for (i = 0; i < sizeof(r) && 2 * i + 2 < len; i++)
		snprintf(buf + 2 * i, 3, "%02x", r[i]);
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
		snprintf(line + n, sizeof(line) - n, " --master-addr %.300s", o->master_addr);
	if (line[0] != '\0')
		fprintf(stderr, "ddprun: from Slurm:%s\n", line);
}

/* --numa-binding: each worker's CPUs, or NULL (not asked, or one warning
 * that the topology is not there). */
static cpu_set_t *numa_sets(const struct cli_opts *o, int nproc)
{
	cpu_set_t *sets;
	char why[512];

	if (o->numa_binding == CLI_NUMA_NONE)
		return NULL;
	sets = calloc((size_t)nproc, sizeof(*sets));
	if (sets == NULL || numa_plan(o->numa_binding, getenv("CUDA_VISIBLE_DEVICES"), nproc, sets,
				      why, sizeof(why)) != 0) {
		fprintf(stderr,
			"ddprun: warning: --numa-binding %s: %s; the workers run unpinned\n",
			cli_numa_mode_name(o->numa_binding), sets ? why : "out of memory");
		free(sets);
		return NULL;
	}
	return sets;
}

int main(int argc, char **argv)
{
	struct cli_opts o;
	struct prog prog = {0};
	struct watchdog wd = {.pid = 0, .fd = -1};
	struct agent *agent = NULL;
	struct agent_config cfg = {0};
	struct coord *coord = NULL;
	struct agent_coord hooks;
	uv_loop_t loop;
	struct sigaction old_pipe;
	struct rlimit nofile;
	uint64_t fdlimit;
	char err[512], host[256] = "localhost", run_id[40], nonce[SHMSWEEP_NONCE_LEN + 1];
	int dfl[2 * CLI_MAX_SIGNALS + 2], ndfl = 0, nproc = 0, status = 1, rc, i;
	const char *parent_ef;
	cpu_set_t *cpu_sets = NULL;

	ensure_std_fds();
	rc = cli_parse(argc, argv, env_get, &o, err, sizeof(err));
	if (rc == CLI_HELP) {
		cli_usage(stdout);
		return 0;
	}
	if (rc == CLI_VERSION) {
		printf("ddprun %s\n", DDP_VERSION);
		return 0;
	}
	if (rc != 0) {
		fprintf(stderr, "ddprun: error: %s (see ddprun --help)\n", err);
		return EXIT_USAGE;
	}
	if (o.slurm_stray != NULL)
		fprintf(stderr,
			"ddprun: warning: %s is set but SLURM_JOB_ID is not: this is no Slurm "
			"allocation, so ddprun ignores SLURM_* (run it under srun, or give "
			"--nnodes, --node-rank and --master-addr)\n",
			o.slurm_stray);
	if (o.standalone) {
		random_hex(run_id, sizeof(run_id));
		o.rdzv_id = run_id;
	}
	rc = nproc_resolve(&o, &nproc, err, sizeof(err));
	if (rc != 0) {
		fprintf(stderr, "ddprun: error: %s\n", err);
		goto out;
	}
	for (i = 0; i < o.nranks_filter; i++)
		if (o.ranks_filter[i] >= nproc)
			fprintf(stderr,
				"ddprun: warning: --local-ranks-filter: local rank %d does not "
				"exist "
				"on this node (%d workers): nothing of it is shown\n",
				o.ranks_filter[i], nproc);
	rc = workenv_check(getenv("CUDA_VISIBLE_DEVICES"), o.virtual_local_rank, nproc, err,
			   sizeof(err));
	if (rc != 0) {
		fprintf(stderr, "ddprun: error: %s\n", err);
		status = EXIT_USAGE;
		goto out;
	}
	cli_torch2_warn(&o, nproc, stderr);
	cpu_sets = numa_sets(&o, nproc);
	rc = prog_resolve(&o, env_get, &prog, err, sizeof(err));
	if (rc != 0) {
		fprintf(stderr, "ddprun: error: %s\n", err);
		status = rc == -ENOENT ? 127 : rc == -EACCES ? 126 : 1;
		goto out;
	}
	gethostname(host, sizeof(host) - 1);
	parent_ef = getenv("TORCHELASTIC_ERROR_FILE");

	/* A worker must not inherit what ddprun does to signals: libuv's handlers
	 * (reset before exec, spawn_worker.c) and our SIGPIPE ignore. */
	sigaction(SIGPIPE, NULL, &old_pipe);
	if (old_pipe.sa_handler != SIG_IGN)
		dfl[ndfl++] = SIGPIPE;
	signal(SIGPIPE, SIG_IGN);
	dfl[ndfl++] = SIGCHLD;
	for (i = 0; i < o.nsignals; i++)
		dfl[ndfl++] = o.signals[i];
	for (i = 0; i < o.nfwd_signals; i++)
		dfl[ndfl++] = o.fwd_signals[i];

	/* Two pipes per worker and a store connection each: allow as many
	 * descriptors as the hard limit does (the workers get the original). */
	if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && store_server_raise_nofile(&fdlimit) == 0)
		cfg.nofile = &nofile;

	random_hex(nonce, sizeof(nonce));
	rc = watchdog_start(&wd, nonce);
	if (rc != 0)
		fprintf(stderr,
			"ddprun: warning: no watchdog (%s): if ddprun is killed, workers' "
			"children may outlive it\n",
			strerror(-rc));

	cfg.opts = &o;
	cfg.prog = &prog;
	cfg.nproc = nproc;
	cfg.worker_env = environ;
	cfg.hostname = host;
	cfg.parent_error_file = parent_ef;
	cfg.watchdog = wd.pid > 0 ? &wd : NULL;
	cfg.dfl_sigs = dfl;
	cfg.ndfl_sigs = ndfl;
	cfg.shm_nonce = nonce;
	cfg.cpu_sets = cpu_sets;
	if (uv_loop_init(&loop) != 0) {
		fprintf(stderr, "ddprun: error: cannot create the event loop\n");
		goto out;
	}
	if (cli_multinode(&o)) {
		struct coord_config cc = {.opts = &o, .nproc = nproc, .hostname = host};

		rc = coord_create(&loop, &cc, &coord, err, sizeof(err));
		if (rc != 0) {
			fprintf(stderr, "ddprun: error: %s\n", err);
			status = EXIT_USAGE;
			uv_loop_close(&loop);
			goto out;
		}
		coord_hooks(coord, &hooks);
		say_slurm(&o);
	}
	/* From here on, a reader that stalls on our stdout cannot stall the job. */
	output_console_open(&loop);
	rc = agent_create(&loop, &cfg, coord ? &hooks : NULL, &agent, err, sizeof(err));
	if (rc != 0) {
		fprintf(stderr, "ddprun: error: %s\n", err[0] ? err : strerror(-rc));
	} else {
		agent_start(agent);
		uv_run(&loop, UV_RUN_DEFAULT);
		status = agent_exit_status(agent);
		agent_destroy(agent);
	}
	uv_loop_close(&loop);
	output_console_finish();
	coord_destroy(coord);
out:
	watchdog_stop(&wd);
	prog_free(&prog);
	cli_free(&o);
	free(cpu_sets);
	return status;
}
