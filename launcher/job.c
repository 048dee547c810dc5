/* job: resolving the command line into the job (see job.h). */
#include "job.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "nproc.h"
#include "numa.h"
#include "report.h"
#include "workenv.h"

static void random_bytes(unsigned char r[16])
{
	memset(r, 0, 16);
	if (getrandom(r, 16, 0) != 16) {
		unsigned long x = (unsigned long)getpid() ^ (unsigned long)time(NULL);

		memcpy(r, &x, sizeof(x) < 16 ? sizeof(x) : 16);
	}
}

/* The shared-memory nonce: len - 1 hex digits, at most 32. */
static void random_hex(char *buf, size_t len)
{
	unsigned char r[16];
	size_t i;

	random_bytes(r);
	for (i = 0; i < sizeof(r) && 2 * i + 2 < len; i++)
		snprintf(buf + 2 * i, 3, "%02x", r[i]);
}

/* torchrun's random run id, str(uuid.uuid4()): 36 characters, version 4,
 * RFC 4122 variant ("8c3f...-...-4...-[89ab]...-..."). buf: at least 37. */
static void random_uuid4(char *buf)
{
	unsigned char r[16];
	size_t i, k = 0;

	random_bytes(r);
	r[6] = (unsigned char)((r[6] & 0x0f) | 0x40);
	r[8] = (unsigned char)((r[8] & 0x3f) | 0x80);
	for (i = 0; i < sizeof(r); i++) {
		if (i == 4 || i == 6 || i == 8 || i == 10)
			buf[k++] = '-';
		snprintf(buf + k, 3, "%02x", r[i]);
		k += 2;
	}
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
	if (sets == NULL || numa_plan(o->numa_binding, getenv(WORKENV_CUDA_VISIBLE_DEVICES), nproc,
				      sets, why, sizeof(why)) != 0) {
		fprintf(stderr,
			"ddprun: warning: --numa-binding %s: %s; the workers run unpinned\n",
			cli_numa_mode_name(o->numa_binding), sets ? why : "out of memory");
		free(sets);
		return NULL;
	}
	return sets;
}

/* A local rank an option names that this node does not run (torchrun says
 * nothing: a typo would go unseen). */
static void warn_no_rank(const char *flag, int local_rank, int nproc, const char *so)
{
	fprintf(stderr,
		"ddprun: warning: %s: local rank %d does not exist on this node (%d workers): "
		"%s\n",
		flag, local_rank, nproc, so);
}

void job_from_opts(struct job *j, const struct cli_opts *o,
		   const char *(*getenv_fn)(const char *name))
{
	memset(j, 0, sizeof(*j));
	snprintf(j->hostname, sizeof(j->hostname), "localhost");
	j->role = o->role;
	j->run_id = o->rdzv_id;
	j->max_restarts = o->max_restarts;
	j->signals_to_handle = o->signals_to_handle;
	j->virtual_local_rank = o->virtual_local_rank;
	j->shutdown_timeout_ms = o->shutdown_timeout_ms;
	j->signals = o->signals;
	j->nsignals = o->nsignals;
	j->fwd_signals = o->fwd_signals;
	j->nfwd_signals = o->nfwd_signals;
	j->hang_timeout_ms = o->hang_timeout_ms;
	j->log_dir = o->log_dir;
	j->logs_off = o->logs_off;
	j->redirects = o->redirects;
	j->tee = o->tee;
	j->ranks_filter = o->ranks_filter;
	j->nranks_filter = o->nranks_filter;
	/* Empty is unset, the option's and the variable's, as torchrun's `if
	 * template`: the default prefix (ddprun(1), --log-line-prefix-template). */
	j->log_line_prefix = o->log_line_prefix != NULL && o->log_line_prefix[0] != '\0'
				     ? o->log_line_prefix
				     : getenv_fn("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE");
	if (j->log_line_prefix != NULL && j->log_line_prefix[0] == '\0')
		j->log_line_prefix = NULL;
	j->tag_output = o->tag_output;
	j->dup_filters[0] = o->dup_filters[0];
	j->dup_filters[1] = o->dup_filters[1];
	j->multinode = cli_multinode(o);
	j->dynamic = strcmp(o->rdzv_backend, "c10d") == 0;
	j->rdzv_backend = o->rdzv_backend;
	j->rdzv_endpoint = o->rdzv_endpoint;
	j->rdzv = o->rdzv;
	j->min_nodes = o->min_nodes;
	j->max_nodes = o->max_nodes;
	j->node_rank = o->node_rank;
	j->nnodes_from = o->nnodes_from;
	j->node_rank_from = o->node_rank_from;
	j->master_addr = o->master_addr;
	j->master_port = o->master_port;
	j->master_port_given = o->master_port_given;
	j->master_port_src = o->master_port_src ? o->master_port_src : "--master-port";
	j->local_addr = o->local_addr;
	j->store_io = o->store_io;
	if (o->slurm_master_addr)
		j->slurm_master_var =
			o->slurm_master_var ? o->slurm_master_var : "SLURM_JOB_NODELIST";
}

/* This node cannot run its part (job.h: prefail_status): with a fixed number
 * of nodes it says so and tells the others through the rendezvous, so that
 * every node ends with status at once. An elastic job (--nnodes MIN:MAX, MIN
 * < MAX) runs on without it, as without a node that never came: false, and
 * the caller ends alone. */
static bool prefail(struct job *j, int status, const char *err)
{
	if (!j->multinode || (j->dynamic && j->min_nodes != j->max_nodes))
		return false;
	fprintf(stderr, "ddprun: error: %s (telling the other nodes)\n", err);
	j->prefail_status = status;
	snprintf(j->prefail_msg, sizeof(j->prefail_msg), "%.300s (on host %.60s)", err,
		 j->hostname);
	return true;
}

int job_resolve(struct job *j, struct cli_opts *o, const char *(*getenv_fn)(const char *name))
{
	char err[512];
	int i, rc;

	job_from_opts(j, o, getenv_fn);
	if (o->standalone || o->random_run_id) {
		random_uuid4(j->run_id_buf);
		o->rdzv_id = j->run_id = j->run_id_buf;
	}
	gethostname(j->hostname, sizeof(j->hostname) - 1);
	random_hex(j->nonce_buf, sizeof(j->nonce_buf));
	j->shm_nonce = j->nonce_buf;
	rc = nproc_resolve(o, &j->nproc, err, sizeof(err));
	if (rc != 0) {
		/* --nproc-per-node=gpu on a node without one. No worker will
		 * start: one placeholder, no program looked up. */
		j->nproc = 1;
		if (prefail(j, 1, err))
			return 0;
		fprintf(stderr, "ddprun: error: %s\n", err);
		report_note_reason("%s", err);
		return 1;
	}
	for (i = 0; i < o->nranks_filter; i++)
		if (o->ranks_filter[i] >= j->nproc)
			warn_no_rank("--local-ranks-filter", o->ranks_filter[i], j->nproc,
				     "nothing of it is shown");
	for (i = j->nproc; i < o->redirects.nmap; i++)
		if (o->redirects.map[i] != 0)
			warn_no_rank("--redirects", i, j->nproc, "no file is written for it");
	for (i = j->nproc; i < o->tee.nmap; i++)
		if (o->tee.map[i] != 0)
			warn_no_rank("--tee", i, j->nproc, "no file is written for it");
	rc = workenv_check(getenv(WORKENV_CUDA_VISIBLE_DEVICES), o->virtual_local_rank, j->nproc,
			   err, sizeof(err));
	if (rc != 0) {
		fprintf(stderr, "ddprun: error: %s\n", err);
		return JOB_EXIT_USAGE;
	}
	cli_torch2_warn(o, j->nproc, stderr);
	j->cpu_sets = numa_sets(o, j->nproc);
	rc = prog_resolve(o, getenv_fn, &j->prog, err, sizeof(err));
	if (rc != 0) {
		int status = rc == -ENOENT ? 127
			     : rc == -EACCES || rc == -ENOEXEC || rc == -ELOOP ||
					     rc == -ENAMETOOLONG || rc == -ENOTDIR
				     ? 126
				     : 1;

		if (status != 1 && prefail(j, status, err))
			return 0;
		fprintf(stderr, "ddprun: error: %s\n", err);
		report_note_reason("%s", err);
		return status;
	}
	return 0;
}

void job_free(struct job *j)
{
	prog_free(&j->prog);
	free(j->cpu_sets);
	j->cpu_sets = NULL;
}

const char *job_store_host_source(const struct job *j)
{
	static char buf[128];

	if (j->dynamic)
		return "--rdzv-endpoint";
	if (j->slurm_master_var != NULL) {
		snprintf(buf, sizeof(buf),
			 "Slurm's first node of %s, which --master-addr overrides",
			 j->slurm_master_var);
		return buf;
	}
	return "--master-addr";
}

bool job_rank_shown(const struct job *j, int local_rank)
{
	return cli_ranks_have(j->ranks_filter, j->nranks_filter, local_rank);
}

int job_caught_signals(const struct job *j, int *out)
{
	int i, n = 0;

	for (i = 0; i < j->nsignals; i++) {
		struct sigaction old;

		if (sigaction(j->signals[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
			continue;
		out[n++] = j->signals[i];
	}
	return n;
}

bool job_writes_logs(const struct job *j)
{
	int lr;

	for (lr = 0; lr < j->nproc; lr++)
		if (cli_std_get(&j->redirects, lr) != CLI_STD_NONE ||
		    cli_std_get(&j->tee, lr) != CLI_STD_NONE)
			return true;
	return false;
}
