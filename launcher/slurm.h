/* slurm: read a Slurm allocation's shape from SLURM_* variables.
 *
 * Hostlists use Slurm's syntax: comma-separated expressions, each a run of
 * literal text and bracketed range lists, e.g. "node[01-04,07],gpu-a[1-2]" or
 * "rack[1-2]-n[1-3]" (several brackets form the cross product, leftmost
 * slowest). A range "a-b" keeps the zero padding of a ("01-10" gives 01..10).
 * Errors: -EINVAL for malformed lists (unbalanced or nested brackets, empty
 * items, b < a, non-digits in a range), -E2BIG beyond SLURM_MAX_HOSTS hosts or
 * a host name longer than SLURM_MAX_HOSTNAME, -ENOMEM. */
#ifndef DDP_SLURM_H
#define DDP_SLURM_H

#include <stdbool.h>
#include <stddef.h>

#include "rdzv_keys.h"

#define SLURM_MAX_HOSTS	   (1 << 20)
#define SLURM_MAX_HOSTNAME 255

/* Expand a hostlist into a malloc'd array of malloc'd names (*hosts, *n);
 * release with slurm_hosts_free(). */
int slurm_hostlist_expand(const char *list, char ***hosts, size_t *n);
void slurm_hosts_free(char **hosts, size_t n);

/* The first host of a hostlist, without expanding the rest. */
int slurm_hostlist_first(const char *list, char *buf, size_t len);

/* What a Slurm allocation says about this node. Fields are -1 / "" when the
 * variable is absent. */
struct slurm_info {
	int in_allocation;		     /* SLURM_JOB_ID is set */
	int nnodes;			     /* SLURM_NNODES (or SLURM_JOB_NUM_NODES) */
	int node_rank;			     /* SLURM_NODEID */
	char master[SLURM_MAX_HOSTNAME + 1]; /* first host of the step's node list */
	const char *master_var;		     /* the variable it came from */
	char job_id[64];
	/* SLURM_JOB_ID, then ".SLURM_STEP_ID" under srun, then ".rN" in a job
	 * requeued N times (SLURM_RESTART_COUNT): the same on every node of a
	 * step, and another for every job, step and requeue (a default run id).
	 * "" when that is longer than a run id may be (SLURM_NEED_RUN_ID). */
	char run_id[RDZV_RUN_ID_MAX];
	/* Outside an allocation: the first of SLURM_NNODES, SLURM_NODEID that is
	 * set anyway (worth a warning: it is not used), or NULL. */
	const char *stray;
	/* SLURM_STEP_* set but not this job's (slurm_step: SLURM_STEP_STALE),
	 * so not used: why, for a warning; else "". */
	char step_ignored[300];
};

/* What the caller needs of slurm_info (the others stay -1 / "", unread). */
#define SLURM_NEED_NNODES    1u
#define SLURM_NEED_NODE_RANK 2u
#define SLURM_NEED_MASTER    4u
#define SLURM_NEED_RUN_ID    8u /* always made, but too long an error only when needed */
#define SLURM_NEED_ALL	     15u

/* Read the variables of need through getenv_fn (getenv in production, a
 * table in tests). The master is the first host of SLURM_STEP_NODELIST (the
 * nodes srun started this step on), else SLURM_JOB_NODELIST or
 * SLURM_NODELIST. -EINVAL with the reason in err (size errlen): a needed
 * variable present but malformed (named), a step with more tasks than
 * nodes (SLURM_STEP_NUM_TASKS > SLURM_STEP_NUM_NODES: ddprun runs one per
 * node), a run id needed but longer than RDZV_RUN_ID_MAX - 1 bytes (give
 * --rdzv-id), or several nodes needed outside an srun step (slurm_step: the
 * batch script, salloc's shell or interactive step, where no other node
 * runs ddprun). Outside an srun step SLURM_STEP_* are not read. A variable
 * not needed is not read, so a flag overrides a malformed one. */
/* SLURM_STEP_ID (or the older SLURM_STEPID): set in an srun step, not in the
 * batch script or salloc's shell; NULL there. */
const char *slurm_step_id(const char *(*getenv_fn)(const char *name));

/* Where this process runs in the allocation. Only in SLURM_STEP_SRUN do
 * SLURM_NNODES, SLURM_NODEID and SLURM_STEP_* describe a step that srun
 * started on every node of it. */
enum slurm_step {
	SLURM_STEP_SRUN,  /* an srun step of this job */
	SLURM_STEP_NONE,  /* no step id: the batch script, salloc's shell */
	SLURM_STEP_OWN,	  /* one of Slurm's own step ids: salloc's interactive step */
	SLURM_STEP_STALE, /* step variables that another job's or step's environment left
			   * (sbatch passes its caller's on): not this job's nodes */
};
/* The kind, and for any but SLURM_STEP_SRUN why, for a message, in why. */
enum slurm_step slurm_step(const char *(*getenv_fn)(const char *name), char *why, size_t whylen);
/* In a heterogeneous step (SLURM_HET_SIZE, or SLURM_PACK_SIZE, above 1),
 * whose SLURM_NODEID goes component by component while SLURM_STEP_NODELIST
 * is sorted: node 0's host into buf, and in *var the variable it came from,
 * where the step spans the job's components exactly; else -EINVAL with the
 * reason in err. 1: no heterogeneous step. */
int slurm_het_first(const char *(*getenv_fn)(const char *name), char *buf, size_t len,
		    const char **var, char *err, size_t errlen);

int slurm_info_read(const char *(*getenv_fn)(const char *name), unsigned need,
		    struct slurm_info *info, char *err, size_t errlen);

/* The last "key=value" of a slurm.conf at path (key in any case) into buf:
 * 0, or -ENOENT (no such file or key). */
int slurm_conf_value(const char *path, const char *key, char *buf, size_t len);
/* Whether Slurm's ProctrackType is proctrack/linuxproc, read from the
 * slurm.conf at conf ($SLURM_CONF; NULL: /etc/slurm/slurm.conf): the one
 * whose slurmstepd signals every process of the step, ddprun's workers
 * included. proctrack/cgroup (Slurm's default, also when the key is absent)
 * signals only the step's tasks, slurmstepd's own children, with anything
 * but SIGKILL, and proctrack/pgid only their process group: neither reaches
 * the workers. False when unreadable or anything else (agent_sig.h). */
bool slurm_proctrack_linuxproc(const char *conf);

#endif
