/* job: what this ddprun runs, resolved once by main() (job_resolve) from the
 * command line (cli.h, Slurm's defaults included), the environment and the
 * machine, then only read: by the agent (agent.h) and the coordinator
 * (coord.h), neither of which reads struct cli_opts.
 *
 * Which struct holds what:
 *  - struct job (here): what is fixed for the whole run. nproc, this node's
 *    local workers, lives here and nowhere else: a node keeps its
 *    --nproc-per-node through every restart and every round, also under an
 *    elastic (c10d) rendezvous, where nodes come and go but none changes its
 *    own count (each node publishes it, rdzv_msg.h).
 *  - struct workenv_world (rendezvous/workenv.h): what each attempt's
 *    rendezvous decides and may change from one attempt to the next: the
 *    node's group rank, the number of nodes, the world size (the sum of the
 *    nodes' nproc), the rank offset, the store, the restart count. The agent
 *    keeps the current one.
 *  - struct workenv_job: a worker's environment, put together from both at
 *    each start (agent_worker.c).
 * Strings, rank maps and filters point into the cli_opts the job came from
 * (which outlives it); job_free releases what the job owns itself. */
#ifndef DDP_JOB_H
#define DDP_JOB_H

#include <stdbool.h>
#include <stdint.h>

#include <sched.h>

#include "cli.h"
#include "prog.h"
#include "rdzv_conf.h"
#include "shmsweep.h"

struct job {
	/* The workers of this node. */
	int nproc;	  /* local workers: --nproc-per-node resolved (nproc.h) */
	struct prog prog; /* what each of them runs */
	const char *role;
	const char *run_id; /* --rdzv-id, or --standalone's random one */
	int max_restarts;
	const char *signals_to_handle; /* TORCHELASTIC_SIGNALS_TO_HANDLE, as given */
	bool virtual_local_rank;
	cpu_set_t *cpu_sets;   /* --numa-binding: per local rank; NULL: unpinned */
	const char *shm_nonce; /* DDP_SHM_NONCE and the sweeps' (shmsweep.h); NULL: none */
	char hostname[256];    /* for the report, the prefixes, the rendezvous */
	/* Stopping them. */
	int64_t shutdown_timeout_ms;
	const int *signals; /* --signals-to-handle, less fwd_signals */
	int nsignals;
	const int *fwd_signals; /* --forward-signals (agent_fwd.h) */
	int nfwd_signals;
	int64_t hang_timeout_ms; /* --hang-timeout: 0 off (hang.h) */
	/* Their output. */
	const char *log_dir; /* NULL: a temporary directory */
	bool logs_off;	     /* --log-dir /dev/null (cli.h) */
	struct cli_std redirects, tee;
	const int *ranks_filter; /* local ranks shown on the console; NULL: all */
	int nranks_filter;
	/* --log-line-prefix-template, else TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE;
	 * NULL: torchrun's "[<role><local_rank>]:" */
	const char *log_line_prefix;
	bool tag_output;
	struct cli_filters dup_filters[2]; /* [0] stdout, [1] stderr */
	/* The nodes. */
	bool multinode;		  /* a coordinator runs the node rendezvous (cli_multinode) */
	bool dynamic;		  /* --rdzv-backend c10d: ranks by arrival; else static */
	int min_nodes, max_nodes; /* --nnodes MIN:MAX */
	int node_rank;		  /* static: --node-rank */
	const char *nnodes_from, *node_rank_from; /* cli_opts' */
	const char *rdzv_backend;		  /* as given: the nodes check they agree */
	const char *rdzv_endpoint;		  /* dynamic: the store's HOST[:PORT] */
	struct rdzv_conf rdzv;			  /* --rdzv-conf over ddprun's defaults */
	/* The store: static, node 0's at --master-addr (one node: the agent's). */
	const char *master_addr;
	int master_port;
	bool master_port_given;	     /* --master-port or PET_MASTER_PORT */
	const char *master_port_src; /* the flag or variable that gave it (cli.h) */
	const char *local_addr;	     /* --local-addr: how the other nodes reach this one */
	int store_io;		     /* STORE_IO_* for the stores ddprun hosts */
	/* --master-addr came from this SLURM_*NODELIST; NULL: it did not. */
	const char *slurm_master_var;
	/* Several nodes (a fixed number), but this one cannot run its part
	 * (its program not there, 127, or not executable, 126; no GPU for
	 * --nproc-per-node=gpu, 1): it joins the rendezvous only to end it for
	 * every node with this status and message, rather than leave them
	 * waiting join_timeout. 0: none. */
	int prefail_status;
	char prefail_msg[400];
	/* What the job owns. */
	char run_id_buf[40];
	char nonce_buf[SHMSWEEP_NONCE_LEN + 1];
};

#define JOB_EXIT_USAGE 2 /* bad usage: ddprun's exit status (ddprun(1)) */
/* How often the store's host name is looked up again while its lookup fails
 * only for now (no resolver answers), within join_timeout: on one node
 * (agent.c) and on several (coord_start.c). */
#define JOB_RESOLVE_RETRY_MS 1000

/* Everything main() decides before the loop: --standalone's run id, nproc
 * (and the warnings and checks that need it), NUMA pinning, the program,
 * the host name and the shared-memory nonce. Messages go to stderr. 0, or
 * the exit status to end with (2 bad usage, 126/127 a program that cannot
 * run, 1 otherwise). With a fixed number of several nodes those are
 * prefail_status instead (0 returned). */
int job_resolve(struct job *j, struct cli_opts *o, const char *(*getenv_fn)(const char *name));
/* The part of job_resolve that copies o; nproc, prog, cpu_sets, hostname
 * ("localhost") and shm_nonce (NULL) are left for the caller. */
void job_from_opts(struct job *j, const struct cli_opts *o,
		   const char *(*getenv_fn)(const char *name));
void job_free(struct job *j);

/* Where the store's host came from, for the messages about it: the flag,
 * or Slurm's variable (a static buffer: the main thread only). */
const char *job_store_host_source(const struct job *j);
/* True when local_rank is shown on the console (--local-ranks-filter). */
bool job_rank_shown(const struct job *j, int local_rank);
/* True when -r/--redirects or -t/--tee send some stream of a local rank of
 * this node (0..nproc-1) to a log file; a map that names only ranks this
 * node does not run ("5:3" with 2 workers) writes none here. */
bool job_writes_logs(const struct job *j);
/* The signals of --signals-to-handle that ddprun catches, into out (room
 * for nsignals); their count. Not one ignored at startup: under nohup
 * SIGHUP stays ignored, in ddprun and in its workers (torchrun's handler
 * overrides SIG_IGN, and its workers then get the default). */
int job_caught_signals(const struct job *j, int *out);

#endif
