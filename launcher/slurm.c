/* slurm: Slurm hostlist expansion and SLURM_* derivation (see slurm.h). */
#include "slurm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv_keys.h"
#include "util.h"

/* One numeric range of a bracket: lo..hi printed with at least width digits. */
struct range {
	unsigned long lo, hi;
	int width;
};

struct hostvec {
	char **v;
	size_t n, cap;
};

static int hostvec_push(struct hostvec *hv, const char *name)
{
	if (hv->n >= SLURM_MAX_HOSTS)
		return -E2BIG;
	if (hv->n == hv->cap) {
		size_t cap = hv->cap ? hv->cap * 2 : 16;
		char **v = realloc(hv->v, cap * sizeof(*v));

		if (v == NULL)
			return -ENOMEM;
		hv->v = v;
		hv->cap = cap;
	}
	hv->v[hv->n] = strdup(name);
	if (hv->v[hv->n] == NULL)
		return -ENOMEM;
	hv->n++;
	return 0;
}

/* Parse "lo" or "lo-hi" from s[0..len). */
static int parse_range(const char *s, size_t len, struct range *r)
{
	char buf[32];
	const char *dash;
	size_t llen;
	int64_t lo, hi;

	if (len == 0 || len >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, s, len);
	buf[len] = '\0';
	dash = strchr(buf, '-');
	llen = dash ? (size_t)(dash - buf) : len;
	if (llen == 0 || llen > 18)
		return -EINVAL;
	if (dash)
		buf[llen] = '\0';
	if (util_parse_i64(buf, 0, INT64_MAX, &lo) != 0 || buf[0] == '-' || buf[0] == '+')
		return -EINVAL;
	hi = lo;
	if (dash) {
		const char *h = dash + 1;

		if (*h == '\0' || *h == '-' || *h == '+' || strlen(h) > 18 ||
		    util_parse_i64(h, 0, INT64_MAX, &hi) != 0 || hi < lo)
			return -EINVAL;
	}
	r->lo = (unsigned long)lo;
	r->hi = (unsigned long)hi;
	r->width = (int)llen;
	return 0;
}

/* Length of the expression starting at s: up to the first comma outside
 * brackets. Checks bracket balance and nesting. */
static int expr_len(const char *s, size_t *len)
{
	int depth = 0;
	size_t i;

	for (i = 0; s[i] != '\0'; i++) {
		if (s[i] == '[') {
			if (depth++ > 0)
				return -EINVAL;
		} else if (s[i] == ']') {
			if (--depth < 0)
				return -EINVAL;
		} else if (s[i] == ',' && depth == 0) {
			break;
		}
	}
	if (depth != 0 || i == 0)
		return -EINVAL;
	*len = i;
	return 0;
}

/* Expand expression e[0..len) appending to the name built so far in name
 * (current length nlen). first_only stops after the first host. */
static int expand(const char *e, size_t len, char *name, size_t nlen, struct hostvec *hv,
		  int first_only)
{
	const char *open = memchr(e, '[', len);
	size_t lit = open ? (size_t)(open - e) : len;
	const char *close, *p;
	int rc;

	if (nlen + lit > SLURM_MAX_HOSTNAME)
		return -E2BIG;
	memcpy(name + nlen, e, lit);
	nlen += lit;
	if (open == NULL) {
		name[nlen] = '\0';
		return hostvec_push(hv, name);
	}
	close = memchr(open, ']', len - lit);
	if (close == NULL || close == open + 1)
		return -EINVAL;
	/* Each comma-separated item of the bracket, in order. */
	for (p = open + 1; p < close;) {
		const char *c = memchr(p, ',', (size_t)(close - p));
		const char *end = c ? c : close;
		struct range r;
		unsigned long v;

		rc = parse_range(p, (size_t)(end - p), &r);
		if (rc != 0)
			return rc;
		for (v = r.lo;; v++) {
			char num[32];
			int k = snprintf(num, sizeof(num), "%0*lu", r.width, v);

			if (nlen + (size_t)k > SLURM_MAX_HOSTNAME)
				return -E2BIG;
			memcpy(name + nlen, num, (size_t)k);
			rc = expand(close + 1, len - (size_t)(close + 1 - e), name,
				    nlen + (size_t)k, hv, first_only);
			if (rc != 0 || (first_only && hv->n > 0))
				return rc;
			if (v == r.hi)
				break;
			if (hv->n >= SLURM_MAX_HOSTS)
				return -E2BIG;
		}
		p = c ? c + 1 : close;
		if (c != NULL && p == close)
			return -EINVAL; /* trailing comma: "[1,]" */
	}
	return 0;
}

/* Syntax check of a whole list without expanding it. */
static int validate_list(const char *list)
{
	const char *s = list;
	int rc;

	if (list == NULL || *list == '\0')
		return -EINVAL;
	for (;;) {
		const char *e, *end;
		size_t len;

		rc = expr_len(s, &len);
		if (rc != 0)
			return rc;
		for (e = s, end = s + len; (e = memchr(e, '[', (size_t)(end - e))) != NULL;) {
			const char *close = memchr(e, ']', (size_t)(end - e));
			const char *p = e + 1;
			struct range r;

			if (close == NULL || close == p)
				return -EINVAL;
			for (;;) {
				const char *c = memchr(p, ',', (size_t)(close - p));
				const char *item_end = c ? c : close;

				rc = parse_range(p, (size_t)(item_end - p), &r);
				if (rc != 0)
					return rc;
				if (c == NULL)
					break;
				p = c + 1;
			}
			e = close + 1;
		}
		s += len;
		if (*s == '\0')
			return 0;
		if (*++s == '\0')
			return -EINVAL;
	}
}

static int expand_list(const char *list, struct hostvec *hv, int first_only)
{
	char name[SLURM_MAX_HOSTNAME + 1];
	const char *s = list;
	int rc;

	if (list == NULL || *list == '\0')
		return -EINVAL;
	for (;;) {
		size_t len;

		rc = expr_len(s, &len);
		if (rc != 0)
			return rc;
		rc = expand(s, len, name, 0, hv, first_only);
		if (rc != 0 || (first_only && hv->n > 0))
			return rc;
		s += len;
		if (*s == '\0')
			return 0;
		s++; /* the comma */
		if (*s == '\0')
			return -EINVAL;
	}
}

void slurm_hosts_free(char **hosts, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(hosts[i]);
	free(hosts);
}

int slurm_hostlist_expand(const char *list, char ***hosts, size_t *n)
{
	struct hostvec hv = {0};
	int rc = expand_list(list, &hv, 0);

	if (rc != 0) {
		slurm_hosts_free(hv.v, hv.n);
		return rc;
	}
	*hosts = hv.v;
	*n = hv.n;
	return 0;
}

int slurm_hostlist_first(const char *list, char *buf, size_t len)
{
	struct hostvec hv = {0};
	int rc = validate_list(list);

	if (rc == 0)
		rc = expand_list(list, &hv, 1);

	if (rc == 0 && hv.n == 0)
		rc = -EINVAL;
	if (rc == 0) {
		if (strlen(hv.v[0]) >= len)
			rc = -ENAMETOOLONG;
		else
			strcpy(buf, hv.v[0]);
	}
	slurm_hosts_free(hv.v, hv.n);
	return rc;
}

/* The flag that overrides a variable, for the error message. */
static const char *flag_of(const char *name)
{
	if (strcmp(name, "SLURM_NODEID") == 0)
		return "--node-rank";
	if (strcmp(name, "SLURM_NNODES") == 0 || strcmp(name, "SLURM_JOB_NUM_NODES") == 0)
		return "--nnodes";
	if (strstr(name, "NODELIST") != NULL)
		return "--master-addr";
	return "--nnodes, --node-rank and --master-addr together";
}

static int read_int(const char *(*getenv_fn)(const char *), const char *name, int min, int *out,
		    char *err, size_t errlen)
{
	const char *v = getenv_fn(name);

	*out = -1;
	if (v == NULL)
		return 0;
	if (util_parse_int(v, min, 1 << 24, out) != 0) {
		snprintf(err, errlen, "%s='%.100s' is not a valid number (set %s instead)", name, v,
			 flag_of(name));
		*out = -1;
		return -EINVAL;
	}
	return 0;
}

/* `srun --ntasks-per-node=2 ddprun` would start two agents claiming the same
 * node rank: refuse, saying what to run instead. Inside an allocation of
 * several tasks a node, srun inherits SLURM_NTASKS and ignores a lone
 * --ntasks-per-node=1 (with a warning): the advice gives the task count too,
 * and the nodes, which srun -n alone would take from the job, not the step. */
static int check_one_task_per_node(const char *(*getenv_fn)(const char *), char *err, size_t errlen)
{
	int tasks, nodes, rc;

	rc = read_int(getenv_fn, "SLURM_STEP_NUM_TASKS", 1, &tasks, err, errlen);
	if (rc == 0)
		rc = read_int(getenv_fn, "SLURM_STEP_NUM_NODES", 1, &nodes, err, errlen);
	if (rc != 0)
		return rc;
	if (tasks > 0 && nodes > 0 && tasks > nodes) {
		snprintf(err, errlen,
			 "srun started %d tasks on %d nodes (SLURM_STEP_NUM_TASKS, "
			 "SLURM_STEP_NUM_NODES), but ddprun runs one per node and starts the "
			 "workers itself (--nproc-per-node): run srun --nodes=%d --ntasks=%d "
			 "--ntasks-per-node=1 ddprun ...",
			 tasks, nodes, nodes, nodes);
		return -EINVAL;
	}
	return 0;
}

/* The default run id, JOB[.STEP][.rN]. A requeued job keeps its id and
 * numbers its steps from 0 again: its run id would be the failed run's,
 * which a long-lived store (ddpstore serve) refuses. SLURM_RESTART_COUNT
 * (absent or 0 the first time) tells the runs apart; the first keeps
 * JOB.STEP. Whole or none: a cut id could be another step's or run's, and a
 * longer one would be refused by libddp (TORCHELASTIC_RUN_ID) and missing
 * from the store's runs/ (ddpstore status). None: its length and what makes
 * it into err, for a caller that needs it. */
static int make_run_id(const char *(*getenv_fn)(const char *), const char *job, const char *step,
		       struct slurm_info *info, char *err, size_t errlen)
{
	const char *v = getenv_fn("SLURM_RESTART_COUNT");
	bool again = true;
	int len, n;

	/* Not a number: still another run, so still another id. */
	if (v == NULL || *v == '\0' || (util_parse_int(v, 0, 1 << 30, &n) == 0 && n == 0))
		again = false;
	len = snprintf(info->run_id, sizeof(info->run_id), "%s%s%s%s%s", job, step ? "." : "",
		       step ? step : "", again ? ".r" : "", again ? v : "");
	if (len >= 0 && (size_t)len < sizeof(info->run_id))
		return 0;
	info->run_id[0] = '\0';
	snprintf(err, errlen,
		 "the run id SLURM_JOB_ID%s%s would be %d bytes long, more than the %d a run "
		 "id may have: give --rdzv-id",
		 step ? ".SLURM_STEP_ID" : "", again ? ".rSLURM_RESTART_COUNT" : "", len,
		 RDZV_RUN_ID_MAX - 1);
	return -EINVAL;
}

const char *slurm_step_id(const char *(*getenv_fn)(const char *name))
{
	const char *v = getenv_fn("SLURM_STEP_ID");

	return v != NULL ? v : getenv_fn("SLURM_STEPID");
}

int slurm_info_read(const char *(*getenv_fn)(const char *name), unsigned need,
		    struct slurm_info *info, char *err, size_t errlen)
{
	const char *v, *name;
	char why[300];
	bool in_step;
	int rc;

	memset(info, 0, sizeof(*info));
	info->nnodes = info->node_rank = -1;
	v = getenv_fn("SLURM_JOB_ID");
	if (v == NULL)
		v = getenv_fn("SLURM_JOBID");
	if (v == NULL) {
		/* Copied by hand, or left from another job: not an allocation, so
		 * each such ddprun would be a job of its own. */
		if (getenv_fn("SLURM_NNODES") != NULL)
			info->stray = "SLURM_NNODES";
		else if (getenv_fn("SLURM_NODEID") != NULL)
			info->stray = "SLURM_NODEID";
		return 0;
	}
	info->in_allocation = 1;
	snprintf(info->job_id, sizeof(info->job_id), "%s", v);
	switch (slurm_step(getenv_fn, why, sizeof(why))) {
	case SLURM_STEP_SRUN:
		in_step = true;
		break;
	case SLURM_STEP_STALE:
		snprintf(info->step_ignored, sizeof(info->step_ignored), "%s", why);
		/* fallthrough */
	default:
		in_step = false;
	}
	rc = make_run_id(getenv_fn, v, in_step ? slurm_step_id(getenv_fn) : NULL, info, err,
			 errlen);
	if (rc != 0 && (need & SLURM_NEED_RUN_ID))
		return rc;
	rc = 0;
	if (need & SLURM_NEED_NNODES)
		rc = read_int(getenv_fn,
			      getenv_fn("SLURM_NNODES") ? "SLURM_NNODES" : "SLURM_JOB_NUM_NODES", 1,
			      &info->nnodes, err, errlen);
	if (rc == 0 && (need & SLURM_NEED_NODE_RANK))
		rc = read_int(getenv_fn, "SLURM_NODEID", 0, &info->node_rank, err, errlen);
	if (rc != 0)
		return rc;
	if (info->nnodes > 0 && info->node_rank >= info->nnodes) {
		snprintf(err, errlen,
			 "SLURM_NODEID=%d is not below SLURM_NNODES=%d (--node-rank and --nnodes "
			 "override them)",
			 info->node_rank, info->nnodes);
		return -EINVAL;
	}
	if (info->nnodes > 1 && !in_step) {
		/* The batch script (or salloc's shell): nobody starts the other
		 * nodes' ddprun, whom node 0 would wait for until join_timeout. */
		snprintf(err, errlen,
			 "SLURM_NNODES=%d, but this is no srun step (%s), so no other node starts "
			 "ddprun: run it as srun ddprun ... (one per node), or give --nnodes 1 to "
			 "run on this node alone",
			 info->nnodes, why);
		return -EINVAL;
	}
	if (in_step && (rc = check_one_task_per_node(getenv_fn, err, errlen)) != 0)
		return rc;
	if (!(need & SLURM_NEED_MASTER))
		return 0;
	/* A step may run on fewer nodes than the job has (srun -N1): its own
	 * list comes first; a heterogeneous one's node 0 need not come first
	 * there. */
	if (in_step) {
		rc = slurm_het_first(getenv_fn, info->master, sizeof(info->master),
				     &info->master_var, err, errlen);
		if (rc <= 0)
			return rc;
	}
	name = "SLURM_STEP_NODELIST";
	v = in_step ? getenv_fn(name) : NULL;
	if (v == NULL)
		v = getenv_fn(name = "SLURM_JOB_NODELIST");
	if (v == NULL)
		v = getenv_fn(name = "SLURM_NODELIST");
	if (v != NULL) {
		rc = slurm_hostlist_first(v, info->master, sizeof(info->master));
		if (rc != 0) {
			snprintf(err, errlen,
				 "%s='%.200s' is not a valid hostlist (set %s instead)", name, v,
				 flag_of(name));
			info->master[0] = '\0';
			return -EINVAL;
		}
		info->master_var = name;
	}
	return 0;
}
