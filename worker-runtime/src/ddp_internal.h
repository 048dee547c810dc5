/* ddp_internal: what libddp's source files share (not installed).
 * Naming: ddp_ for the public API, ddpi_ for internal functions that cross
 * files, static for everything else. */
#ifndef DDP_INTERNAL_H
#define DDP_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stddef.h>
#include <string.h>

#include "ddp.h"

/* Internal: not exported from libddp.so. */
#pragma GCC visibility push(hidden)

#define DDP_DEFAULT_TIMEOUT_MS (600 * 1000)
/* The longest deadline a call takes: DDP_TIMEOUT's own limit, 10^9 s. A
 * longer one (INT64_MAX meaning "forever") counts as that: added to the clock
 * it would overflow into the past and time out at once. */
#define DDPI_TIMEOUT_MAX_MS ((int64_t)1000 * 1000 * 1000 * 1000)

/* ---- errors (error.c) ---------------------------------------------------------- */

/* Sets this thread's ddp_errmsg() text and returns code (so callers can write
 * `return ddpi_err(-EINVAL, "...")`). */
int ddpi_err(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefix the current message with "what: " (keeps the code and the cause). */
int ddpi_err_prefix(int code, const char *what);
/* The current error (just set by ddpi_err, which clears any cause) was caused
 * by another rank's failure: it exited, disconnected or timed out. cause
 * names that rank ("rank 2 (pid 41) exited"). Returns code, so that
 * `return ddpi_caused_by(ddpi_err(DDP_EPEER, ...), "rank %d ...", r)`. */
int ddpi_caused_by(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* This thread's current cause ("" when the error is the rank's own). */
const char *ddpi_cause(void);
/* A context broke, or ddp_init failed, with this thread's current error. If
 * another rank's failure caused it, remember the cause for the process (the
 * error files of ddp_record_error and ddp_fatal carry it from now on) and
 * write the error file at once: a program that just exits non-zero is
 * classified too. */
void ddpi_note_failure(void);
/* A new context: an earlier context's cause no longer applies. */
void ddpi_forget_failure(void);
/* Rank used to prefix messages printed on stderr (-1: unknown). */
void ddpi_set_log_rank(int rank);
int ddpi_log_rank(void);

/* ---- environment (env.c) --------------------------------------------------------- */

/* DDP_SHM_CHUNK_KB: a staging slot per rank, 4 KiB to 1 GiB (three per rank). */
#define DDPI_SHM_CHUNK_KB_DEFAULT 1024
#define DDPI_SHM_CHUNK_KB_MIN	  4
#define DDPI_SHM_CHUNK_KB_MAX	  (1 << 20)

struct ddp_env {
	int rank, world;
	int local_rank, local_world;
	int node, nnodes;
	char master_addr[256];
	int master_port; /* 0: unset */
	int use_store;	 /* join at MASTER_ADDR:MASTER_PORT (join.h) */
	int join_gen;	 /* how many joins this process began before (init.c) */
	char run_id[128];
	int restart;
	int under_launcher;	  /* some launcher variable was set */
	enum ddp_backend backend; /* from DDP_BACKEND */
	char print_ranks[256];	  /* from DDP_PRINT_RANKS ("" unset) */
	int64_t timeout_ms;	  /* from DDP_TIMEOUT, else the default */
	int quiet;		  /* DDP_QUIET */
	int async;		  /* DDP_ASYNC: buckets on a communication thread (1) */
	char shm_nonce[33];	  /* DDP_SHM_NONCE ("" unset): the launcher's token */
	int shm_cma;		  /* DDP_SHM_CMA: -1 auto, 0 never, 1 at any size */
	char tcp_cc[16];	  /* DDP_TCP_CONGESTION: auto, system or a name */
	char socket_ifname[16];	  /* DDP_SOCKET_IFNAME ("" unset): the ring's interface */
	int pdeathsig;		  /* DDP_PDEATHSIG: 0 opts out of PR_SET_PDEATHSIG */
	size_t shm_slot_bytes;	  /* DDP_SHM_CHUNK_KB, in bytes */
	int shm_direct;		  /* DDP_SHM_DIRECT: 0 stages every collective */
};

typedef const char *(*ddpi_getenv_fn)(const char *name, void *arg);

/* Parses and checks the launcher environment through get (getenv-like), so tests
 * can feed a table. DDP_EENV with the reason in ddp_errmsg on inconsistent or
 * malformed values. */
int ddpi_env_parse(ddpi_getenv_fn get, void *arg, struct ddp_env *e);
int ddpi_parse_backend(const char *s, enum ddp_backend *out);

/* ---- print control (print.c) --------------------------------------------------------- */

/* spec: "all", "none", or a comma list of ranks and ranges ("0,2-3").
 * *match = 1 if rank is selected. -EINVAL on a malformed spec. */
int ddpi_print_spec_match(const char *spec, int rank, int *match);
/* Silences stdout (dup2 of /dev/null) keeping a copy for ddp_print_force. */
int ddpi_print_setup(struct ddp_ctx *ctx, const char *spec);
void ddpi_print_restore(struct ddp_ctx *ctx);

/* ---- dtypes and reduction kernels (dtype.c, reduce.c) --------------------------------- */

uint16_t ddpi_f32_to_f16(float f);
float ddpi_f16_to_f32(uint16_t h);
/* bfloat16 is the top half of a float32, rounded to nearest even; a NaN stays
 * a NaN (quiet). Inline: the vectorized loops of dtype.c and reduce.c are
 * made of them. */
static inline uint32_t ddpi_f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static inline float ddpi_bits_f32(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static inline float ddpi_bf16_to_f32(uint16_t h)
{
	return ddpi_bits_f32((uint32_t)h << 16);
}

static inline uint16_t ddpi_f32_to_bf16(float f)
{
	uint32_t x = ddpi_f32_bits(f);
	uint32_t r = (x + 0x7fff + ((x >> 16) & 1)) >> 16;
	uint32_t q = (x >> 16) | 0x40;
	return (uint16_t)((x & 0x7fffffff) > 0x7f800000 ? q : r);
}
/* Whether the float16 kernels for F16C are compiled (x86-64 and GCC's dialect:
 * dtype.c's bulk conversions, reduce.c's pair sum), and whether this CPU runs
 * them (F16C and AVX). */
#if defined(__x86_64__) && defined(__GNUC__)
#define DDPI_HAVE_F16C 1
#else
#define DDPI_HAVE_F16C 0
#endif
int ddpi_cpu_f16c(void);
/* Bulk conversions (vectorized where the CPU allows). */
void ddpi_f16_to_f32_n(float *dst, const uint16_t *src, size_t n);
void ddpi_f32_to_f16_n(uint16_t *dst, const float *src, size_t n);
void ddpi_bf16_to_f32_n(float *dst, const uint16_t *src, size_t n);
void ddpi_f32_to_bf16_n(uint16_t *dst, const float *src, size_t n);

int ddpi_dtype_valid(enum ddp_dtype dt);
int ddpi_op_valid(enum ddp_op op);
const char *ddpi_dtype_name(enum ddp_dtype dt);

/* dst[i] = op(src[0][i], ..., src[nsrc-1][i]) for n elements, sources combined
 * in index order (so every rank computing it gets the same bits). AVG: the sum
 * divided by avg_div (the world size). dst may alias any source. float16 and
 * bfloat16 accumulate in float32 and round once. */
void ddpi_reduce(enum ddp_dtype dt, enum ddp_op op, void *dst, const void *const *src, int nsrc,
		 size_t n, int avg_div);
/* buf[i] /= div (AVG after partial sums). */
void ddpi_scale_div(enum ddp_dtype dt, void *buf, size_t n, int div);

/* A hot loop the compiler is to vectorize (GCC's -O2 cost model refuses loops
 * of unknown length; clang has no such attribute and vectorizes at -O2),
 * compiled for AVX-512 and AVX2 too and picked at load time (target_clones;
 * not under clang or AddressSanitizer). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
	!defined(__SANITIZE_ADDRESS__)
#define DDPI_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define DDPI_CLONES
#endif
#if defined(__GNUC__) && !defined(__clang__)
#define DDPI_VEC __attribute__((optimize("tree-vectorize", "vect-cost-model=dynamic")))
#else
#define DDPI_VEC
#endif

/* memcpy of n bytes (no overlap); stream: with non-temporal stores, for the
 * result of a collective too big to stay in cache (copy.c says why and when).
 * Without them (DDPI_HAVE_STREAM 0) it is memcpy. */
#ifdef __x86_64__
#define DDPI_HAVE_STREAM 1
#else
#define DDPI_HAVE_STREAM 0
#endif
#define DDPI_STREAM_MIN_BYTES (64u << 20) /* results the node's ranks write, together */
#define DDPI_STREAM_MIN_EACH  (16u << 20) /* and each rank's */
void ddpi_copy(void *dst, const void *src, size_t n, int stream);
/* src to dst as memcpy does and, in the same pass, to sdst streamed; either
 * destination may be NULL; none may overlap src. */
void ddpi_copy2(void *dst, void *sdst, const void *src, size_t n);

/* ---- communicators ----------------------------------------------------------------------- */

/* A backend: collectives over all ranks, with absolute deadlines (util_now_ms()
 * clock). Every function returns 0 or a negative code with ddp_errmsg set. */
struct ddpi_backend_ops {
	const char *name;
	int (*all_reduce)(void *be, void *buf, size_t count, enum ddp_dtype dt, enum ddp_op op,
			  int64_t deadline);
	int (*broadcast)(void *be, void *buf, size_t bytes, int root, int64_t deadline);
	int (*all_gather)(void *be, const void *send, void *recv, size_t bytes, int64_t deadline);
	int (*barrier)(void *be, int64_t deadline);
	/* Asynchronous all-reduce for gradient buckets, completed in issue order by
	 * wait_async. NULL: the core runs them on its communication thread. */
	int (*all_reduce_async)(void *be, void *buf, size_t count, enum ddp_dtype dt,
				enum ddp_op op);
	int (*wait_async)(void *be, int64_t deadline);
	/* Memory of the backend's device (host for cpu). */
	int (*mem_alloc)(void *be, size_t bytes, void **p);
	void (*mem_free)(void *be, void *p);
	int (*mem_zero)(void *be, void *p, size_t bytes);
	void (*destroy)(void *be);
};

struct ddpi_async; /* the cpu communication thread (async.c) */

struct ddp_ctx {
	struct ddp_env env;
	enum ddp_backend backend;
	int device;
	int64_t timeout_ms;
	/* First error code of a failed collective (0: healthy), its message,
	 * and whether a call returned it already (ddpi_ctx_check). Read without
	 * the lock: a reducer must not wait behind a running bucket to learn it. */
	_Atomic int broken;
	atomic_int breaking; /* set by the one failure that writes broken_msg */
	char broken_msg[256];
	atomic_int broken_told;
	pthread_mutex_t lock; /* one collective at a time */
	/* The message of the last collective refused for its arguments ("" none;
	 * under lock), and the calls the cpu communicator had made then: where
	 * it made none since (no collective, no gradient bucket), the peers
	 * wait in the call this rank did not make, and are told why if it
	 * finalizes next. */
	char refused[192];
	uint64_t refused_at;
	const struct ddpi_backend_ops *ops;
	void *be;
	struct ddpi_cpu *cpu; /* the cpu communicator (also the NCCL bootstrap) */
	struct ddpi_async *async;
	/* print control */
	int print_enabled;
	int saved_stdout; /* -1 when stdout was not redirected */
	/* What lives on the backend's memory: the reducers (reducer.c), which
	 * ddp_finalize detaches, and ddp_alloc's blocks (mem.c), so that ddp_free
	 * tells a foreign or freed pointer from its own. */
	struct ddp_reducer *reducers;
	struct ddpi_block *blocks;
	pthread_mutex_t mem_lock;  /* reducers and blocks: any thread may add or take one */
	struct ddp_ctx *tomb_next; /* finalized: the one finalized before (init.c) */
};

/* ctx where it is the live context (ddp_init gave it, ddp_finalize has not
 * taken it back), else NULL: every public call takes a finalized one as
 * NULL. */
struct ddp_ctx *ddpi_ctx_live(const struct ddp_ctx *ctx);
/* ctx where it is live, or the context a forked child inherited (whose
 * identity the getters still read: nothing shared is touched), else NULL. */
const struct ddp_ctx *ddpi_ctx_known(const struct ddp_ctx *ctx);
/* The error of a call given a context that is not live: -EINVAL, "what: no
 * context (NULL or finalized)" or, in a forked child, why it is refused. */
int ddpi_ctx_refuse(const struct ddp_ctx *ctx, const char *what);

/* ddp_finalize: every reducer still alive waits for its buckets and gives
 * them back; its later calls fail (destroy still frees it). First error. */
int ddpi_reducers_detach(struct ddp_ctx *ctx);
/* ddp_finalize: frees what ddp_alloc gave and ddp_free did not take back. */
void ddpi_blocks_free(struct ddp_ctx *ctx);

/* Marks the context broken with this thread's current error, which the
 * caller returns (code): every later call gets DDP_EBROKEN. Needs ctx->lock. */
int ddpi_ctx_fail(struct ddp_ctx *ctx, int code);
/* The same from the communication thread: no call returned the error yet, so
 * the next one that checks (ddpi_ctx_check) returns it. */
void ddpi_ctx_fail_later(struct ddp_ctx *ctx, int code);
/* 0 while the context is healthy. Broken: the failure itself ("what: ...")
 * for the first call to report it, then DDP_EBROKEN ("what: broken by an
 * earlier failure: ...") with the original message. */
int ddpi_ctx_check(struct ddp_ctx *ctx, const char *what);
int64_t ddpi_deadline(const struct ddp_ctx *ctx);

/* ---- cpu communicator (cpu.c: shm inside the node, tcp between node leaders) --------- */

struct ddpi_cpu;
struct store_client;
/* sc: the joined store (join.h), needed by a multi-node job's node leaders;
 * NULL on a single node without a store. Not kept after open. */
int ddpi_cpu_open(const struct ddp_env *env, struct store_client *sc, int64_t deadline,
		  struct ddpi_cpu **out);
void ddpi_cpu_close(struct ddpi_cpu *c);
/* ddp_finalize, before close: peers still waiting on this rank for another
 * call fail at once naming it (shm.h, tcp.h: ddpi_*_finish), and, where
 * refused is not NULL, the call of this rank that was refused instead. */
void ddpi_cpu_finish(struct ddpi_cpu *c, const char *refused);
/* The collective calls it made (0 for NULL); under the context's lock. */
uint64_t ddpi_cpu_ncalls(const struct ddpi_cpu *c);
extern const struct ddpi_backend_ops ddpi_cpu_ops;

/* ---- asynchronous bucket reduction for backends without their own (async.c) ----- */

/* threaded 0: no thread; submitted reductions run in ddpi_async_wait. */
int ddpi_async_start(struct ddp_ctx *ctx, int threaded, struct ddpi_async **out);
/* Set on the communication thread: its waits must not spin, the program's
 * own threads are computing on the same cores. */
extern __thread int ddpi_in_background;
/* Queues an all_reduce of buf to run on the communication thread. */
int ddpi_async_submit(struct ddpi_async *a, void *buf, size_t count, enum ddp_dtype dt,
		      enum ddp_op op);
/* Waits for every submitted reduction: 0, or after a failed one what
 * ddpi_ctx_check(ctx, what) says. -ETIMEDOUT (the context broken, the queue
 * dropped) when the thread finished none for longer than the context's
 * timeout. what NULL: for a caller that returns nothing (DDP_EBROKEN), so
 * that the next call still reports the failure. */
int ddpi_async_wait(struct ddpi_async *a, const char *what);
/* Gives back buf, backend memory a submitted reduction may use: at once, or
 * if one still runs (its wait gave up), in ddpi_async_stop after the join. */
void ddpi_async_free(struct ddpi_async *a, void *buf);
/* Joins the thread (its running reduction ends by its own deadline) and frees
 * what ddpi_async_free kept. */
void ddpi_async_stop(struct ddpi_async *a);

/* ---- devices (device.c; cuda/ when built with CUDA) ---------------------------------------- */

/* Number of visible GPUs (0 when none or no driver); msg gets the reason for 0. */
int ddpi_gpu_count(char *msg, size_t len);
/* Resolves want into ctx->backend and ctx->device; why gets the reason auto
 * chose cpu. DDP_ENOTBUILT / DDP_ENOGPU for an impossible nccl. */
int ddpi_select_backend(struct ddp_ctx *ctx, enum ddp_backend want, char *why, size_t len);
#ifdef DDP_WITH_CUDA
int ddpi_nccl_open(struct ddp_ctx *ctx, int64_t deadline, void **be);
extern const struct ddpi_backend_ops ddpi_nccl_ops;
#endif

/* ---- bucket assignment (buckets.c) ----------------------------------------------------------- */

struct ddpi_bucket_plan {
	size_t nbuckets;
	size_t *start; /* bucket b holds order[start[b] .. start[b+1]) */
	size_t *order; /* parameter indices, nparams entries */
	size_t *bytes; /* size of each bucket */
};

/* PyTorch's compute_bucket_assignment_by_size, then reversed: parameters
 * grouped by dtype in registration order, a bucket closing when it reaches its
 * cap (first_cap for the first bucket of each dtype, then cap); buckets sorted
 * by their smallest parameter index, then reversed (bucket 0 is reduced first).
 * Inside a bucket parameters keep registration order. */
int ddpi_bucket_plan(const struct ddp_param *params, size_t n, size_t first_cap, size_t cap,
		     struct ddpi_bucket_plan *plan);
void ddpi_bucket_plan_free(struct ddpi_bucket_plan *plan);

/* ---- mt19937 (sampler.c) -------------------------------------------------------------------------- */

struct ddpi_mt19937 {
	uint32_t state[624];
	int left;
	int next;
};
void ddpi_mt19937_seed(struct ddpi_mt19937 *m, uint64_t seed);
uint32_t ddpi_mt19937_next(struct ddpi_mt19937 *m);

#pragma GCC visibility pop

#endif
