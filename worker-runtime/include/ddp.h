/* libddp: the worker runtime for distributed data-parallel C and CUDA programs.
 *
 * A program started by ddprun (or torchrun, or ddp_spawn) calls ddp_init() and
 * gets its rank, a bound device, quiet non-zero ranks, collectives (cpu:
 * shared memory inside a node and TCP between nodes; GPU: NCCL), DDP-style
 * gradient buckets and a DistributedSampler that draws the same indices as
 * PyTorch's.
 *
 * Conventions:
 *   - Every function that can fail returns 0 (or a documented non-negative
 *     value) on success and a negative error code on failure: a negative errno
 *     (-EINVAL, -ETIMEDOUT, -ENOMEM, ...) or one of the DDP_E* codes below.
 *     ddp_strerror() names any code; ddp_errmsg() holds the detailed message of
 *     the last failure in the calling thread (which rank, which parameter, ...).
 *   - Handles are opaque and owned by the caller: what ddp_*_create/init
 *     returns is released with the matching destroy/finalize call.
 *   - Every blocking call has a deadline (DDP_TIMEOUT, default 600 s) and fails
 *     with -ETIMEDOUT instead of hanging. After a collective fails, the context
 *     is broken: every later collective fails with DDP_EBROKEN at once.
 *     The failure itself (DDP_EPEER, -ETIMEDOUT, ...) is returned once, by the
 *     call that failed or, for a gradient bucket reduced in the background,
 *     by the next collective or reducer call; every later one returns
 *     DDP_EBROKEN, its ddp_errmsg() naming the original failure ("barrier:
 *     broken by an earlier failure: ... rank 1 (pid 4711) exited").
 *   - Collectives are issued by one thread at a time, in the same order on
 *     every rank (like MPI and torch.distributed).
 *   - A context belongs to the process that ran ddp_init. In a child of fork()
 *     (torch.distributed forbids a process group there too) every call given
 *     the parent's context fails with -EINVAL, "...: the context is used in a
 *     forked child (pid X) of the process that ran ddp_init (pid Y)":
 *     collectives, ddp_alloc/ddp_free, reducers, ddp_set_timeout, and
 *     ddp_finalize, which then tears nothing down (the node's segment, the
 *     sockets and the peers stay the parent's). What only reads the parent's
 *     identity still works there: the getters, ddp_print_enabled,
 *     ddp_print_force, ddp_fatal, ddp_sampler_init_ctx. ddp_init in such a
 *     child fails with -EBUSY; a child that execs starts afresh.
 *   - Buffers live in the memory of the context's device: host memory for the
 *     cpu backend; GPU memory for nccl (host buffers are staged through the GPU).
 */
#ifndef DDP_H
#define DDP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define DDP_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define DDP_NORETURN	 __attribute__((noreturn))
#else
#define DDP_PRINTF(f, a)
#define DDP_NORETURN
#endif

/* ---- error codes ------------------------------------------------------------- */

/* libddp's own codes, below every errno value. */
enum {
	DDP_EBROKEN = -4001,   /* an earlier collective failed; the context is unusable */
	DDP_ENOGPU = -4002,    /* nccl backend requested but no GPU is visible */
	DDP_ENOTBUILT = -4003, /* feature not compiled in (nccl without CUDA=1) */
	DDP_ENCCL = -4004,     /* NCCL reported an error */
	DDP_ECUDA = -4005,     /* the CUDA runtime reported an error */
	DDP_ENOTREADY = -4006, /* ddp_reducer_finish: a parameter was never marked ready */
	/* Another rank's failure ended this call: that rank exited, closed its
	 * connection, or gave up on the call (its timeout, an error of its own);
	 * ddp_errmsg() names it and its reason. Not a sign that it is gone. */
	DDP_EPEER = -4007,
	DDP_ECHILD = -4008, /* ddp_spawn: a child process failed */
	DDP_EENV = -4009    /* inconsistent launcher environment (RANK, WORLD_SIZE, ...) */
};

/* Text for any code returned by libddp (negative errno or DDP_E*). Static. */
const char *ddp_strerror(int err);

/* The detailed message of the last failure in this thread ("" if none), e.g.
 * "all_reduce: rank 3 (pid 1234) exited". Valid until the next libddp call. */
const char *ddp_errmsg(void);

/* ---- types -------------------------------------------------------------------- */

struct ddp_ctx;

enum ddp_dtype {
	DDP_FLOAT32,
	DDP_FLOAT64,
	DDP_FLOAT16,  /* IEEE 754 binary16 (cpu: sums accumulate in float32) */
	DDP_BFLOAT16, /* bfloat16 (cpu: sums accumulate in float32) */
	DDP_INT32,
	DDP_INT64
};

enum ddp_op {
	DDP_SUM,
	DDP_AVG, /* sum divided by the world size (integers: truncated) */
	DDP_MIN, /* NaN propagates for floating types */
	DDP_MAX
};

enum ddp_backend {
	DDP_BACKEND_AUTO, /* nccl if built with CUDA and a GPU is visible, else cpu */
	DDP_BACKEND_CPU,  /* shared memory inside a node, TCP between nodes */
	DDP_BACKEND_NCCL  /* NCCL on the GPU local_rank % visible devices */
};

/* Size in bytes of one element (0 for an invalid dtype). */
size_t ddp_dtype_size(enum ddp_dtype dt);
const char *ddp_backend_name(enum ddp_backend b);

/* ---- init ------------------------------------------------------------------------ */

/* A field set here overrides its environment variable, which ddp_init then
 * does not read at all: a malformed value of it is no error (one it reads
 * is: DDP_EENV). */
struct ddp_options {
	/* DDP_BACKEND_AUTO: take $DDP_BACKEND (auto|cpu|nccl), else auto. Any other
	 * value forces that backend whatever the environment says. */
	enum ddp_backend backend;
	/* Which ranks keep stdout: "all", "none" or a list like "0" or "0,2-3".
	 * NULL: $DDP_PRINT_RANKS, else "0". */
	const char *print_ranks;
	/* Default deadline of every blocking call in ms; 0: $DDP_TIMEOUT (seconds),
	 * else 600 s. Above 10^12 ms (DDP_TIMEOUT's limit, 10^9 s): that limit, so
	 * INT64_MAX serves as "forever". Negative: ddp_init fails with -EINVAL
	 * (unlike ddp_spawn_join, where it means forever). */
	int64_t timeout_ms;
	/* 1: do not print the one line on rank 0 saying which backend is used
	 * (also $DDP_QUIET=1). */
	int quiet;
};

/* Defaults: everything from the environment. */
void ddp_options_init(struct ddp_options *o);

/* Reads the launcher environment (RANK, LOCAL_RANK, WORLD_SIZE,
 * LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
 * TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_ERROR_FILE);
 * with none of them set the world has one rank. Under a launcher it sets
 * PR_SET_PDEATHSIG (SIGKILL) and exits at once if the launcher is already
 * gone. Then it binds the device and silences stdout on quiet ranks; on
 * the others, a stdout that is a pipe or a socket (a launcher's) becomes
 * line-buffered, as on a terminal, so that each line shows as it is
 * printed, unless stdio has set it up already (a setvbuf, or output before
 * ddp_init: that mode stays; a file keeps its full buffering).
 *
 * The join: when the launcher names a store (MASTER_ADDR and MASTER_PORT set
 * along with RANK or WORLD_SIZE, as under ddprun, even for one rank; not with
 * DDP_STORE=0), every rank connects to it, retrying until the timeout, and
 * publishes what it believes (WORLD_SIZE, LOCAL_RANK/LOCAL_WORLD_SIZE,
 * GROUP_RANK/GROUP_WORLD_SIZE, backend, libddp version) under
 * "ddp/<run id>/r<restart count>/" (a process's K-th later context, after
 * ddp_finalize: ".../c<K>/"). The ranks agree, or every one fails at
 * once with DDP_EENV and a message naming the culprit ("rank 3 says
 * WORLD_SIZE=8, ranks 0-2 say 4", "rank 1 was started twice (...)"); ranks
 * that never come are named at the timeout (-ETIMEDOUT, "ranks 2, 5 did not
 * join within 30 s (6 of 8 did)"); an unreachable store fails after the
 * timeout with -ECONNREFUSED or -ETIMEDOUT naming MASTER_ADDR:MASTER_PORT.
 * Four round trips to the store per rank (five for the last to arrive), on
 * top of connecting. The connection is closed before ddp_init returns,
 * success or not: nothing waits on the store afterwards.
 * Without a store (DDP_STORE=0, which ddp_spawn's children get; a world of
 * one without MASTER_ADDR/MASTER_PORT; a program started by hand) the ranks
 * of the one node meet through shared memory alone, with no check across
 * ranks. A store that closes the 2.x handshake (PyTorch 1.x's, as torchrun
 * 1.x hosts) is treated the same way on one node (rank 0 says so on stderr)
 * and is an error for several nodes.
 *
 * Last, it connects the communicators: shared memory inside the node, TCP
 * between node leaders (more than one node, found through the store), NCCL
 * (nccl backend). Blocks until every rank has joined or the timeout passes
 * (o->timeout_ms, else DDP_TIMEOUT). o may be NULL (defaults).
 * Errors: DDP_EENV (inconsistent environment: RANK >= WORLD_SIZE, missing
 * MASTER_ADDR in a world > 1 without DDP_STORE=0, ...; or ranks that
 * disagree), DDP_ENOGPU, DDP_ENOTBUILT, -ETIMEDOUT, -ECONNREFUSED, DDP_ENCCL,
 * -ENOMEM, -EBUSY (a process has one context at a time). *out is set only on
 * success. */
int ddp_init(const struct ddp_options *o, struct ddp_ctx **out);

/* Waits for pending gradient reductions, releases the communicators, restores
 * stdout and frees ctx (NULL is a no-op). Once freed, every call refuses
 * ctx (-EINVAL, "no context (NULL or finalized)"; a second ddp_finalize
 * "not a live context"; the getters answer as for NULL), also once a later
 * ddp_init made another context: a finalized context's address is never
 * reused (its struct, under 2 KiB, stays allocated until the process ends).
 * No barrier: call ddp_barrier() first
 * if ranks must leave together; a peer still making a call after this one
 * finalized fails at once naming it (the cpu backend: -EINVAL, "rank R
 * finished (ddp_finalize) after N collective calls ...", or "... after its
 * call was refused (MESSAGE)" where its last call failed its argument
 * checks and no call ran since). Returns the first
 * error met while draining
 * (a failure some call returned already is not returned again: 0).
 * A reducer still alive loses its buckets: its calls then fail with -EINVAL
 * (ddp_reducer_grad: NULL) and ddp_reducer_destroy frees it. ddp_alloc blocks
 * not given back are freed. */
int ddp_finalize(struct ddp_ctx *ctx);

int ddp_rank(const struct ddp_ctx *ctx);
int ddp_world_size(const struct ddp_ctx *ctx);
int ddp_local_rank(const struct ddp_ctx *ctx);
int ddp_local_world_size(const struct ddp_ctx *ctx);
int ddp_node_rank(const struct ddp_ctx *ctx); /* GROUP_RANK */
int ddp_num_nodes(const struct ddp_ctx *ctx); /* GROUP_WORLD_SIZE */
enum ddp_backend ddp_backend(const struct ddp_ctx *ctx);
/* The CUDA device bound by ddp_init (nccl backend), -1 for cpu. */
int ddp_device(const struct ddp_ctx *ctx);
/* Change the default deadline (ms, > 0; above 10^12, 10^12) of later
 * blocking calls. */
int ddp_set_timeout(struct ddp_ctx *ctx, int64_t timeout_ms);

/* ---- print control ------------------------------------------------------------------ */

/* 1 if this rank's stdout is shown, 0 if it is silenced. */
int ddp_print_enabled(const struct ddp_ctx *ctx);

/* printf to the real stdout from any rank, prefixed with "[rankN] " (the C
 * form of torchvision's print(..., force=True)). ctx may be NULL (no prefix).
 * Returns the number of bytes written or a negative errno. stderr is never
 * silenced. */
int ddp_print_force(struct ddp_ctx *ctx, const char *fmt, ...) DDP_PRINTF(2, 3);

/* ---- fatal errors ---------------------------------------------------------------------- */

/* Writes a torchelastic-format error file to $TORCHELASTIC_ERROR_FILE (if set):
 * {"message": {"message": msg, "extraInfo": {"py_callstack": <backtrace>,
 * "timestamp": "<epoch seconds>"}}}, so that the launcher's failure report
 * shows it. 0, or a negative errno if the file cannot be written.
 * Once a collective or ddp_init has failed because another rank exited,
 * disconnected or timed out, extraInfo also holds "ddp_caused_by": "rank 2
 * (pid 4711) exited" (a secondary failure, which the launcher does not take
 * for the root cause); libddp writes such a file itself at that moment. */
int ddp_record_error(const char *msg);

/* Records the formatted message (ddp_record_error), prints it on stderr with a
 * "[rankN]" prefix and exits with status 1. ctx may be NULL. */
DDP_NORETURN void ddp_fatal(struct ddp_ctx *ctx, const char *fmt, ...) DDP_PRINTF(2, 3);

/* ---- collectives ------------------------------------------------------------------------- */

/* In place: buf (count elements of dt) becomes op over every rank's buf. Every
 * rank computes the same bits. timeout: the context's default. */
int ddp_all_reduce(struct ddp_ctx *ctx, void *buf, size_t count, enum ddp_dtype dt, enum ddp_op op);
/* bytes of root's buf are copied into every rank's buf. */
int ddp_broadcast(struct ddp_ctx *ctx, void *buf, size_t bytes, int root);
/* recv (world_size * bytes) receives every rank's send (bytes) in rank order.
 * send may point at this rank's slot in recv, and overlap it nowhere else
 * (-EINVAL). */
int ddp_all_gather(struct ddp_ctx *ctx, const void *send, void *recv, size_t bytes);
/* Returns once every rank has called it. */
int ddp_barrier(struct ddp_ctx *ctx);

/* Memory for the backend's collectives, like a reducer's buckets: on the cpu
 * backend host memory shared with the node's ranks (page-aligned;
 * collectives of it on every rank of the node read the peers' buffers in
 * place, an all_reduce with no staging copy: DDP_SHM_DIRECT in libddp(3)), or private
 * memory where that cannot be; on nccl device memory. Not zeroed. NULL on
 * failure (ddp_errmsg). Free it with ddp_free before ddp_finalize (which frees
 * what is left). */
void *ddp_alloc(struct ddp_ctx *ctx, size_t bytes);
/* p from ddp_alloc of this ctx, or NULL (a no-op). Any other pointer (one freed
 * already, one from malloc) is left alone, with one line on stderr and
 * ddp_errmsg saying so. */
void ddp_free(struct ddp_ctx *ctx, void *p);

/* ---- DDP gradients ---------------------------------------------------------------------------- */

/* One model parameter, as registered with a reducer (data stays owned by the
 * caller and must live as long as the reducer). */
struct ddp_param {
	const char *name; /* for error messages; copied */
	void *data;	  /* the parameter values (device memory for nccl) */
	size_t count;	  /* elements */
	enum ddp_dtype dtype;
};

struct ddp_reducer_options {
	size_t first_bucket_bytes; /* cap of the first bucket; 0: 1 MiB */
	size_t bucket_bytes;	   /* cap of the others (bucket_cap_mb); 0: 25 MiB */
	/* 1 (default): broadcast every parameter from rank 0 in ddp_reducer_create
	 * so that all ranks start equal. */
	int broadcast_params;
};

void ddp_reducer_options_init(struct ddp_reducer_options *o);

struct ddp_reducer;

/* Groups the parameters into buckets like PyTorch's Reducer: by dtype, in
 * registration order, a bucket closing once it reaches its cap; buckets are
 * then reduced in reverse order (the last layers' gradients are ready first).
 * Gradients live inside the bucket buffers (gradient_as_bucket_view), zeroed;
 * on the cpu backend the buckets are memory the node's ranks share, so that
 * their all_reduce reads the peers' buckets directly (DDP_SHM_DIRECT).
 * Collective: every rank must register the same parameters in the same order
 * (checked: -EINVAL otherwise). A reducer is driven by one thread; reducers
 * may come and go on different threads, beside ddp_alloc and ddp_free (with
 * more than one rank, creating one is a collective: one thread at a time). o
 * may be NULL. */
int ddp_reducer_create(struct ddp_ctx *ctx, const struct ddp_param *params, size_t nparams,
		       const struct ddp_reducer_options *o, struct ddp_reducer **out);
/* Waits for pending reductions and frees r (NULL is a no-op). */
void ddp_reducer_destroy(struct ddp_reducer *r);

/* The gradient of parameter i: count elements of its dtype inside a bucket
 * (device memory for nccl). Stable for the reducer's lifetime; NULL (and
 * ddp_errmsg saying why) if i is out of range or the context was finalized. */
void *ddp_reducer_grad(struct ddp_reducer *r, size_t i);

/* Sets every gradient to zero (call before each backward pass, after finish).
 * zero_grad, mark_ready and finish fail at once on a broken context (see
 * the conventions above: the failure once, then DDP_EBROKEN). */
int ddp_reducer_zero_grad(struct ddp_reducer *r);

/* Gradient i is complete for this iteration. When every gradient of a bucket
 * is ready and every earlier bucket has been launched, the bucket's average
 * over all ranks is started in the background (cpu: a communication thread;
 * nccl: the context's stream), strictly in bucket order on every rank.
 * -EALREADY if i was already marked this iteration, -EINVAL if out of range. */
int ddp_reducer_mark_ready(struct ddp_reducer *r, size_t i);

/* Ends the iteration: waits for every bucket; afterwards each gradient holds the
 * average over all ranks. DDP_ENOTREADY (naming the first missing parameter in
 * ddp_errmsg) if a gradient was never marked; the iteration is then reset and
 * nothing was reduced for the unlaunched buckets. */
int ddp_reducer_finish(struct ddp_reducer *r);

/* no_sync: with sync == 0, mark_ready and finish only do the bookkeeping and
 * gradients accumulate locally (the caller adds into them); the first
 * iteration with sync == 1 reduces the accumulated sums. Any other value is
 * -EINVAL. Between iterations only: a change is -EBUSY once a gradient of this
 * iteration was marked ready. */
int ddp_reducer_set_sync(struct ddp_reducer *r, int sync);

/* Introspection: number of buckets; bucket b's size in bytes and parameter
 * count (in reduction order: bucket 0 is reduced first; -EINVAL past the
 * last). After ddp_finalize: 0 buckets, -EINVAL. */
size_t ddp_reducer_num_buckets(const struct ddp_reducer *r);
int ddp_reducer_bucket_info(const struct ddp_reducer *r, size_t b, size_t *bytes, size_t *nparams);

/* ---- sampler ------------------------------------------------------------------------------------ */

/* torch.utils.data.distributed.DistributedSampler: the caller-owned state.
 * Fields are read-only for the caller; set them with the functions below. */
struct ddp_sampler {
	uint64_t dataset_len;
	int num_replicas;
	int rank;
	int shuffle;
	int drop_last;
	uint64_t seed;
	uint64_t epoch;
	uint64_t num_samples; /* indices per rank per epoch */
	uint64_t total_size;  /* num_samples * num_replicas */
};

/* Same arguments and defaults meaning as PyTorch's (seed 0, shuffle 1,
 * drop_last 0 there). -EINVAL if num_replicas < 1 or rank is out of range;
 * -EOVERFLOW if the padded epoch (total_size) does not fit in 64 bits. */
int ddp_sampler_init(struct ddp_sampler *s, uint64_t dataset_len, int num_replicas, int rank,
		     int shuffle, uint64_t seed, int drop_last);
/* num_replicas and rank from the context (its world size and rank). */
int ddp_sampler_init_ctx(struct ddp_sampler *s, const struct ddp_ctx *ctx, uint64_t dataset_len,
			 int shuffle, uint64_t seed, int drop_last);
void ddp_sampler_set_epoch(struct ddp_sampler *s, uint64_t epoch);
/* Writes this rank's num_samples indices for the current epoch into out: the
 * same as list(iter(sampler)) in PyTorch (randperm from a mt19937 seeded with
 * seed + epoch when shuffling; padding by repeating from the start, or
 * truncation with drop_last). seed + epoch wraps modulo 2^64: a negative
 * PyTorch seed passed as its two's complement draws as PyTorch's; a sum
 * past 2^64 - 1, which PyTorch refuses (overflow), shuffles here. Needs
 * dataset_len * 8 bytes of temporary memory. */
int ddp_sampler_indices(const struct ddp_sampler *s, uint64_t *out);

/* torch.randperm(n, generator=torch.Generator().manual_seed(seed)) on the CPU
 * of PyTorch 2.x: out receives n values. From n = 214748364 on, PyTorch 2.1
 * and later draw another way than 1.13 did; libddp draws as 2.x. Exposed for
 * tests and for programs that shuffle without a sampler. */
int ddp_randperm(uint64_t n, uint64_t seed, uint64_t *out);

/* ---- spawn ----------------------------------------------------------------------------------------- */

enum ddp_start_method {
	DDP_START_FORK, /* fork(); fn runs in a copy of the parent */
	DDP_START_SPAWN /* re-exec /proc/self/exe with the same argv: the child runs
			  * main() again and its own ddp_spawn() call (the first one
			  * in the process) runs fn(rank, arg) and exits */
};

struct ddp_spawn_options {
	int join;			    /* 1 (default): wait for every child before returning */
	int daemon;			    /* 1: children get SIGKILL when the parent dies */
	enum ddp_start_method start_method; /* default DDP_START_FORK */
	int64_t grace_ms;		    /* SIGTERM to SIGKILL when stopping children; 0: 5 s */
};

void ddp_spawn_options_init(struct ddp_spawn_options *o);

struct ddp_spawn_ctx;

/* torch.multiprocessing.spawn for C: runs fn(rank, arg) in nprocs processes,
 * each with the environment a single-node launcher gives (RANK, LOCAL_RANK,
 * WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK=0, GROUP_WORLD_SIZE=1,
 * TORCHELASTIC_RUN_ID, ...; ddprun's own builder), so that fn can call
 * ddp_init(). libddp hosts no
 * store, so the children get DDP_STORE=0 and no MASTER_ADDR/MASTER_PORT (not
 * even the parent's): ddp_init forms their world through shared memory
 * alone. A child exits with fn's return value
 * (0..255; a negative value becomes 1). With join, returns 0 when every child
 * succeeded, or DDP_ECHILD after stopping the others when one failed
 * (ddp_errmsg: "ddp_spawn: process 2 terminated with exit code 3" / "... with signal
 * SIGKILL"); *out may then be NULL. Without join, *out receives the context to
 * pass to ddp_spawn_join().
 * A status it did not see is never a success: while the children run,
 * SIGCHLD is made reapable (SIG_IGN becomes SIG_DFL, SA_NOCLDWAIT is
 * cleared, a handler stays) and the program's disposition is put back after
 * the last child is reaped (fn runs with it too); a status that the program's
 * own waitpid took first (a SIGCHLD handler reaping every child) gives
 * DDP_ECHILD once the others are done ("... exited with a status that is
 * unknown: another waitpid in this program (a SIGCHLD handler?) reaped it
 * first"; ddp_spawn_failure: exit code -1, signal 0). */
int ddp_spawn(int (*fn)(int rank, void *arg), void *arg, int nprocs,
	      const struct ddp_spawn_options *o, struct ddp_spawn_ctx **out);

/* Waits up to timeout_ms (< 0, or above 10^12: forever) for the children. 1: all exited with
 * 0; 0: some still run; DDP_ECHILD: one failed and the others were stopped. */
int ddp_spawn_join(struct ddp_spawn_ctx *sc, int64_t timeout_ms);
/* After DDP_ECHILD: which rank failed first, its exit code (or -1) and the
 * signal that killed it (or 0). -ENOENT when none failed (or sc is NULL). */
int ddp_spawn_failure(const struct ddp_spawn_ctx *sc, int *rank, int *exit_code, int *signo);
/* Process ids of the children (nprocs entries). */
const int *ddp_spawn_pids(const struct ddp_spawn_ctx *sc);
/* Stops children still running (SIGTERM, grace, SIGKILL), reaps them, frees. */
void ddp_spawn_free(struct ddp_spawn_ctx *sc);

#ifdef __cplusplus
}
#endif

#endif
