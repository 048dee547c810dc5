/* workenv: each worker's environment, torchrun's contract (ddprun(1) ENVIRONMENT),
 * written once for both spawners: ddprun's agent (launcher/agent_worker.c) and
 * libddp's ddp_spawn (worker-runtime/src/spawn.c), hence here, the layer both use:
 * RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE,
 * ROLE_RANK, ROLE_WORLD_SIZE, ROLE_NAME, MASTER_ADDR, MASTER_PORT,
 * TORCHELASTIC_{RESTART_COUNT,MAX_RESTARTS,RUN_ID,USE_AGENT_STORE,ERROR_FILE};
 * OMP_NUM_THREADS=1 when unset and more than one local worker;
 * TORCH_NCCL_ASYNC_ERROR_HANDLING=1 when unset and NCCL_ASYNC_ERROR_HANDLING
 * (PyTorch 1.13's name) the same when unset; TORCHELASTIC_SIGNALS_TO_HANDLE
 * (torchrun 2.x); under --virtual-local-rank LOCAL_RANK=0 and
 * CUDA_VISIBLE_DEVICES narrowed to the worker's one GPU; DDP_SHM_NONCE (the
 * launcher's shmsweep.h; the segment names are workenv_shm_name's), DDP_PROGRESS_FILE and TORCHELASTIC_TIMER_FILE (its
 * hang.h), never inherited;
 * PYTHONFAULTHANDLER=1 when unset (hang.h); PYTHONUNBUFFERED=1 when unset (the
 * -u that ddprun gives a Python program, for the Python processes a wrapper
 * script starts too: their output reaches the console as it is printed,
 * through the pipe, as it would on a terminal). Everything else is inherited from ddprun's own
 * environment. */
#ifndef DDP_WORKENV_H
#define DDP_WORKENV_H

#include <stdbool.h>
#include <stddef.h>

/* Where this node stands in the job: what each attempt's rendezvous decides
 * (ddprun's coordinator, or a node alone; ddp_spawn's one node), and all that
 * changes from one attempt to the next. The launcher's agent keeps the
 * current one (launcher/agent.h); the rest of a worker's environment is
 * fixed for the whole job. */
struct workenv_world {
	int group_rank;	      /* GROUP_RANK: this node's rank */
	int group_world_size; /* GROUP_WORLD_SIZE: nodes */
	int rank_offset;      /* global rank of local rank 0 */
	int world_size;	      /* WORLD_SIZE: workers in the job */
	/* ROLE_RANK of local rank 0 and ROLE_WORLD_SIZE: torchrun's, counted
	 * over the nodes of this node's --role, in group rank order */
	int role_rank_offset;
	int role_world_size;
	const char *master_addr; /* MASTER_ADDR; NULL: no MASTER_ADDR nor MASTER_PORT */
	int master_port;	 /* MASTER_PORT */
	bool use_agent_store;	 /* TORCHELASTIC_USE_AGENT_STORE */
	int restart_count;	 /* TORCHELASTIC_RESTART_COUNT */
};

/* What is the same for every worker of one attempt: the world and what is
 * fixed for the job. */
struct workenv_job {
	struct workenv_world world;
	int local_world_size;
	const char *role;
	const char *run_id;
	int max_restarts;
	const char *shm_nonce; /* DDP_SHM_NONCE; NULL: unset */
	/* hang.h: DDP_PROGRESS_FILE, TORCHELASTIC_TIMER_FILE (NULL: unset),
	 * PYTHONFAULTHANDLER=1 unless the parent sets it. */
	const char *progress_file;
	const char *timer_file;
	bool faulthandler;
	const char *signals_to_handle; /* TORCHELASTIC_SIGNALS_TO_HANDLE; NULL: unset */
	bool virtual_local_rank;
};

/* The contract's variable names, spelled once: the builder below, libddp's
 * parser (worker-runtime/src/env.c) and every other reader use these. */
#define WORKENV_RANK				"RANK"
#define WORKENV_LOCAL_RANK			"LOCAL_RANK"
#define WORKENV_WORLD_SIZE			"WORLD_SIZE"
#define WORKENV_LOCAL_WORLD_SIZE		"LOCAL_WORLD_SIZE"
#define WORKENV_GROUP_RANK			"GROUP_RANK"
#define WORKENV_GROUP_WORLD_SIZE		"GROUP_WORLD_SIZE"
#define WORKENV_ROLE_RANK			"ROLE_RANK"
#define WORKENV_ROLE_WORLD_SIZE			"ROLE_WORLD_SIZE"
#define WORKENV_ROLE_NAME			"ROLE_NAME"
#define WORKENV_MASTER_ADDR			"MASTER_ADDR"
#define WORKENV_MASTER_PORT			"MASTER_PORT"
#define WORKENV_TORCHELASTIC_RESTART_COUNT	"TORCHELASTIC_RESTART_COUNT"
#define WORKENV_TORCHELASTIC_MAX_RESTARTS	"TORCHELASTIC_MAX_RESTARTS"
#define WORKENV_TORCHELASTIC_RUN_ID		"TORCHELASTIC_RUN_ID"
#define WORKENV_TORCHELASTIC_USE_AGENT_STORE	"TORCHELASTIC_USE_AGENT_STORE"
#define WORKENV_TORCHELASTIC_ERROR_FILE		"TORCHELASTIC_ERROR_FILE"
#define WORKENV_DDP_SHM_NONCE			"DDP_SHM_NONCE"
#define WORKENV_DDP_PROGRESS_FILE		"DDP_PROGRESS_FILE"
#define WORKENV_TORCHELASTIC_TIMER_FILE		"TORCHELASTIC_TIMER_FILE"
#define WORKENV_TORCHELASTIC_SIGNALS_TO_HANDLE	"TORCHELASTIC_SIGNALS_TO_HANDLE"
#define WORKENV_OMP_NUM_THREADS			"OMP_NUM_THREADS"
#define WORKENV_TORCH_NCCL_ASYNC_ERROR_HANDLING "TORCH_NCCL_ASYNC_ERROR_HANDLING"
#define WORKENV_NCCL_ASYNC_ERROR_HANDLING	"NCCL_ASYNC_ERROR_HANDLING"
#define WORKENV_PYTHONFAULTHANDLER		"PYTHONFAULTHANDLER"
#define WORKENV_PYTHONUNBUFFERED		"PYTHONUNBUFFERED"
#define WORKENV_CUDA_VISIBLE_DEVICES		"CUDA_VISIBLE_DEVICES"

#define WORKENV_DEVICE_MAX 64

/* --virtual-local-rank: the GPU of local_rank, entry local_rank of cvd
 * (CUDA_VISIBLE_DEVICES, spaces trimmed) or local_rank itself when cvd is
 * NULL, as torchrun 2.x does. 0 or -ERANGE (cvd has fewer entries). */
int workenv_device(const char *cvd, int local_rank, char *out, size_t len);
/* Before the start: every one of nproc workers has a GPU. 0 or -ERANGE
 * with one line in err. */
int workenv_check(const char *cvd, bool virtual_local_rank, int nproc, char *err, size_t errlen);

/* The environment of local rank lr: one malloc'd block (pointers then
 * strings), released with free(). error_file NULL: no
 * TORCHELASTIC_ERROR_FILE. NULL on ENOMEM. */
char **workenv_build(char *const *parent_env, const struct workenv_job *j, int local_rank,
		     const char *error_file);

/* libddp's shared-memory segments on a node are named
 * "/" WORKENV_SHM_PREFIX "<run id>-r<restart>-p<port>-n<node>-u<uid>", then under
 * ddprun WORKENV_SHM_NONCE_TAG "<DDP_SHM_NONCE>", the nonce last: the agent that
 * gave the nonce removes exactly those its workers left (launcher/shmsweep.c,
 * which matches by these two names). The run id's bytes outside [A-Za-z0-9._-]
 * become '_' and at most 100 are kept. */
#define WORKENV_SHM_PREFIX    "ddp-"
#define WORKENV_SHM_NONCE_TAG "-a"
void workenv_shm_name(char *buf, size_t len, const char *run_id, int restart, int port, int node,
		      unsigned uid, const char *nonce);

/* The cause (error file: message.extraInfo.ddp_caused_by) of a libddp call
 * that timed out waiting for a rank of its node: that rank and its pid. The
 * launcher's failure report reads it back (report.c): a rank the others
 * waited for that has no failure of its own was still running. */
#define WORKENV_CAUSE_LATE_FMT "rank %d (pid %d) did not arrive within the timeout"

#endif
