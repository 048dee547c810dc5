/* init: ddp_init/ddp_finalize and the context's accessors. The order matters:
 * environment (so errors name the rank), parent death signal, backend and
 * device, quiet stdout, the join at the launcher's store (so a wrong launch
 * fails there, naming the culprit, before anything waits on a peer), then the
 * communicators. The store connection is closed before ddp_init returns. */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "ddp_internal.h"
#include "join.h"
#include "progress.h"
#include "store_client.h"
#include "util.h"

/* One context per process: a second one would share the node's segment name. */
static _Atomic int live_contexts;
/* The context ddp_init gave and ddp_finalize has not taken back (one a
 * process): a call given any other, one finalized, takes it as NULL instead
 * of reading what is left of it (ddpi_ctx_live). */
static struct ddp_ctx *_Atomic live_ctx;
/* Finalized contexts, zeroed and never freed: free() would let the next
 * ddp_init's calloc return the same address, and a stale handle the program
 * still holds would then be the live context (its second ddp_finalize tore
 * the new one down). Only the struct stays (sizeof(struct ddp_ctx), under
 * 2 KiB, per finalized context; a process makes a handful), linked so that
 * leak checkers see it reachable. Nothing on a collective's path reads this. */
static struct ddp_ctx *tombstones;
static pthread_mutex_t tombstones_lock = PTHREAD_MUTEX_INITIALIZER;

static void bury(struct ddp_ctx *ctx)
{
	memset(ctx, 0, sizeof(*ctx));
	pthread_mutex_lock(&tombstones_lock);
	ctx->tomb_next = tombstones;
	tombstones = ctx;
	pthread_mutex_unlock(&tombstones_lock);
}

/* fork(): the child's copy of the context names the parent's rank, shared
 * segment, sockets and peers; a collective from it mixed into the parents'
 * (wrong sums, rc 0) and its ddp_finalize told the peers that the rank had
 * finished. As torch.distributed forbids a process group in a forked child,
 * the child's handler takes the context out of live_ctx, so the one check
 * every call makes already refuses it (no cost on a collective's path), and
 * remembers it to say why. */
static pid_t live_pid;			   /* the process that ran ddp_init of live_ctx */
static struct ddp_ctx *_Atomic forked_ctx; /* a forked child's inherited context */
static pid_t forked_pid;		   /* and the process that ran its ddp_init */
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static int atfork_rc;

static void forget_in_child(void)
{
	struct ddp_ctx *live = atomic_exchange(&live_ctx, NULL);

	if (live) {
		forked_pid = live_pid;
		atomic_store(&forked_ctx, live);
	}
}

static void register_atfork(void)
{
	atfork_rc = -pthread_atfork(NULL, NULL, forget_in_child);
}

struct ddp_ctx *ddpi_ctx_live(const struct ddp_ctx *ctx)
{
	struct ddp_ctx *live = atomic_load(&live_ctx);

	return ctx && ctx == live ? live : NULL;
}

const struct ddp_ctx *ddpi_ctx_known(const struct ddp_ctx *ctx)
{
	if (!ctx)
		return NULL;
	return ctx == atomic_load(&live_ctx) || ctx == atomic_load(&forked_ctx) ? ctx : NULL;
}

int ddpi_ctx_refuse(const struct ddp_ctx *ctx, const char *what)
{
	if (ctx && ctx == atomic_load(&forked_ctx))
		return ddpi_err(-EINVAL,
				"%s: the context is used in a forked child (pid %d) of the "
				"process that ran ddp_init (pid %d); a child may not use its "
				"parent's context",
				what, (int)getpid(), (int)forked_pid);
	return ddpi_err(-EINVAL, "%s: no context (NULL or finalized)", what);
}
/* Joins at the store this process began: a later context (ddp_init after
 * ddp_finalize, on every rank) joins in a key space of its own, where the
 * earlier one's records cannot make it look started twice. */
static int joins_begun;

/* The environment as ddp_init reads it: a DDP_* variable that an explicit
 * option overrides is not read at all, so a bad value of it cannot fail
 * ddp_init (the options are documented to win); one that is used is
 * checked as ever. */
static const char *options_getenv(const char *name, void *arg)
{
	const struct ddp_options *o = arg;

	if ((o->backend != DDP_BACKEND_AUTO && !strcmp(name, "DDP_BACKEND")) ||
	    (o->print_ranks && !strcmp(name, "DDP_PRINT_RANKS")) ||
	    (o->quiet && !strcmp(name, "DDP_QUIET")) ||
	    (o->timeout_ms > 0 && !strcmp(name, "DDP_TIMEOUT")))
		return NULL;
	return getenv(name);
}

void ddp_options_init(struct ddp_options *o)
{
	memset(o, 0, sizeof(*o));
	o->backend = DDP_BACKEND_AUTO;
}

int64_t ddpi_deadline(const struct ddp_ctx *ctx)
{
	return util_now_ms() + ctx->timeout_ms;
}

/* The first failure wins; told: the caller returns it itself. The program's
 * thread and the communication thread may fail at once (a wait for buckets
 * that gave up, a bucket's own error): one of them writes the message. */
static void ctx_break(struct ddp_ctx *ctx, int code, int told)
{
	int first = 0;

	if (!atomic_compare_exchange_strong(&ctx->breaking, &first, 1))
		return;
	snprintf(ctx->broken_msg, sizeof(ctx->broken_msg), "%s", ddp_errmsg());
	atomic_store(&ctx->broken_told, told);
	atomic_store(&ctx->broken, code); /* last: a reader sees the message */
	ddpi_note_failure();
}

int ddpi_ctx_fail(struct ddp_ctx *ctx, int code)
{
	ctx_break(ctx, code, 1);
	return code;
}

void ddpi_ctx_fail_later(struct ddp_ctx *ctx, int code)
{
	ctx_break(ctx, code, 0);
}

int ddpi_ctx_check(struct ddp_ctx *ctx, const char *what)
{
	int code = atomic_load(&ctx->broken);

	if (!code)
		return 0;
	/* A bucket failed on the communication thread: this call reports it. */
	if (!atomic_exchange(&ctx->broken_told, 1))
		return ddpi_err(code, "%s: %s", what, ctx->broken_msg);
	return ddpi_err(DDP_EBROKEN, "%s: broken by an earlier failure: %s", what, ctx->broken_msg);
}

/* Die with the launcher. The launcher sets this between fork and exec too; a
 * library cannot rely on that (torchrun does not), so set it again and check
 * that the parent did not die before it took effect. DDP_PDEATHSIG=0 opts out
 * (ddp_spawn's non-daemon children). */
static void watch_parent(const struct ddp_env *env)
{
	pid_t before = getppid();

	if (!env->pdeathsig)
		return;
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
		return;
	if (getppid() != before) {
		fprintf(stderr, "[rank%d] libddp: the launcher exited before this worker started\n",
			ddpi_log_rank());
		_exit(1);
	}
}

static void announce(const struct ddp_ctx *ctx, const char *why)
{
	if (ctx->env.rank != 0 || ctx->env.quiet)
		return;
	if (ctx->backend == DDP_BACKEND_NCCL)
		fprintf(stderr,
			"libddp: backend nccl (rank 0 on GPU %d), world size %d, %d node(s)\n",
			ctx->device, ctx->env.world, ctx->env.nnodes);
	else if (why[0] && strcmp(why, "requested") != 0)
		fprintf(stderr, "libddp: no GPU (%s): backend cpu, world size %d, %d node(s)\n",
			why, ctx->env.world, ctx->env.nnodes);
	else
		fprintf(stderr, "libddp: backend cpu, world size %d, %d node(s)\n", ctx->env.world,
			ctx->env.nnodes);
}

int ddp_init(const struct ddp_options *o, struct ddp_ctx **out)
{
	struct ddp_options defaults;
	struct ddp_ctx *ctx;
	struct store_client *sc = NULL;
	char why[300];
	const char *spec;
	int rc;

	if (!out)
		return ddpi_err(-EINVAL, "ddp_init: out is NULL");
	if (!o) {
		ddp_options_init(&defaults);
		o = &defaults;
	}
	/* Not the default: ddp_spawn_join reads a negative timeout as forever,
	 * and a -1 meant so must not silently become 600 s. */
	if (o->timeout_ms < 0)
		return ddpi_err(-EINVAL,
				"ddp_init: options timeout_ms=%lld is negative (0: DDP_TIMEOUT or "
				"600 s; INT64_MAX: no deadline)",
				(long long)o->timeout_ms);
	pthread_once(&atfork_once, register_atfork);
	if (atfork_rc < 0)
		return ddpi_err(atfork_rc, "ddp_init: pthread_atfork: %s", strerror(-atfork_rc));
	if (atomic_fetch_add(&live_contexts, 1) != 0) {
		atomic_fetch_sub(&live_contexts, 1);
		if (atomic_load(&forked_ctx))
			return ddpi_err(-EBUSY,
					"ddp_init: this process is a forked child (pid %d) of the "
					"process that ran ddp_init (pid %d), whose context it "
					"holds a copy of: it can neither use that one nor make "
					"another",
					(int)getpid(), (int)forked_pid);
		return ddpi_err(-EBUSY, "ddp_init: this process already has a context "
					"(call ddp_finalize first)");
	}
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx) {
		atomic_fetch_sub(&live_contexts, 1);
		return ddpi_err(-ENOMEM, "ddp_init: out of memory");
	}
	ddpi_forget_failure(); /* a fresh start */
	ctx->saved_stdout = -1;
	ctx->print_enabled = 1;
	pthread_mutex_init(&ctx->lock, NULL);
	pthread_mutex_init(&ctx->mem_lock, NULL);
	if ((rc = ddpi_env_parse(options_getenv, (void *)o, &ctx->env)) < 0)
		goto fail;
	ddpi_set_log_rank(ctx->env.rank);
	if (ctx->env.under_launcher)
		watch_parent(&ctx->env);
	ctx->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : ctx->env.timeout_ms;
	if (ctx->timeout_ms > DDPI_TIMEOUT_MAX_MS)
		ctx->timeout_ms = DDPI_TIMEOUT_MAX_MS;
	if (o->quiet)
		ctx->env.quiet = 1;

	rc = ddpi_select_backend(ctx,
				 o->backend != DDP_BACKEND_AUTO ? o->backend : ctx->env.backend,
				 why, sizeof(why));
	if (rc < 0)
		goto fail;
	spec = o->print_ranks		 ? o->print_ranks
	       : ctx->env.print_ranks[0] ? ctx->env.print_ranks
					 : "0";
	if ((rc = ddpi_print_setup(ctx, spec)) < 0)
		goto fail;
	announce(ctx, why);

	int64_t deadline = ddpi_deadline(ctx);
	/* From here on the rank may wait for its peers: the launcher's hang
	 * report tells these waiters from a rank that never came. */
	ddpi_progress_phase(DDPI_PHASE_INIT);
	if (ctx->env.use_store)
		ctx->env.join_gen = joins_begun++;
	if (ctx->env.use_store &&
	    (rc = ddpi_join(&ctx->env, ctx->backend, ctx->timeout_ms, deadline, &sc)) < 0)
		goto fail;
	rc = ddpi_cpu_open(&ctx->env, sc, deadline, &ctx->cpu);
	/* Nothing later needs the store: no connection outlives init. */
	store_client_close(sc);
	if (rc < 0)
		goto fail;
	/* Joined. NCCL's init that may follow works (CUDA's context, its
	 * spinning settle): its CPU time is progress. */
	ddpi_progress_phase(DDPI_PHASE_NONE);
	if (ctx->backend == DDP_BACKEND_CPU) {
		ctx->ops = &ddpi_cpu_ops;
		ctx->be = ctx->cpu;
	} else {
#ifdef DDP_WITH_CUDA
		if ((rc = ddpi_nccl_open(ctx, deadline, &ctx->be)) < 0)
			goto fail;
		ctx->ops = &ddpi_nccl_ops;
#endif
	}
	live_pid = getpid();
	atomic_store(&live_ctx, ctx);
	*out = ctx;
	return 0;
fail:
	ddpi_progress_phase(DDPI_PHASE_NONE);
	rc = ddpi_err_prefix(rc, "ddp_init");
	ddpi_note_failure();
	ddpi_print_restore(ctx);
	ddpi_cpu_close(ctx->cpu);
	pthread_mutex_destroy(&ctx->lock);
	pthread_mutex_destroy(&ctx->mem_lock);
	free(ctx);
	atomic_fetch_sub(&live_contexts, 1);
	return rc;
}

int ddp_finalize(struct ddp_ctx *ctx)
{
	int rc = 0, rc2;
	struct ddp_ctx *live = ctx;

	if (!ctx)
		return 0;
	/* Once: a second call (or a racing one) must not free it again. */
	/* In a forked child nothing is torn down: the segment, the sockets and
	 * the peers are the parent's. */
	if (ctx == atomic_load(&forked_ctx))
		return ddpi_ctx_refuse(ctx, "ddp_finalize");
	if (!atomic_compare_exchange_strong(&live_ctx, &live, NULL))
		return ddpi_err(-EINVAL, "ddp_finalize: not a live context (finalized already?)");
	if (ctx->async) {
		rc = ddpi_async_wait(ctx->async, "ddp_finalize");
		ddpi_async_stop(ctx->async);
		ctx->async = NULL;
	}
	/* Reducers and blocks the program did not release: their memory is the
	 * backend's, which goes now. */
	rc2 = ddpi_reducers_detach(ctx);
	if (rc == 0)
		rc = rc2;
	/* A failure a call returned already is not met again while draining:
	 * only one no call reported (a gradient bucket's) is. */
	if (rc == DDP_EBROKEN)
		rc = 0;
	ddpi_blocks_free(ctx);
	if (ctx->ops && ctx->ops->destroy && ctx->be != ctx->cpu)
		ctx->ops->destroy(ctx->be);
	/* Peers still calling fail now, naming this rank, not at their timeout. */
	ddpi_cpu_finish(ctx->cpu, ctx->refused[0] && ctx->refused_at == ddpi_cpu_ncalls(ctx->cpu)
					  ? ctx->refused
					  : NULL);
	ddpi_cpu_close(ctx->cpu);
	ddpi_print_restore(ctx);
	pthread_mutex_destroy(&ctx->lock);
	pthread_mutex_destroy(&ctx->mem_lock);
	bury(ctx);
	atomic_fetch_sub(&live_contexts, 1);
	return rc;
}

int ddp_rank(const struct ddp_ctx *ctx)
{
	return ddpi_ctx_known(ctx) ? ctx->env.rank : 0;
}

int ddp_world_size(const struct ddp_ctx *ctx)
{
	return ddpi_ctx_known(ctx) ? ctx->env.world : 1;
}

int ddp_local_rank(const struct ddp_ctx *ctx)
{
	return ddpi_ctx_known(ctx) ? ctx->env.local_rank : 0;
}

int ddp_local_world_size(const struct ddp_ctx *ctx)
{
	return ddpi_ctx_known(ctx) ? ctx->env.local_world : 1;
}

int ddp_node_rank(const struct ddp_ctx *ctx)
{
	return ddpi_ctx_known(ctx) ? ctx->env.node : 0;
}

int ddp_num_nodes(const struct ddp_ctx *ctx)
{
	return ddpi_ctx_known(ctx) ? ctx->env.nnodes : 1;
}

enum ddp_backend ddp_backend(const struct ddp_ctx *ctx)
{
	return ddpi_ctx_known(ctx) ? ctx->backend : DDP_BACKEND_CPU;
}

int ddp_device(const struct ddp_ctx *ctx)
{
	return ddpi_ctx_known(ctx) ? ctx->device : -1;
}

int ddp_set_timeout(struct ddp_ctx *ctx, int64_t timeout_ms)
{
	if (!ddpi_ctx_live(ctx))
		return ddpi_ctx_refuse(ctx, "ddp_set_timeout");
	if (timeout_ms <= 0)
		return ddpi_err(-EINVAL, "ddp_set_timeout: the timeout must be positive");
	ctx->timeout_ms = timeout_ms < DDPI_TIMEOUT_MAX_MS ? timeout_ms : DDPI_TIMEOUT_MAX_MS;
	return 0;
}
