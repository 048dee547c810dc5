/* slurm_step: whether this process runs in a step that srun started for
 * this job, and a heterogeneous step's node 0 (see slurm.h). */
#include "slurm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* Slurm's own step ids lie above its last normal one (SLURM_MAX_NORMAL_STEP_ID
 * in Slurm's slurm.h): the interactive step, the batch script, the extern
 * step, a pending one. */
#define STEP_ID_MAX_NORMAL  0xfffffff0ull
#define STEP_ID_INTERACTIVE 0xfffffffaull

#define STALE                                                                           \
	"the SLURM_STEP_* variables are another job's or step's (sbatch passes on the " \
	"environment it is run from: srun --pty bash, salloc's interactive step)"

static int cmp_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The hosts of list, sorted, each once (slurm_hosts_free). */
static int sorted_hosts(const char *list, char ***hosts, size_t *n)
{
	size_t i, k = 0;
	int rc = slurm_hostlist_expand(list, hosts, n);

	if (rc != 0)
		return rc;
	qsort(*hosts, *n, sizeof(**hosts), cmp_name);
	for (i = 0; i < *n; i++) {
		if (k > 0 && strcmp((*hosts)[k - 1], (*hosts)[i]) == 0)
			free((*hosts)[i]);
		else
			(*hosts)[k++] = (*hosts)[i];
	}
	*n = k;
	return 0;
}

/* Are a's hosts all in b's (equal: the same sets)? 1, 0, or a negative
 * errno (a list that does not expand: for its reader to name). */
static int hosts_within(const char *a, const char *b, bool equal)
{
	char **ha = NULL, **hb = NULL;
	size_t na = 0, nb = 0, i;
	int rc = sorted_hosts(a, &ha, &na);

	if (rc == 0)
		rc = sorted_hosts(b, &hb, &nb);
	if (rc == 0) {
		rc = !equal || na == nb;
		for (i = 0; i < na && rc == 1; i++)
			rc = bsearch(&ha[i], hb, nb, sizeof(*hb), cmp_name) != NULL;
	}
	slurm_hosts_free(ha, na);
	slurm_hosts_free(hb, nb);
	return rc;
}

enum slurm_step slurm_step(const char *(*getenv_fn)(const char *name), char *why, size_t whylen)
{
	const char *id = slurm_step_id(getenv_fn), *nn, *sn, *sl, *jl;
	unsigned long long v;
	int a, b;
	char *end;

	if (id == NULL) {
		snprintf(why, whylen,
			 "SLURM_STEP_ID is not set: the batch script or salloc's shell");
		return SLURM_STEP_NONE;
	}
	errno = 0;
	v = strtoull(id, &end, 10);
	if (errno == 0 && end != id && *end == '\0' && v > STEP_ID_MAX_NORMAL) {
		snprintf(why, whylen,
			 v == STEP_ID_INTERACTIVE
				 ? "SLURM_STEP_ID=%s: salloc's interactive step, on one node"
				 : "SLURM_STEP_ID=%s: one of Slurm's own steps, not one srun "
				   "started",
			 id);
		return SLURM_STEP_OWN;
	}
	/* srun sets both to the step's node count: they differ only where the
	 * step's variables were inherited by another job, whose own are the
	 * job's. */
	nn = getenv_fn("SLURM_NNODES");
	sn = getenv_fn("SLURM_STEP_NUM_NODES");
	if (nn != NULL && sn != NULL && util_parse_int(nn, 1, 1 << 24, &a) == 0 &&
	    util_parse_int(sn, 1, 1 << 24, &b) == 0 && a != b) {
		snprintf(why, whylen, "SLURM_STEP_NUM_NODES=%d is not SLURM_NNODES=%d: " STALE, b,
			 a);
		return SLURM_STEP_STALE;
	}
	sl = getenv_fn("SLURM_STEP_NODELIST");
	jl = getenv_fn("SLURM_JOB_NODELIST");
	if (sl != NULL && jl != NULL && hosts_within(sl, jl, false) == 0) {
		snprintf(why, whylen,
			 "SLURM_STEP_NODELIST=%.60s is not within SLURM_JOB_NODELIST=%.60s: " STALE,
			 sl, jl);
		return SLURM_STEP_STALE;
	}
	return SLURM_STEP_SRUN;
}

int slurm_het_first(const char *(*getenv_fn)(const char *name), char *buf, size_t len,
		    const char **var, char *err, size_t errlen)
{
	static const char *const first[2] = {"SLURM_JOB_NODELIST_HET_GROUP_0",
					     "SLURM_JOB_NODELIST_PACK_GROUP_0"};
	const char *size_var = "SLURM_HET_SIZE", *v = getenv_fn(size_var);
	const char *step = getenv_fn("SLURM_STEP_NODELIST");
	int pack = 0, size, g, rc = 0;
	char *all = NULL;
	size_t n = 0;

	if (v == NULL) { /* Slurm before 20.02 */
		v = getenv_fn(size_var = "SLURM_PACK_SIZE");
		pack = 1;
	}
	if (v == NULL || util_parse_int(v, 1, 1 << 20, &size) != 0 || size < 2 || step == NULL)
		return 1;
	/* The step spans the job's components 0..size-1 exactly: node 0 is
	 * component 0's first (their lists, joined, are one hostlist). A step
	 * within one component (plain srun in the job's script runs on
	 * component 0; the script's SLURM_HET_SIZE stays) numbers its sorted
	 * list, as any step. */
	for (g = 0; g < size; g++) {
		char name[64];
		const char *list;
		char *grown;

		snprintf(name, sizeof(name), "SLURM_JOB_NODELIST_%s_GROUP_%d",
			 pack ? "PACK" : "HET", g);
		list = getenv_fn(name);
		if (list != NULL && hosts_within(step, list, false) == 1) {
			free(all);
			return 1;
		}
		grown = list != NULL ? realloc(all, n + strlen(list) + 2) : NULL;
		if (grown == NULL) {
			rc = -ENOENT;
			break;
		}
		all = grown;
		n += (size_t)sprintf(all + n, "%s%s", n > 0 ? "," : "", list);
	}
	if (rc == 0)
		rc = hosts_within(step, all, true) == 1 ? 0 : -ENOENT;
	free(all);
	if (rc == 0 && slurm_hostlist_first(getenv_fn(first[pack]), buf, len) == 0) {
		*var = first[pack];
		return 0;
	}
	snprintf(err, errlen,
		 "a heterogeneous step (%s=%d) numbers its nodes component by component, and "
		 "this one's are not the job's %d components: node 0 is unknown (give "
		 "--master-addr its first node, or --rdzv-backend c10d)",
		 size_var, size, size);
	return -EINVAL;
}
