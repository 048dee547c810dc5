/* cli_nodes: the options that place this node in a job, once every flag is
 * parsed: Slurm's defaults for --nnodes, --node-rank and --master-addr, and
 * the checks that involve several options (see cli.h). */
#ifndef DDP_CLI_NODES_H
#define DDP_CLI_NODES_H

#include <stdbool.h>
#include <stddef.h>

#include "cli.h"

/* Which options the command line or PET_* gave (Slurm fills the others). */
struct cli_given {
	bool nnodes, node_rank, master_addr, rdzv_id;
};

/* 0, or -EINVAL with one line in err. */
int cli_nodes_resolve(struct cli_opts *o, const struct cli_given *g,
		      const char *(*getenv_fn)(const char *name), char *err, size_t errlen);

#endif
