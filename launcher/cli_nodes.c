/* cli_nodes: Slurm defaults and cross-option checks (see cli_nodes.h). */
#include "cli_nodes.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "rdzv_msg.h"
#include "slurm.h"
#include "util.h"

/* `srun ddprun --nnodes 2` on a step of 3 nodes, ranks from SLURM_NODEID:
 * the nodes past 2 would be refused one by one while the others run on (or
 * all be, as the rendezvous races). `--nnodes 3` on a step of 2: node rank
 * 2 is nobody's, and node 0 waited join_timeout for it. Both refused on
 * every node alike. --node-rank given (nodes placed by hand, some perhaps
 * from another step) and c10d (ranks by arrival, nodes from anywhere: an
 * elastic MIN:MAX) are the user's to mean. */
static int check_given_nnodes(const struct cli_opts *o, const struct cli_given *g,
			      const char *(*getenv_fn)(const char *name), char *err, size_t errlen)
{
	const char *v = getenv_fn("SLURM_NNODES");
	char why[300];
	int n;

	/* Outside a step (the batch script) --nnodes 1 is how to run alone. */
	if (!g->nnodes || g->node_rank || o->standalone || strcmp(o->rdzv_backend, "static") != 0 ||
	    v == NULL || util_parse_int(v, 1, 1 << 24, &n) != 0 ||
	    (o->max_nodes >= n && o->min_nodes <= n) ||
	    slurm_step(getenv_fn, why, sizeof(why)) != SLURM_STEP_SRUN)
		return 0;
	if (o->min_nodes > n) {
		snprintf(
			err, errlen,
			"--nnodes %d is above the %d nodes of this srun step (SLURM_NNODES), whose "
			"node ranks come from SLURM_NODEID: node rank %d would never join; run "
			"srun "
			"--nodes=%d (in an allocation of as many), or leave --nnodes out",
			o->min_nodes, n, n, o->min_nodes);
		return -EINVAL;
	}
	snprintf(err, errlen,
		 "--nnodes %d is below the %d nodes of this srun step (SLURM_NNODES), whose node "
		 "ranks come from SLURM_NODEID: run srun --nodes=%d, or leave --nnodes out",
		 o->max_nodes, n, o->max_nodes);
	return -EINVAL;
}

/* Inside an allocation (`srun ddprun ...`, one task per node), what the flags
 * leave open comes from Slurm. A malformed SLURM_* only matters when needed. */
static int apply_slurm(struct cli_opts *o, const struct cli_given *g,
		       const char *(*getenv_fn)(const char *name), char *err, size_t errlen)
{
	/* c10d ranks nodes by arrival at --rdzv-endpoint's store: SLURM_NODEID
	 * and the first host would be taken (and said) for nothing. */
	bool c10d = strcmp(o->rdzv_backend, "c10d") == 0;
	/* --nnodes 1: node 0, hosting its store here. Slurm's first node is
	 * where several meet, and need not be this one (salloc's shell on a
	 * login node), nor SLURM_NODEID this node's rank in a job of one. */
	bool alone = g->nnodes && o->max_nodes == 1;
	struct slurm_info si;
	unsigned need = (g->nnodes ? 0 : SLURM_NEED_NNODES) |
			(g->node_rank || c10d ? 0 : SLURM_NEED_NODE_RANK) |
			(g->master_addr || c10d ? 0 : SLURM_NEED_MASTER);
	char why[300];
	int rc;

	if (need == 0 && !c10d && !o->standalone)
		return 0;
	/* --standalone is one node of its own, whatever the allocation (the
	 * run id too is its own): torchrun's single-node command line runs as
	 * it does outside Slurm, in a batch script or in a step, whose checks
	 * (one task a node) still hold. */
	if (o->standalone)
		need = 0;
	else if (alone) /* the run id still comes from Slurm */
		need &= ~(unsigned)(SLURM_NEED_NODE_RANK | SLURM_NEED_MASTER);
	if (!g->rdzv_id && !o->standalone)
		need |= SLURM_NEED_RUN_ID;
	rc = slurm_info_read(getenv_fn, need, &si, why, sizeof(why));
	if (rc != 0) {
		snprintf(err, errlen, "%s", why);
		return -EINVAL;
	}
	o->slurm_stray = si.stray;
	if (!si.in_allocation || o->standalone)
		return 0;
	snprintf(o->slurm_step_ignored, sizeof(o->slurm_step_ignored), "%s", si.step_ignored);
	/* A job of one node from Slurm is one too: SLURM_NODELIST's first node
	 * need not be this one either (salloc's shell on a login node, step
	 * variables another job left). */
	if (!g->nnodes && si.nnodes == 1)
		alone = true;
	if (check_given_nnodes(o, g, getenv_fn, err, errlen) != 0)
		return -EINVAL;
	if (!g->nnodes && si.nnodes > 0) {
		if (si.nnodes > CLI_MAX_NODES) {
			snprintf(err, errlen, "SLURM_NNODES=%d: at most %d nodes", si.nnodes,
				 CLI_MAX_NODES);
			return -EINVAL;
		}
		o->min_nodes = o->max_nodes = si.nnodes;
		o->slurm_nnodes = true;
		o->nnodes_from = "SLURM_NNODES";
	}
	if (!g->node_rank && si.node_rank >= 0 && !alone && !c10d) {
		o->node_rank = si.node_rank;
		o->slurm_node_rank = true;
		o->node_rank_from = "SLURM_NODEID";
	}
	if (!g->master_addr && si.master[0] != '\0' && !alone) {
		snprintf(o->slurm_master, sizeof(o->slurm_master), "%s", si.master);
		o->master_addr = o->slurm_master;
		o->slurm_master_addr = true;
		o->slurm_master_var = si.master_var;
	}
	/* Jobs that share a node and a port then meet as two run ids on one
	 * store (told apart) rather than as one job whose ranks clash. */
	if (!g->rdzv_id && !o->standalone && si.run_id[0] != '\0') {
		snprintf(o->slurm_run_id, sizeof(o->slurm_run_id), "%s", si.run_id);
		o->rdzv_id = o->slurm_run_id;
		o->slurm_rdzv_id = true;
	}
	return 0;
}

/* torchrun's --standalone is c10d at localhost:0: one node whose endpoint
 * has port 0 meets nobody, so it runs alone with a store on a free port, as
 * --standalone (the run id stays --rdzv-id's). */
static bool c10d_alone(const struct cli_opts *o)
{
	char host[256];
	int port;

	return o->max_nodes == 1 &&
	       util_parse_endpoint(o->rdzv_endpoint, host, sizeof(host), CLI_RDZV_PORT, &port) ==
		       0 &&
	       port == 0;
}

bool cli_runs_alone(const struct cli_opts *o)
{
	return o->standalone || (strcmp(o->rdzv_backend, "c10d") == 0 && c10d_alone(o));
}

bool cli_multinode(const struct cli_opts *o)
{
	return o->max_nodes > 1 || (strcmp(o->rdzv_backend, "c10d") == 0 && !o->standalone &&
				    o->rdzv_endpoint[0] != '\0' && !c10d_alone(o));
}

int cli_nodes_resolve(struct cli_opts *o, const struct cli_given *g,
		      const char *(*getenv_fn)(const char *name), char *err, size_t errlen)
{
	bool c10d = strcmp(o->rdzv_backend, "c10d") == 0;
	int rc = apply_slurm(o, g, getenv_fn, err, errlen);

	if (rc != 0)
		return rc;
	/* torchrun 2.11+ runs a single node given no port and no rendezvous
	 * as --standalone (pytorch#175699): its run id is a fresh uuid4, which
	 * scripts take for a unique job name (1.13 and 2.6 said "none"). A
	 * free port ddprun takes there already. An explicit id stays. */
	o->random_run_id = !g->rdzv_id && !o->slurm_rdzv_id && !o->standalone &&
			   o->max_nodes == 1 && strcmp(o->rdzv_backend, "static") == 0 &&
			   o->rdzv_endpoint[0] == '\0' && !o->master_port_given;
	/* --standalone's store is private: no other node can join. torchrun
	 * runs --nnodes 1:N alone (after its last-call wait), and waits for ever
	 * for a second node that cannot come where the minimum is more. */
	if (o->standalone && o->max_nodes > 1 && o->min_nodes == 1)
		o->max_nodes = 1;
	if (o->standalone && o->max_nodes > 1) {
		snprintf(err, errlen,
			 "--standalone runs a single node (--nnodes %d:%d asks for more: use "
			 "--rdzv-backend c10d --rdzv-endpoint HOST:PORT)",
			 o->min_nodes, o->max_nodes);
		return -EINVAL;
	}
	/* One node has no rendezvous to tell: a bad rank is a plain usage error.
	 * A static job's nodes are told by the rendezvous (coord_join.c). c10d
	 * ranks nodes by arrival: it reads no rank (a Kubeflow pod exports
	 * PET_NODE_RANK whatever the backend). */
	if (!c10d && !o->standalone && o->max_nodes == 1 && o->node_rank >= 1) {
		snprintf(err, errlen, "--node-rank %d%s%s%s is not below the number of nodes (1)",
			 o->node_rank, CLI_FROM(o->node_rank_from));
		return -EINVAL;
	}
	if (o->max_nodes == 1 || o->standalone)
		return 0;
	if (!c10d && o->min_nodes != o->max_nodes) {
		snprintf(err, errlen,
			 "--nnodes %d:%d%s%s%s: a range needs --rdzv-backend c10d (the static "
			 "rendezvous has a fixed number of nodes)",
			 o->min_nodes, o->max_nodes, CLI_FROM(o->nnodes_from));
		return -EINVAL;
	}
	if (c10d && o->rdzv_endpoint[0] == '\0') {
		snprintf(err, errlen, "--rdzv-backend c10d needs --rdzv-endpoint HOST[:PORT]");
		return -EINVAL;
	}
	if (cli_multinode(o) && strlen(o->role) >= RDZV_ROLE_MAX) {
		snprintf(err, errlen,
			 "--role: a job of several nodes takes a name of at most %d bytes (the "
			 "rendezvous carries it to the other nodes)",
			 RDZV_ROLE_MAX - 1);
		return -EINVAL;
	}
	return 0;
}
