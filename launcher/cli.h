/* cli: ddprun's command line, torchrun-compatible.
 *
 * Every torchrun flag in both spellings (--nproc-per-node, --nproc_per_node),
 * unique prefixes accepted like argparse, defaults taken from PET_<NAME>
 * environment variables (then the command line wins). Parsing stops at the
 * first non-option: that is the program, the rest are its arguments.
 * Strings in struct cli_opts point into argv or the environment (not copied);
 * only the rank maps are allocated (cli_free releases them). Inside a Slurm
 * allocation, --nnodes, --node-rank and --master-addr default to SLURM_NNODES,
 * SLURM_NODEID and the first host of SLURM_JOB_NODELIST (flags and PET_*
 * win). A static job's --node-rank beyond --nnodes is left for the
 * rendezvous to report (it tells the other nodes too).
 * cli_parse returns CLI_OK, CLI_HELP or CLI_VERSION, or -EINVAL with one line
 * (no trailing newline) in err for the caller to print and exit 2.
 * main() resolves the options once into the job (job.h), which is what the
 * agent and the coordinator read; only main and the resolvers (job.c,
 * nproc.h, prog.h) read struct cli_opts. */
#ifndef DDP_CLI_H
#define DDP_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "rdzv_conf.h"
#include "slurm.h"
#include "util.h"

/* Bounds of the options' values; each check's message states its bound
 * from the same define (man/ddprun.1 states CLI_MAX_NPROC too). */
#define CLI_MAX_NPROC	 4096 /* workers per node */
#define CLI_MAX_NODES	 65536
#define CLI_MAX_SIGNALS	 32
#define CLI_MAX_PORT	 UTIL_PORT_MAX
#define CLI_MAX_RESTARTS 1000000
/* torchrun's default ports: --master-port's (static; a string, the option's
 * default), and --rdzv-endpoint's when it names none (c10d). */
#define CLI_MASTER_PORT UTIL_STR(UTIL_MASTER_PORT)
#define CLI_RDZV_PORT	29400
/* --shutdown-timeout's default, torchrun's 30 s */
#define CLI_SHUTDOWN_TIMEOUT_MS 30000

enum { CLI_OK = 0, CLI_HELP = 1, CLI_VERSION = 2 };

enum cli_nproc_kind { CLI_NPROC_NUM, CLI_NPROC_GPU, CLI_NPROC_CPU, CLI_NPROC_AUTO };

/* Stream codes of -r/--redirects and -t/--tee: bit 1 stdout, bit 2 stderr. */
enum { CLI_STD_NONE = 0, CLI_STD_OUT = 1, CLI_STD_ERR = 2, CLI_STD_ALL = 3 };

/* "3" (every local rank) or "0:1,1:2" (per local rank, others NONE). */
struct cli_std {
	int all;  /* code for every local rank, or -1 when map is used */
	int *map; /* map[local_rank] for local_rank < nmap */
	int nmap;
};

/* --numa-binding modes (torch/numa/binding.py); CLI_NUMA_NONE: not asked. */
enum cli_numa { CLI_NUMA_NONE, CLI_NUMA_NODE, CLI_NUMA_SOCKET, CLI_NUMA_EXCLUSIVE, CLI_NUMA_CCX };

/* --duplicate-std{out,err}-filters: substrings, any of which selects a line. */
struct cli_filters {
	char **s;
	int n;
};

struct cli_opts {
	enum cli_nproc_kind nproc_kind;
	int nproc; /* for CLI_NPROC_NUM */
	int min_nodes, max_nodes;
	int node_rank;
	/* Where they came from when not their option, for messages:
	 * "PET_NNODES", "SLURM_NNODES", ...; NULL: the option or the default. */
	const char *nnodes_from, *node_rank_from;
	const char *master_addr;
	int master_port;
	bool master_port_given; /* --master-port or PET_MASTER_PORT */
	/* Where master_port came from, for messages: --master-port,
	 * PET_MASTER_PORT, --rdzv-endpoint or PET_RDZV_ENDPOINT (static). */
	const char *master_port_src;
	const char *rdzv_backend;
	const char *rdzv_endpoint;
	const char *rdzv_id;
	/* No --rdzv-id, one node, no port or rendezvous given: a fresh uuid4
	 * run id, as torchrun 2.11+ (job_resolve makes it, as --standalone's). */
	bool random_run_id;
	const char *rdzv_conf;
	struct rdzv_conf rdzv; /* rdzv_conf parsed over ddprun's defaults */
	bool standalone;
	int max_restarts;
	int64_t monitor_interval_ms; /* accepted; the agent is event driven */
	const char *start_method;    /* accepted; workers are always exec'd */
	const char *role;
	bool module, no_python, run_path;
	const char *log_dir; /* NULL: a temporary directory */
	bool logs_off;	     /* --log-dir /dev/null: no logs, no error files */
	struct cli_std redirects, tee;
	int *ranks_filter; /* local ranks shown on the console; NULL: all */
	int nranks_filter;
	const char *local_addr; /* --local-addr's host, out of any brackets; NULL: none */
	char local_host[256];
	int store_io; /* STORE_IO_* from DDP_STORE_IO, for the stores ddprun hosts */
	int signals[CLI_MAX_SIGNALS]; /* --signals-to-handle, less fwd_signals */
	int nsignals;
	int fwd_signals[CLI_MAX_SIGNALS]; /* --forward-signals (launcher/agent_fwd.h) */
	int nfwd_signals;
	int64_t shutdown_timeout_ms;
	bool tag_output;	 /* ddprun's own: "[rankN]: " before each console line */
	int64_t hang_timeout_ms; /* --hang-timeout: 0 off (launcher/hang.h) */
	/* torchrun 2.x (cli_torch2.c) */
	const char *signals_to_handle; /* as given: TORCHELASTIC_SIGNALS_TO_HANDLE */
	const char *event_log_handler; /* accepted; ddprun records no events */
	const char *log_line_prefix;   /* --log-line-prefix-template; NULL: none */
	const char *logs_specs;	       /* accepted, ignored (a Python entry point) */
	enum cli_numa numa_binding;
	bool virtual_local_rank;
	struct cli_filters dup_filters[2]; /* [0] stdout, [1] stderr */
	/* Inside a Slurm allocation, what came from SLURM_* (cli_nodes.c). */
	char endpoint_host[256]; /* static --rdzv-endpoint's host: master_addr then */
	bool slurm_nnodes, slurm_node_rank, slurm_master_addr, slurm_rdzv_id;
	char slurm_run_id[RDZV_RUN_ID_MAX];	   /* rdzv_id points here then: JOB[.STEP] */
	char slurm_master[SLURM_MAX_HOSTNAME + 1]; /* master_addr points here then */
	const char *slurm_master_var;		   /* the SLURM_*NODELIST it came from */
	const char *slurm_stray;      /* SLURM_* set outside an allocation (warned about) */
	char slurm_step_ignored[300]; /* SLURM_STEP_* not this job's: why (warned about) */
	/* Options given on the command line that a node running alone does not
	 * read (--master-addr, --master-port, --node-rank: cli_runs_alone),
	 * as "--a, --b"; warned about. Their PET_ variables are passed over
	 * silently, as torchrun's. */
	char ignored[64];
	char **prog_argv; /* the program and its arguments (NULL-terminated) */
	int prog_argc;
};

int cli_parse(int argc, char **argv, const char *(*getenv_fn)(const char *name), struct cli_opts *o,
	      char *err, size_t errlen);
void cli_free(struct cli_opts *o);
void cli_usage(FILE *f);

/* More than one node, or a c10d rendezvous at an endpoint: the job needs
 * the node rendezvous (launcher/coord.h). */
bool cli_multinode(const struct cli_opts *o);
/* --standalone, or c10d at an endpoint of port 0 with one node: a private
 * store on a free port of this machine, whatever --master-addr,
 * --master-port and --node-rank say (torchrun's --standalone). */
bool cli_runs_alone(const struct cli_opts *o);
/* " (from NAME)" after a value that came from NAME, nothing for NULL: the
 * format's "%s%s%s" takes CLI_FROM(name). */
#define CLI_FROM(f) (f) != NULL ? " (from " : "", (f) != NULL ? (f) : "", (f) != NULL ? ")" : ""

/* The stream code for one local rank. */
int cli_std_get(const struct cli_std *s, int local_rank);
/* Parse "0".."3" or "lr:code,..." (as torchrun, but local ranks may have
 * several digits). -EINVAL on anything else. */
int cli_std_parse(const char *s, struct cli_std *out);
/* True when local_rank is shown on the console (--local-ranks-filter). */
bool cli_rank_shown(const struct cli_opts *o, int local_rank);
/* The same for a --local-ranks-filter list (NULL: every rank). */
bool cli_ranks_have(const int *filter, int n, int local_rank);

/* cli_torch2.c */
bool cli_event_handler_known(const char *name);
int cli_numa_mode_parse(const char *s, enum cli_numa *out);
const char *cli_numa_mode_name(enum cli_numa m);
/* Split at ',' with ",," standing for a literal comma, as torchrun does; ""
 * gives no filter. 0, -EINVAL for an empty item (a stray comma: it would
 * match every line), or -ENOMEM. */
int cli_filters_parse(const char *s, struct cli_filters *f);
void cli_filters_free(struct cli_filters *f);
bool cli_filters_match(const struct cli_filters *f, const char *line, size_t n);
/* One warning line on f for each torchrun setting that ddprun accepts and
 * does not use (--rdzv-conf keys it does not know, --logs-specs, an event log
 * handler, duplicate filters with no tee'd stream to copy). */
void cli_torch2_warn(const struct cli_opts *o, int nproc, FILE *f);

#endif
