/* workenv: build a worker's environment (see workenv.h). */
#include "workenv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Variables ddprun sets; a value inherited from the parent is replaced. */
static const char *const owned[] = {
	"RANK",
	"LOCAL_RANK",
	"WORLD_SIZE",
	"LOCAL_WORLD_SIZE",
	"GROUP_RANK",
	"GROUP_WORLD_SIZE",
	"ROLE_RANK",
	"ROLE_WORLD_SIZE",
	"ROLE_NAME",
	"MASTER_ADDR",
	"MASTER_PORT",
	"TORCHELASTIC_RESTART_COUNT",
	"TORCHELASTIC_MAX_RESTARTS",
	"TORCHELASTIC_RUN_ID",
	"TORCHELASTIC_USE_AGENT_STORE",
	"TORCHELASTIC_ERROR_FILE",
	/* A nested ddprun's workers must name their segments after it. */
	"DDP_SHM_NONCE",
	/* A nested ddprun's workers report to it (hang.h). */
	"DDP_PROGRESS_FILE",
	"TORCHELASTIC_TIMER_FILE",
};

#define NOWNED (sizeof(owned) / sizeof(owned[0]))
/* Owned variables plus OMP_NUM_THREADS, TORCH_NCCL_ASYNC_ERROR_HANDLING and
 * PYTHONFAULTHANDLER. */
#define NSET (NOWNED + 3)

static bool env_is(const char *entry, const char *name)
{
	size_t n = strlen(name);

	return strncmp(entry, name, n) == 0 && entry[n] == '=';
}

static bool is_owned(const char *entry)
{
	size_t i;

	/* Cheap first-letter filter: most of the environment starts elsewhere. */
	if (entry[0] != 'R' && entry[0] != 'L' && entry[0] != 'W' && entry[0] != 'G' &&
	    entry[0] != 'M' && entry[0] != 'T' && entry[0] != 'D')
		return false;
	for (i = 0; i < NOWNED; i++)
		if (env_is(entry, owned[i]))
			return true;
	return false;
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
	bool has_omp = false, has_nccl = false, has_fault = false;
	int rank = j->rank_offset + local_rank;
	char **env;
	char *s;

	for (i = 0; parent_env[i] != NULL; i++) {
		nparent++;
		has_omp |= env_is(parent_env[i], "OMP_NUM_THREADS");
		has_nccl |= env_is(parent_env[i], "TORCH_NCCL_ASYNC_ERROR_HANDLING");
		has_fault |= env_is(parent_env[i], "PYTHONFAULTHANDLER");
	}
#define ADD(n, v)  (set[nset].name = (n), set[nset++].val = (v))
#define ADDI(n, v) (snprintf(num[nnum], sizeof(num[0]), "%d", (v)), ADD(n, num[nnum++]))
	ADDI("RANK", rank);
	ADDI("LOCAL_RANK", local_rank);
	ADDI("WORLD_SIZE", j->world_size);
	ADDI("LOCAL_WORLD_SIZE", j->local_world_size);
	ADDI("GROUP_RANK", j->group_rank);
	ADDI("GROUP_WORLD_SIZE", j->group_world_size);
	ADDI("ROLE_RANK", rank);
	ADDI("ROLE_WORLD_SIZE", j->world_size);
	ADD("ROLE_NAME", j->role);
	ADD("MASTER_ADDR", j->master_addr);
	ADDI("MASTER_PORT", j->master_port);
	ADDI("TORCHELASTIC_RESTART_COUNT", j->restart_count);
	ADDI("TORCHELASTIC_MAX_RESTARTS", j->max_restarts);
	ADD("TORCHELASTIC_RUN_ID", j->run_id);
	ADD("TORCHELASTIC_USE_AGENT_STORE", j->use_agent_store ? "True" : "False");
	ADD("TORCHELASTIC_ERROR_FILE", error_file);
	if (j->shm_nonce != NULL)
		ADD("DDP_SHM_NONCE", j->shm_nonce);
	/* torchrun: one thread per worker unless the user chose otherwise. */
	if (!has_omp && j->local_world_size > 1)
		ADD("OMP_NUM_THREADS", "1");
	if (!has_nccl)
		ADD("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
	if (j->progress_file != NULL)
		ADD("DDP_PROGRESS_FILE", j->progress_file);
	if (j->timer_file != NULL)
		ADD("TORCHELASTIC_TIMER_FILE", j->timer_file);
	/* Python workers print every thread's stack on SIGABRT (hang.h). */
	if (j->faulthandler && !has_fault)
		ADD("PYTHONFAULTHANDLER", "1");
#undef ADDI
#undef ADD
	for (i = 0; i < nset; i++)
		bytes += strlen(set[i].name) + strlen(set[i].val) + 2;
	env = malloc((nparent + nset + 1) * sizeof(char *) + bytes);
	if (env == NULL)
		return NULL;
	for (i = 0; i < nparent; i++)
		if (!is_owned(parent_env[i]))
			env[k++] = parent_env[i];
	s = (char *)(env + nparent + nset + 1);
	for (i = 0; i < nset; i++) {
		env[k++] = s;
		s += sprintf(s, "%s=%s", set[i].name, set[i].val) + 1;
	}
	env[k] = NULL;
	return env;
}
