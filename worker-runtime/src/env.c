/* env: the launcher environment (torchrun's names) and libddp's DDP_* knobs,
 * parsed strictly and checked for consistency. Missing values get the
 * defaults a single-node launcher would have set; contradictions are errors. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "ddp_internal.h"
#include "util.h"
#include "workenv.h"

static const char *get(ddpi_getenv_fn fn, void *arg, const char *name)
{
	const char *v = fn(name, arg);
	return v && *v ? v : NULL;
}

/* An integer variable in [min, max]; *present says whether it was set. */
static int get_int(ddpi_getenv_fn fn, void *arg, const char *name, int min, int max, int *out,
		   int *present)
{
	const char *v = get(fn, arg, name);
	int rc;

	*present = v != NULL;
	if (!v)
		return 0;
	rc = util_parse_int(v, min, max, out);
	if (rc < 0)
		return ddpi_err(DDP_EENV, "%s='%s' is not an integer in [%d, %d]", name, v, min,
				max);
	return 0;
}

int ddpi_parse_backend(const char *s, enum ddp_backend *out)
{
	if (!strcmp(s, "auto"))
		*out = DDP_BACKEND_AUTO;
	else if (!strcmp(s, "cpu"))
		*out = DDP_BACKEND_CPU;
	else if (!strcmp(s, "nccl"))
		*out = DDP_BACKEND_NCCL;
	else
		return -EINVAL;
	return 0;
}

static int parse_identity(ddpi_getenv_fn fn, void *arg, struct ddp_env *e)
{
	int has_rank, has_world, has_lrank, has_lworld, has_node, has_nnodes, rc;

	if ((rc = get_int(fn, arg, WORKENV_RANK, 0, INT_MAX, &e->rank, &has_rank)) ||
	    (rc = get_int(fn, arg, WORKENV_WORLD_SIZE, 1, INT_MAX, &e->world, &has_world)) ||
	    (rc = get_int(fn, arg, WORKENV_LOCAL_RANK, 0, INT_MAX, &e->local_rank, &has_lrank)) ||
	    (rc = get_int(fn, arg, WORKENV_LOCAL_WORLD_SIZE, 1, INT_MAX, &e->local_world,
			  &has_lworld)) ||
	    (rc = get_int(fn, arg, WORKENV_GROUP_RANK, 0, INT_MAX, &e->node, &has_node)) ||
	    (rc = get_int(fn, arg, WORKENV_GROUP_WORLD_SIZE, 1, INT_MAX, &e->nnodes, &has_nnodes)))
		return rc;
	e->under_launcher =
		has_rank || has_world || has_lrank || get(fn, arg, WORKENV_TORCHELASTIC_RUN_ID);
	if (!has_rank && !has_world) {
		if (has_lworld || has_nnodes)
			return ddpi_err(DDP_EENV, "LOCAL_WORLD_SIZE/GROUP_WORLD_SIZE set without "
						  "RANK and WORLD_SIZE");
		/* A world of one: the program was started by hand. */
		e->rank = 0;
		e->world = 1;
		has_rank = has_world = 1;
	}
	if (!has_rank || !has_world)
		return ddpi_err(DDP_EENV, "%s is set but %s is not",
				has_rank ? WORKENV_RANK : WORKENV_WORLD_SIZE,
				has_rank ? WORKENV_WORLD_SIZE : WORKENV_RANK);
	if (e->rank >= e->world)
		return ddpi_err(DDP_EENV, "RANK=%d is not below WORLD_SIZE=%d", e->rank, e->world);

	if (!has_lworld) {
		if (has_nnodes) {
			if (e->world % e->nnodes)
				return ddpi_err(
					DDP_EENV,
					"WORLD_SIZE=%d is not a multiple of GROUP_WORLD_SIZE=%d "
					"(set LOCAL_WORLD_SIZE)",
					e->world, e->nnodes);
			e->local_world = e->world / e->nnodes;
		} else {
			e->local_world = e->world;
		}
	}
	if (e->local_world > e->world)
		return ddpi_err(DDP_EENV, "LOCAL_WORLD_SIZE=%d is above WORLD_SIZE=%d",
				e->local_world, e->world);
	if (!has_lrank)
		e->local_rank = e->rank % e->local_world;
	if (e->local_rank >= e->local_world)
		return ddpi_err(DDP_EENV, "LOCAL_RANK=%d is not below LOCAL_WORLD_SIZE=%d",
				e->local_rank, e->local_world);
	if (e->local_rank > e->rank)
		return ddpi_err(DDP_EENV, "LOCAL_RANK=%d is above RANK=%d", e->local_rank, e->rank);
	if (!has_nnodes) {
		if (e->world % e->local_world)
			return ddpi_err(DDP_EENV,
					"WORLD_SIZE=%d is not a multiple of LOCAL_WORLD_SIZE=%d "
					"(set GROUP_WORLD_SIZE for nodes of different sizes)",
					e->world, e->local_world);
		e->nnodes = e->world / e->local_world;
	}
	if (e->nnodes == 1 && e->local_world != e->world)
		return ddpi_err(
			DDP_EENV,
			"one node (GROUP_WORLD_SIZE=1) but LOCAL_WORLD_SIZE=%d differs from "
			"WORLD_SIZE=%d",
			e->local_world, e->world);
	if (!has_node) {
		/* torchrun numbers ranks node by node, so equal nodes give the node. */
		if ((int64_t)e->nnodes * e->local_world != e->world)
			return ddpi_err(DDP_EENV,
					"GROUP_RANK is not set (nodes of different sizes)");
		e->node = (e->rank - e->local_rank) / e->local_world;
	}
	if (e->node >= e->nnodes)
		return ddpi_err(DDP_EENV, "GROUP_RANK=%d is not below GROUP_WORLD_SIZE=%d", e->node,
				e->nnodes);
	if (e->nnodes > e->world)
		return ddpi_err(DDP_EENV, "GROUP_WORLD_SIZE=%d is above WORLD_SIZE=%d", e->nnodes,
				e->world);
	return 0;
}

/* MASTER_ADDR/MASTER_PORT name the launcher's store; every rank joins there
 * (join.c) unless DDP_STORE=0 keeps a single-node job in shared memory. */
static int parse_master(ddpi_getenv_fn fn, void *arg, struct ddp_env *e)
{
	const char *addr = get(fn, arg, WORKENV_MASTER_ADDR), *v;
	int has_port, store = 1, rc;

	if ((rc = get_int(fn, arg, WORKENV_MASTER_PORT, 1, UTIL_PORT_MAX, &e->master_port,
			  &has_port)))
		return rc;
	if (!has_port)
		e->master_port = 0;
	if (addr) {
		if (strlen(addr) >= sizeof(e->master_addr))
			return ddpi_err(DDP_EENV, "MASTER_ADDR is too long");
		snprintf(e->master_addr, sizeof(e->master_addr), "%s", addr);
	}
	if ((v = get(fn, arg, "DDP_STORE")) && util_parse_int(v, 0, 1, &store) < 0)
		return ddpi_err(DDP_EENV, "DDP_STORE='%s' is not 0 or 1", v);
	if (!store) {
		if (e->nnodes > 1)
			return ddpi_err(DDP_EENV,
					"DDP_STORE=0 but GROUP_WORLD_SIZE=%d: nodes can only meet "
					"through the store",
					e->nnodes);
		e->use_store = 0;
		return 0;
	}
	if (e->world > 1 && (!addr || !has_port))
		return ddpi_err(DDP_EENV,
				"WORLD_SIZE=%d but %s is not set (DDP_STORE=0 runs one node "
				"without a store)",
				e->world, !addr ? WORKENV_MASTER_ADDR : WORKENV_MASTER_PORT);
	e->use_store = addr && has_port && e->under_launcher;
	return 0;
}

/* DDP_SHM_NONCE: ddprun's token, the end of the segment's name, by which
 * ddprun knows the segments of its own workers (launcher/shmsweep.h). */
static int parse_nonce(ddpi_getenv_fn fn, void *arg, struct ddp_env *e)
{
	const char *v = get(fn, arg, WORKENV_DDP_SHM_NONCE);
	size_t i, n;

	e->shm_nonce[0] = '\0';
	if (!v)
		return 0;
	n = strlen(v);
	for (i = 0; i < n; i++)
		if (!((v[i] >= '0' && v[i] <= '9') || (v[i] >= 'a' && v[i] <= 'z') ||
		      (v[i] >= 'A' && v[i] <= 'Z')))
			break;
	if (n >= sizeof(e->shm_nonce) || i < n)
		return ddpi_err(DDP_EENV, "DDP_SHM_NONCE='%.40s' is not 1 to %zu letters or digits",
				v, sizeof(e->shm_nonce) - 1);
	memcpy(e->shm_nonce, v, n + 1);
	return 0;
}

/* DDP_TCP_CONGESTION: auto (unset), system or an algorithm's name, checked
 * for form here; whether the kernel has it, when the ring opens (tcp_setup.c). */
static int parse_tcp_cc(ddpi_getenv_fn fn, void *arg, struct ddp_env *e)
{
	const char *v = get(fn, arg, "DDP_TCP_CONGESTION");
	size_t n = v ? strlen(v) : 0;
	int ok = n < sizeof(e->tcp_cc);

	for (size_t i = 0; ok && i < n; i++)
		ok = (v[i] >= 'a' && v[i] <= 'z') || (v[i] >= '0' && v[i] <= '9') || v[i] == '_' ||
		     v[i] == '-';
	if (!ok)
		return ddpi_err(DDP_EENV,
				"DDP_TCP_CONGESTION='%s' is not auto, system or an algorithm's "
				"name (up to %zu of a-z, 0-9, _ and -, like reno or cubic)",
				v, sizeof(e->tcp_cc) - 1);
	snprintf(e->tcp_cc, sizeof(e->tcp_cc), "%s", v ? v : "auto");
	return 0;
}

/* DDP_SOCKET_IFNAME: an interface's name (IFNAMSIZ), whose address the node
 * leader listens on and announces for the TCP ring (tcp_setup.c), as gloo's
 * GLOO_SOCKET_IFNAME; whether it is up, when the ring opens. */
static int parse_ifname(ddpi_getenv_fn fn, void *arg, struct ddp_env *e)
{
	const char *v = get(fn, arg, "DDP_SOCKET_IFNAME");
	size_t n = v ? strlen(v) : 0;

	e->socket_ifname[0] = '\0';
	if (v == NULL)
		return 0;
	if (n == 0 || n >= sizeof(e->socket_ifname) || strpbrk(v, "/ \t:") != NULL)
		return ddpi_err(DDP_EENV,
				"DDP_SOCKET_IFNAME='%s' is not an interface's name (1 to %zu "
				"characters, no '/', ':' or space)",
				v, sizeof(e->socket_ifname) - 1);
	memcpy(e->socket_ifname, v, n + 1);
	return 0;
}

/* The shared-memory and process knobs that shm.c and init.c act on; read
 * here so a malformed value fails ddp_init like every other DDP_*. */
static int parse_shm_knobs(ddpi_getenv_fn fn, void *arg, struct ddp_env *e)
{
	const char *v;
	int kb = DDPI_SHM_CHUNK_KB_DEFAULT;

	e->pdeathsig = 1;
	if ((v = get(fn, arg, "DDP_PDEATHSIG")) && util_parse_int(v, 0, 1, &e->pdeathsig) < 0)
		return ddpi_err(DDP_EENV, "DDP_PDEATHSIG='%s' is not 0 or 1", v);
	e->shm_direct = 1;
	if ((v = get(fn, arg, "DDP_SHM_DIRECT")) && util_parse_int(v, 0, 1, &e->shm_direct) < 0)
		return ddpi_err(DDP_EENV, "DDP_SHM_DIRECT='%s' is not 0 or 1", v);
	if ((v = get(fn, arg, "DDP_SHM_CHUNK_KB")) &&
	    util_parse_int(v, DDPI_SHM_CHUNK_KB_MIN, DDPI_SHM_CHUNK_KB_MAX, &kb) < 0)
		return ddpi_err(DDP_EENV,
				"DDP_SHM_CHUNK_KB='%s' is not a number of KiB in [%d, %d]", v,
				DDPI_SHM_CHUNK_KB_MIN, DDPI_SHM_CHUNK_KB_MAX);
	e->shm_slot_bytes = (size_t)kb * 1024;
	return 0;
}

static int parse_ddp_knobs(ddpi_getenv_fn fn, void *arg, struct ddp_env *e)
{
	const char *v;
	int present, rc;

	if ((v = get(fn, arg, WORKENV_TORCHELASTIC_RUN_ID))) {
		if (strlen(v) >= sizeof(e->run_id))
			return ddpi_err(DDP_EENV, "TORCHELASTIC_RUN_ID is too long (max %zu)",
					sizeof(e->run_id) - 1);
		snprintf(e->run_id, sizeof(e->run_id), "%s", v);
	} else {
		snprintf(e->run_id, sizeof(e->run_id), "none");
	}
	if ((rc = get_int(fn, arg, WORKENV_TORCHELASTIC_RESTART_COUNT, 0, INT_MAX, &e->restart,
			  &present)))
		return rc;
	if (!present)
		e->restart = 0;

	e->backend = DDP_BACKEND_AUTO;
	if ((v = get(fn, arg, "DDP_BACKEND")) && ddpi_parse_backend(v, &e->backend) < 0)
		return ddpi_err(DDP_EENV, "DDP_BACKEND='%s' is not auto, cpu or nccl", v);

	e->print_ranks[0] = '\0';
	if ((v = get(fn, arg, "DDP_PRINT_RANKS"))) {
		int match;
		if (strlen(v) >= sizeof(e->print_ranks) ||
		    ddpi_print_spec_match(v, e->rank, &match) < 0)
			return ddpi_err(
				DDP_EENV,
				"DDP_PRINT_RANKS='%s' is not all, none or a list like 0,2-3", v);
		snprintf(e->print_ranks, sizeof(e->print_ranks), "%s", v);
	}

	e->timeout_ms = DDP_DEFAULT_TIMEOUT_MS;
	if ((v = get(fn, arg, "DDP_TIMEOUT"))) {
		int64_t ms;
		if (util_parse_seconds_ms(v, &ms) < 0 || ms <= 0)
			return ddpi_err(DDP_EENV,
					"DDP_TIMEOUT='%s' is not a number of seconds above 0, at "
					"most %d",
					v, UTIL_SECONDS_MAX);
		e->timeout_ms = ms;
	}
	e->quiet = 0;
	if ((v = get(fn, arg, "DDP_QUIET")) && util_parse_int(v, 0, 1, &e->quiet) < 0)
		return ddpi_err(DDP_EENV, "DDP_QUIET='%s' is not 0 or 1", v);
	e->async = 1;
	if ((v = get(fn, arg, "DDP_ASYNC")) && util_parse_int(v, 0, 1, &e->async) < 0)
		return ddpi_err(DDP_EENV, "DDP_ASYNC='%s' is not 0 or 1", v);
	e->shm_cma = -1;
	if ((v = get(fn, arg, "DDP_SHM_CMA")) && strcmp(v, "auto") &&
	    util_parse_int(v, 0, 1, &e->shm_cma) < 0)
		return ddpi_err(DDP_EENV, "DDP_SHM_CMA='%s' is not 0, 1 or auto", v);
	if ((rc = parse_tcp_cc(fn, arg, e)) || (rc = parse_ifname(fn, arg, e)) ||
	    (rc = parse_shm_knobs(fn, arg, e)))
		return rc;
	return parse_nonce(fn, arg, e);
}

int ddpi_env_parse(ddpi_getenv_fn fn, void *arg, struct ddp_env *e)
{
	int rc;

	memset(e, 0, sizeof(*e));
	if ((rc = parse_identity(fn, arg, e)) || (rc = parse_master(fn, arg, e)) ||
	    (rc = parse_ddp_knobs(fn, arg, e)))
		return rc;
	return 0;
}
