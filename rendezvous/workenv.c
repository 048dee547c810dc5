/* workenv: build a worker's environment (see workenv.h). */
#include "workenv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Variables ddprun sets; a value inherited from the parent is replaced. */
static const char *const owned[] = {
	WORKENV_RANK,
	WORKENV_LOCAL_RANK,
	WORKENV_WORLD_SIZE,
	WORKENV_LOCAL_WORLD_SIZE,
	WORKENV_GROUP_RANK,
	WORKENV_GROUP_WORLD_SIZE,
	WORKENV_ROLE_RANK,
	WORKENV_ROLE_WORLD_SIZE,
	WORKENV_ROLE_NAME,
	WORKENV_MASTER_ADDR,
	WORKENV_MASTER_PORT,
	WORKENV_TORCHELASTIC_RESTART_COUNT,
	WORKENV_TORCHELASTIC_MAX_RESTARTS,
	WORKENV_TORCHELASTIC_RUN_ID,
	WORKENV_TORCHELASTIC_USE_AGENT_STORE,
	WORKENV_TORCHELASTIC_ERROR_FILE,
	/* A nested ddprun's workers must name their segments after it. */
	WORKENV_DDP_SHM_NONCE,
	/* A nested ddprun's workers report to it (hang.h). */
	WORKENV_DDP_PROGRESS_FILE,
	WORKENV_TORCHELASTIC_TIMER_FILE,
	/* torchrun 2.x's agent puts its --signals-to-handle here. */
	WORKENV_TORCHELASTIC_SIGNALS_TO_HANDLE,
};

#define NOWNED (sizeof(owned) / sizeof(owned[0]))
/* Owned variables plus OMP_NUM_THREADS, TORCH_NCCL_ASYNC_ERROR_HANDLING,
 * NCCL_ASYNC_ERROR_HANDLING, PYTHONFAULTHANDLER, PYTHONUNBUFFERED and
 * CUDA_VISIBLE_DEVICES. */
#define NSET (NOWNED + 6)

static bool env_is(const char *entry, const char *name)
{
	size_t n = strlen(name);

	return strncmp(entry, name, n) == 0 && entry[n] == '=';
}

static bool is_owned(const char *entry, bool virtual_cvd)
{
	size_t i;

	/* Cheap first-letter filter: most of the environment starts elsewhere. */
	if (entry[0] != 'R' && entry[0] != 'L' && entry[0] != 'W' && entry[0] != 'G' &&
	    entry[0] != 'M' && entry[0] != 'T' && entry[0] != 'D' && entry[0] != 'C')
		return false;
	for (i = 0; i < NOWNED; i++)
		if (env_is(entry, owned[i]))
			return true;
	return virtual_cvd && env_is(entry, WORKENV_CUDA_VISIBLE_DEVICES);
}

struct kv {
	const char *name;
	const char *val;
};

char **workenv_build(char *const *parent_env, const struct workenv_job *j, int local_rank,
		     const char *error_file)
{
	char num[NSET][16];
	struct kv set[NSET];
	size_t nparent = 0, nset = 0, nnum = 0, bytes = 0, i, k = 0;
	bool has_omp = false, has_nccl = false, has_old_nccl = false, has_fault = false;
	bool has_unbuf = false;
	const char *nccl = "1", *cvd = NULL;
	char device[WORKENV_DEVICE_MAX];
	int rank = j->world.rank_offset + local_rank;
	char **env;
	char *s;

	for (i = 0; parent_env[i] != NULL; i++) {
		nparent++;
		has_omp |= env_is(parent_env[i], WORKENV_OMP_NUM_THREADS);
		if (env_is(parent_env[i], WORKENV_TORCH_NCCL_ASYNC_ERROR_HANDLING)) {
			has_nccl = true;
			nccl = parent_env[i] + strlen("TORCH_NCCL_ASYNC_ERROR_HANDLING=");
		}
		has_old_nccl |= env_is(parent_env[i], WORKENV_NCCL_ASYNC_ERROR_HANDLING);
		if (env_is(parent_env[i], WORKENV_CUDA_VISIBLE_DEVICES))
			cvd = parent_env[i] + strlen("CUDA_VISIBLE_DEVICES=");
		has_fault |= env_is(parent_env[i], WORKENV_PYTHONFAULTHANDLER);
		has_unbuf |= env_is(parent_env[i], WORKENV_PYTHONUNBUFFERED);
	}
#define ADD(n, v)  (set[nset].name = (n), set[nset++].val = (v))
#define ADDI(n, v) (snprintf(num[nnum], sizeof(num[0]), "%d", (v)), ADD(n, num[nnum++]))
	ADDI(WORKENV_RANK, rank);
	/* --virtual-local-rank: each worker sees its one GPU as device 0. */
	if (j->virtual_local_rank) {
		if (workenv_device(cvd, local_rank, device, sizeof(device)) != 0)
			return NULL; /* checked before the start (workenv_check) */
		ADD(WORKENV_CUDA_VISIBLE_DEVICES, device);
	}
	ADDI(WORKENV_LOCAL_RANK, j->virtual_local_rank ? 0 : local_rank);
	ADDI(WORKENV_WORLD_SIZE, j->world.world_size);
	ADDI(WORKENV_LOCAL_WORLD_SIZE, j->local_world_size);
	ADDI(WORKENV_GROUP_RANK, j->world.group_rank);
	ADDI(WORKENV_GROUP_WORLD_SIZE, j->world.group_world_size);
	ADDI(WORKENV_ROLE_RANK, j->world.role_rank_offset + local_rank);
	ADDI(WORKENV_ROLE_WORLD_SIZE, j->world.role_world_size);
	ADD(WORKENV_ROLE_NAME, j->role);
	if (j->world.master_addr != NULL) {
		ADD(WORKENV_MASTER_ADDR, j->world.master_addr);
		ADDI(WORKENV_MASTER_PORT, j->world.master_port);
	}
	ADDI(WORKENV_TORCHELASTIC_RESTART_COUNT, j->world.restart_count);
	ADDI(WORKENV_TORCHELASTIC_MAX_RESTARTS, j->max_restarts);
	ADD(WORKENV_TORCHELASTIC_RUN_ID, j->run_id);
	ADD(WORKENV_TORCHELASTIC_USE_AGENT_STORE, j->world.use_agent_store ? "True" : "False");
	if (error_file != NULL)
		ADD(WORKENV_TORCHELASTIC_ERROR_FILE, error_file);
	if (j->shm_nonce != NULL)
		ADD(WORKENV_DDP_SHM_NONCE, j->shm_nonce);
	/* torchrun: one thread per worker unless the user chose otherwise. */
	if (!has_omp && j->local_world_size > 1)
		ADD(WORKENV_OMP_NUM_THREADS, "1");
	if (!has_nccl)
		ADD(WORKENV_TORCH_NCCL_ASYNC_ERROR_HANDLING, "1");
	/* PyTorch 1.13 reads only the old name; the same value. */
	if (!has_old_nccl)
		ADD(WORKENV_NCCL_ASYNC_ERROR_HANDLING, nccl);
	if (j->signals_to_handle != NULL)
		ADD(WORKENV_TORCHELASTIC_SIGNALS_TO_HANDLE, j->signals_to_handle);
	if (j->progress_file != NULL)
		ADD(WORKENV_DDP_PROGRESS_FILE, j->progress_file);
	if (j->timer_file != NULL)
		ADD(WORKENV_TORCHELASTIC_TIMER_FILE, j->timer_file);
	/* Python workers print every thread's stack on SIGABRT (hang.h). */
	if (j->faulthandler && !has_fault)
		ADD(WORKENV_PYTHONFAULTHANDLER, "1");
	/* Live output from Python that ddprun does not start itself (a
	 * wrapper script's): through a pipe it would come 8 KiB at a time. */
	if (!has_unbuf)
		ADD(WORKENV_PYTHONUNBUFFERED, "1");
#undef ADDI
#undef ADD
	for (i = 0; i < nset; i++)
		bytes += strlen(set[i].name) + strlen(set[i].val) + 2;
	env = malloc((nparent + nset + 1) * sizeof(char *) + bytes);
	if (env == NULL)
		return NULL;
	for (i = 0; i < nparent; i++)
		if (!is_owned(parent_env[i], j->virtual_local_rank))
			env[k++] = parent_env[i];
	s = (char *)(env + nparent + nset + 1);
	for (i = 0; i < nset; i++) {
		env[k++] = s;
		s += sprintf(s, "%s=%s", set[i].name, set[i].val) + 1;
	}
	env[k] = NULL;
	return env;
}

int workenv_device(const char *cvd, int local_rank, char *out, size_t len)
{
	const char *p = cvd;
	size_t n;
	int i;

	if (cvd == NULL) { /* no restriction: GPU local_rank */
		snprintf(out, len, "%d", local_rank);
		return 0;
	}
	for (i = 0; i < local_rank; i++) {
		p = strchr(p, ',');
		if (p == NULL)
			return -ERANGE;
		p++;
	}
	while (*p == ' ')
		p++;
	n = strcspn(p, ",");
	while (n > 0 && p[n - 1] == ' ')
		n--;
	if (n >= len)
		return -ERANGE;
	memcpy(out, p, n);
	out[n] = '\0';
	return 0;
}

int workenv_check(const char *cvd, bool virtual_local_rank, int nproc, char *err, size_t errlen)
{
	char dev[WORKENV_DEVICE_MAX];

	if (!virtual_local_rank || nproc < 1 ||
	    workenv_device(cvd, nproc - 1, dev, sizeof(dev)) == 0)
		return 0;
	snprintf(err, errlen,
		 "--virtual-local-rank: local rank %d has no GPU in CUDA_VISIBLE_DEVICES=%.200s",
		 nproc - 1, cvd);
	return -ERANGE;
}

void workenv_shm_name(char *buf, size_t len, const char *run_id, int restart, int port, int node,
		      unsigned uid, const char *nonce)
{
	char id[101];
	size_t i;

	for (i = 0; i < sizeof(id) - 1 && run_id[i]; i++) {
		char c = run_id[i];
		int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			 (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
		id[i] = ok ? c : '_';
	}
	id[i] = '\0';
	snprintf(buf, len, "/" WORKENV_SHM_PREFIX "%s-r%d-p%d-n%d-u%u%s%s", id, restart, port, node,
		 uid, nonce[0] ? WORKENV_SHM_NONCE_TAG : "", nonce);
}
