/* Unit tests for libddp's public API used wrongly, or from several threads at
 * once, in a world of one (no launcher): each misuse gets its documented error
 * and a clear message, never a crash, a hang or a silent wrong result. What
 * needs several ranks is in tests/e2e/test_ddp_misuse.py and
 * test_ddp_broken.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ddp_internal.h"
#include "util.h"

static struct ddp_ctx *world_of_one(const struct ddp_options *o)
{
	static const char *const launcher[] = {
		"RANK",
		"WORLD_SIZE",
		"LOCAL_RANK",
		"LOCAL_WORLD_SIZE",
		"GROUP_RANK",
		"MASTER_ADDR",
		"MASTER_PORT",
		"TORCHELASTIC_RUN_ID",
		"DDP_TIMEOUT",
		"DDP_STORE",
		"TORCHELASTIC_RESTART_COUNT",
	};
	struct ddp_options d;
	struct ddp_ctx *ctx = NULL;

	for (size_t i = 0; i < sizeof(launcher) / sizeof(launcher[0]); i++)
		unsetenv(launcher[i]);
	if (o)
		d = *o;
	else
		ddp_options_init(&d);
	d.backend = DDP_BACKEND_CPU;
	d.quiet = 1;
	assert_int_equal(ddp_init(&d, &ctx), 0);
	return ctx;
}

/* "Forever" as INT64_MAX: now + timeout overflowed into the past, and every
 * collective that had to wait for a peer failed at once with -ETIMEDOUT. */
static void test_a_huge_timeout_means_a_far_deadline(void **state)
{
	struct ddp_options o;
	struct ddp_ctx *ctx;

	ddp_options_init(&o);
	o.timeout_ms = INT64_MAX;
	ctx = world_of_one(&o);
	assert_true(ddpi_deadline(ctx) > util_now_ms() + 1000LL * 1000 * 1000);
	assert_int_equal(ddp_set_timeout(ctx, INT64_MAX), 0);
	assert_true(ddpi_deadline(ctx) > util_now_ms() + 1000LL * 1000 * 1000);
	assert_int_equal(ddp_set_timeout(ctx, INT64_MAX - 1), 0);
	assert_true(ddpi_deadline(ctx) > util_now_ms());
	assert_int_equal(ddp_set_timeout(ctx, 0), -EINVAL);
	assert_int_equal(ddp_barrier(ctx), 0);
	assert_int_equal(ddp_finalize(ctx), 0);
}

/* A reducer still alive at ddp_finalize: the context's memory goes, the
 * reducer's later calls fail with a message, destroy frees it. They read the
 * freed context (heap-use-after-free). */
static void test_a_reducer_outliving_its_context_is_only_destroyed(void **state)
{
	struct ddp_ctx *ctx = world_of_one(NULL);
	static float w[1000];
	struct ddp_param p[] = {{"w", w, 1000, DDP_FLOAT32}};
	struct ddp_reducer *r;

	assert_int_equal(ddp_reducer_create(ctx, p, 1, NULL, &r), 0);
	assert_non_null(ddp_reducer_grad(r, 0));
	assert_int_equal(ddp_reducer_mark_ready(r, 0), 0);
	assert_int_equal(ddp_finalize(ctx), 0);
	assert_null(ddp_reducer_grad(r, 0));
	assert_non_null(strstr(ddp_errmsg(), "context was finalized"));
	assert_int_equal(ddp_reducer_mark_ready(r, 0), -EINVAL);
	assert_non_null(strstr(ddp_errmsg(), "context was finalized"));
	assert_int_equal(ddp_reducer_finish(r), -EINVAL);
	assert_int_equal(ddp_reducer_zero_grad(r), -EINVAL);
	assert_int_equal(ddp_reducer_set_sync(r, 0), -EINVAL);
	assert_int_equal(ddp_reducer_num_buckets(r), 0); /* its buckets are gone */
	assert_int_equal(ddp_reducer_bucket_info(r, 0, NULL, NULL), -EINVAL);
	assert_non_null(strstr(ddp_errmsg(), "context was finalized"));
	ddp_reducer_destroy(r);
	/* and a new context does not know the old reducer */
	ctx = world_of_one(NULL);
	assert_int_equal(ddp_reducer_create(ctx, p, 1, NULL, &r), 0);
	ddp_reducer_destroy(r);
	assert_int_equal(ddp_finalize(ctx), 0);
}

/* ddp_free of a pointer ddp_alloc did not give, or gave and took back: left
 * alone with a message. It went to free() (glibc: "double free detected",
 * abort) or to free() of an unmapped shared region. */
static void test_ddp_free_refuses_what_is_not_its_block(void **state)
{
	struct ddp_ctx *ctx = world_of_one(NULL);
	char *p = ddp_alloc(ctx, 100), *q = ddp_alloc(ctx, 0), *big = ddp_alloc(ctx, 1 << 20);
	int local;

	assert_non_null(p);
	assert_non_null(q);
	assert_non_null(big);
	memset(p, 1, 100);
	ddp_free(ctx, p);
	ddp_free(ctx, p); /* twice */
	assert_non_null(strstr(ddp_errmsg(), "ddp_free"));
	assert_non_null(strstr(ddp_errmsg(), "freed already"));
	ddp_free(ctx, &local);	 /* never allocated */
	ddp_free(ctx, big + 64); /* inside a block, not its start */
	ddp_free(ctx, NULL);
	ddp_free(NULL, q);
	ddp_free(ctx, q);
	/* big is left for ddp_finalize (LeakSanitizer would say otherwise) */
	assert_int_equal(ddp_finalize(ctx), 0);
}

/* A spawned child's first ddp_spawn runs fn: a DDP_SPAWN_RANK set by hand
 * with a NULL fn is one clear error (exit 1), not a call through NULL. */
static void test_a_spawned_child_with_no_fn_exits_1(void **state)
{
	int status;
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		setenv("DDP_SPAWN_RANK", "0", 1);
		ddp_spawn(NULL, NULL, 1, NULL, NULL);
		_exit(2);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 1);
}

/* ddp_errmsg of an earlier failure, which the next failing call must replace. */
static void stale_message(void)
{
	assert_int_equal(ddp_set_timeout(NULL, 0), -EINVAL);
	assert_non_null(strstr(ddp_errmsg(), "ddp_set_timeout"));
}

#define assert_fails_saying(call, code, text)                  \
	do {                                                   \
		stale_message();                               \
		assert_int_equal((call), (code));              \
		assert_non_null(strstr(ddp_errmsg(), (text))); \
	} while (0)

/* A context used after ddp_finalize freed it: every call takes it as NULL.
 * They read (collectives, getters) or wrote (ddp_set_timeout) freed memory:
 * an all_reduce on one rank returned 0, on two it crashed, and a second
 * ddp_finalize was a double free (glibc abort). */
static void test_a_finalized_context_is_taken_as_null(void **state)
{
	struct ddp_ctx *ctx = world_of_one(NULL);
	static float w[10];
	struct ddp_param p[] = {{"w", w, 10, DDP_FLOAT32}};
	struct ddp_reducer *r = NULL;
	struct ddp_sampler s;

	assert_int_equal(ddp_finalize(ctx), 0);
	assert_fails_saying(ddp_finalize(ctx), -EINVAL, "ddp_finalize: not a live context");
	assert_fails_saying(ddp_all_reduce(ctx, w, 10, DDP_FLOAT32, DDP_SUM), -EINVAL,
			    "all_reduce: no context (NULL or finalized)");
	assert_fails_saying(ddp_broadcast(ctx, w, 40, 0), -EINVAL, "broadcast: no context");
	assert_fails_saying(ddp_all_gather(ctx, w, w, 40), -EINVAL, "all_gather: no context");
	assert_fails_saying(ddp_barrier(ctx), -EINVAL, "barrier: no context");
	assert_fails_saying(ddp_set_timeout(ctx, 1000), -EINVAL, "ddp_set_timeout: no context");
	assert_fails_saying(ddp_reducer_create(ctx, p, 1, NULL, &r), -EINVAL, "reducer:");
	assert_fails_saying(ddp_sampler_init_ctx(&s, ctx, 10, 0, 0, 0), -EINVAL, "sampler:");
	stale_message();
	assert_null(ddp_alloc(ctx, 100));
	assert_non_null(strstr(ddp_errmsg(), "ddp_alloc: no context"));
	ddp_free(ctx, w);
	/* what a NULL context gives */
	assert_int_equal(ddp_rank(ctx), 0);
	assert_int_equal(ddp_world_size(ctx), 1);
	assert_int_equal(ddp_local_rank(ctx), 0);
	assert_int_equal(ddp_local_world_size(ctx), 1);
	assert_int_equal(ddp_node_rank(ctx), 0);
	assert_int_equal(ddp_num_nodes(ctx), 1);
	assert_int_equal(ddp_device(ctx), -1);
	assert_int_equal(ddp_print_enabled(ctx), 1);
	/* and a new context works */
	ctx = world_of_one(NULL);
	assert_int_equal(ddp_barrier(ctx), 0);
	assert_int_equal(ddp_finalize(ctx), 0);
}

/* An option documented to override a DDP_* variable failed ddp_init on a
 * bad value of that variable (DDP_EENV): every variable was checked before
 * the options were looked at. A variable that is used is still checked. */
static void test_an_option_overrides_a_bad_variable(void **state)
{
	static const char *const vars[][2] = {{"DDP_BACKEND", "gpu"},
					      {"DDP_PRINT_RANKS", "bogus"},
					      {"DDP_QUIET", "yes"},
					      {"DDP_TIMEOUT", "0"}};
	struct ddp_options o;
	struct ddp_ctx *ctx;

	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		setenv(vars[i][0], vars[i][1], 1);
	ddp_options_init(&o);
	o.print_ranks = "all";
	o.timeout_ms = 5000;
	ctx = world_of_one(&o); /* backend cpu and quiet set too */
	assert_int_equal(ddp_backend(ctx), DDP_BACKEND_CPU);
	assert_int_equal(ddp_finalize(ctx), 0);
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		struct ddp_ctx *c = NULL;
		setenv(vars[i][0], vars[i][1], 1); /* world_of_one unset DDP_TIMEOUT */
		ddp_options_init(&o);		   /* this one not set: the variable is used */
		o.backend = DDP_BACKEND_CPU;
		o.quiet = 1;
		o.print_ranks = "0";
		o.timeout_ms = 5000;
		if (!strcmp(vars[i][0], "DDP_BACKEND"))
			o.backend = DDP_BACKEND_AUTO;
		else if (!strcmp(vars[i][0], "DDP_PRINT_RANKS"))
			o.print_ranks = NULL;
		else if (!strcmp(vars[i][0], "DDP_QUIET"))
			o.quiet = 0;
		else
			o.timeout_ms = 0;
		assert_int_equal(ddp_init(&o, &c), DDP_EENV);
		assert_non_null(strstr(ddp_errmsg(), vars[i][0]));
		assert_null(c);
	}
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i][0]);
}

/* A negative timeout_ms was taken for 0 (DDP_TIMEOUT, else 600 s), where a
 * -1 meant "forever" (as in ddp_spawn_join) became 600 s without a word. */
static void test_a_negative_timeout_option_is_refused(void **state)
{
	struct ddp_options o;
	struct ddp_ctx *ctx = NULL;

	ddp_options_init(&o);
	o.backend = DDP_BACKEND_CPU;
	o.quiet = 1;
	o.timeout_ms = -1;
	assert_int_equal(ddp_init(&o, &ctx), -EINVAL);
	assert_non_null(strstr(ddp_errmsg(), "timeout_ms=-1 is negative"));
	assert_null(ctx);
	ctx = world_of_one(NULL); /* nothing was left behind */
	assert_int_equal(ddp_finalize(ctx), 0);
}

/* In a forked child: which check failed (its exit status), 0 if none. */
static int forked_child_checks(struct ddp_ctx *ctx, struct ddp_reducer *r, pid_t parent)
{
	char why[160];
	struct ddp_ctx *c2;
	float x = 1;

	snprintf(why, sizeof(why),
		 "used in a forked child (pid %d) of the process that ran ddp_init (pid %d)",
		 (int)getpid(), (int)parent);
	if (ddp_all_reduce(ctx, &x, 1, DDP_FLOAT32, DDP_SUM) != -EINVAL ||
	    !strstr(ddp_errmsg(), "all_reduce: the context is ") || !strstr(ddp_errmsg(), why))
		return 10;
	if (ddp_barrier(ctx) != -EINVAL || ddp_broadcast(ctx, &x, 4, 0) != -EINVAL ||
	    ddp_all_gather(ctx, &x, &x, 4) != -EINVAL || ddp_set_timeout(ctx, 5) != -EINVAL)
		return 11;
	if (ddp_alloc(ctx, 64) || !strstr(ddp_errmsg(), why))
		return 12;
	if (ddp_reducer_mark_ready(r, 0) != -EINVAL || !strstr(ddp_errmsg(), why) ||
	    ddp_reducer_finish(r) != -EINVAL || ddp_reducer_zero_grad(r) != -EINVAL ||
	    ddp_reducer_grad(r, 0) || ddp_reducer_num_buckets(r) != 0)
		return 13;
	/* reading the identity touches nothing shared: the parent's */
	if (ddp_rank(ctx) != 0 || ddp_world_size(ctx) != 1 || ddp_print_enabled(ctx) != 1)
		return 14;
	if (ddp_init(NULL, &c2) != -EBUSY || !strstr(ddp_errmsg(), "forked child"))
		return 15;
	if (ddp_finalize(ctx) != -EINVAL || !strstr(ddp_errmsg(), why))
		return 16;
	ddp_reducer_destroy(r); /* its own memory only */
	return 0;
}

/* fork() after ddp_init: the child's copy of the context named the parent's
 * rank, segment and peers; its collectives ran (with peers, they mixed into
 * the parents' sums) and its ddp_finalize tore down what it shares with the
 * parent. Every call from the child is refused; the parent goes on. */
static void test_a_forked_child_cannot_use_the_context(void **state)
{
	struct ddp_ctx *ctx = world_of_one(NULL);
	static float w[10];
	struct ddp_param p[] = {{"w", w, 10, DDP_FLOAT32}};
	struct ddp_reducer *r;
	pid_t parent = getpid(), pid;
	int status;
	float x = 2;

	assert_int_equal(ddp_reducer_create(ctx, p, 1, NULL, &r), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(forked_child_checks(ctx, r, parent));
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_int_equal(ddp_all_reduce(ctx, &x, 1, DDP_FLOAT32, DDP_SUM), 0);
	assert_true(x == 2);
	assert_int_equal(ddp_reducer_mark_ready(r, 0), 0);
	assert_int_equal(ddp_reducer_finish(r), 0);
	ddp_reducer_destroy(r);
	assert_int_equal(ddp_finalize(ctx), 0);
}

static int return_0(int rank, void *arg)
{
	return 0;
}

/* A failing call leaves a message naming it in ddp_errmsg, not the one of
 * an earlier failure: these returned a bare code. */
static void test_every_failing_call_says_why(void **state)
{
	struct ddp_ctx *ctx = world_of_one(NULL);
	static float w[10];
	struct ddp_param p[] = {{"w", w, 10, DDP_FLOAT32}};
	struct ddp_reducer *r;
	struct ddp_spawn_options so;
	struct ddp_spawn_ctx *sc;
	int status;
	pid_t pid;

	assert_int_equal(ddp_reducer_create(ctx, p, 1, NULL, &r), 0);
	assert_fails_saying(ddp_reducer_bucket_info(r, 1, NULL, NULL), -EINVAL,
			    "ddp_reducer_bucket_info: bucket 1 of 1");
	assert_fails_saying(ddp_reducer_bucket_info(NULL, 0, NULL, NULL), -EINVAL,
			    "ddp_reducer_bucket_info");
	stale_message();
	assert_null(ddp_reducer_grad(r, 1));
	assert_non_null(strstr(ddp_errmsg(), "ddp_reducer_grad: parameter 1 of 1"));
	stale_message();
	assert_null(ddp_reducer_grad(NULL, 0));
	assert_non_null(strstr(ddp_errmsg(), "no reducer"));
	ddp_reducer_destroy(r);
	assert_int_equal(ddp_finalize(ctx), 0);

	assert_fails_saying(ddp_randperm(3, 0, NULL), -EINVAL, "ddp_randperm");

	assert_fails_saying(ddp_spawn_failure(NULL, NULL, NULL, NULL), -ENOENT,
			    "ddp_spawn_failure");
	ddp_spawn_options_init(&so);
	so.join = 0;
	assert_int_equal(ddp_spawn(return_0, NULL, 1, &so, &sc), 0);
	assert_int_equal(ddp_spawn_join(sc, -1), 1);
	assert_fails_saying(ddp_spawn_failure(sc, NULL, NULL, NULL), -ENOENT,
			    "ddp_spawn_failure: no process failed");
	ddp_spawn_free(sc);

	setenv("TORCHELASTIC_ERROR_FILE", "/nonexistent-ddp-dir/error.json", 1);
	assert_fails_saying(ddp_record_error("x"), -ENOENT,
			    "ddp_record_error: cannot write TORCHELASTIC_ERROR_FILE="
			    "/nonexistent-ddp-dir/error.json");
	unsetenv("TORCHELASTIC_ERROR_FILE");

	pid = fork(); /* with no stdout */
	assert_true(pid >= 0);
	if (pid == 0) {
		close(STDOUT_FILENO);
		stale_message();
		_exit(ddp_print_force(NULL, "x\n") == -EBADF &&
				      strstr(ddp_errmsg(), "ddp_print_force: cannot write")
			      ? 0
			      : 1);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

#define CHURN_THREADS 4
#define CHURN_ROUNDS  20000
#define CHURN_KEEP    300 /* reducers each thread keeps: a longer list to walk */

static pthread_barrier_t churn_start;

struct churn {
	struct ddp_ctx *ctx;
	int allocator; /* 1: ddp_alloc/ddp_free instead of reducers */
	struct ddp_reducer *kept[CHURN_KEEP];
	int failed;
};

static void *churn_main(void *arg)
{
	struct churn *c = arg;
	static float w[64];
	struct ddp_param p[] = {{"w", w, 64, DDP_FLOAT32}};
	struct ddp_reducer *r;
	int nkept = 0;

	pthread_barrier_wait(&churn_start); /* all at once */
	for (int i = 0; i < CHURN_ROUNDS && !c->failed; i++) {
		if (c->allocator) {
			void *m = ddp_alloc(c->ctx, 256);
			c->failed = !m;
			ddp_free(c->ctx, m);
		} else if (ddp_reducer_create(c->ctx, p, 1, NULL, &r) < 0) {
			c->failed = 1;
		} else if (i % 8 == 0 && nkept < CHURN_KEEP) {
			c->kept[nkept++] = r;
		} else {
			ddp_reducer_destroy(r);
		}
	}
	return NULL;
}

/* Reducers made and destroyed on several threads at once, beside ddp_alloc
 * and ddp_free: the context's list of reducers changed without a lock and
 * lost some (ddp_finalize left them attached, their later calls read the
 * freed context) or kept destroyed ones (read after free). */
static void test_reducers_come_and_go_on_several_threads(void **state)
{
	static struct churn c[CHURN_THREADS + 1];
	struct ddp_ctx *ctx = world_of_one(NULL);
	pthread_t t[CHURN_THREADS + 1];

	memset(c, 0, sizeof(c));
	assert_int_equal(pthread_barrier_init(&churn_start, NULL, CHURN_THREADS + 1), 0);
	for (int i = 0; i <= CHURN_THREADS; i++) {
		c[i].ctx = ctx;
		c[i].allocator = i == CHURN_THREADS;
		assert_int_equal(pthread_create(&t[i], NULL, churn_main, &c[i]), 0);
	}
	for (int i = 0; i <= CHURN_THREADS; i++) {
		assert_int_equal(pthread_join(t[i], NULL), 0);
		assert_false(c[i].failed);
	}
	pthread_barrier_destroy(&churn_start);
	assert_int_equal(ddp_finalize(ctx), 0);
	/* Every reducer still alive was detached: its gradients went with ctx. */
	for (int i = 0; i < CHURN_THREADS; i++)
		for (int k = 0; k < CHURN_KEEP && c[i].kept[k]; k++) {
			assert_null(ddp_reducer_grad(c[i].kept[k], 0));
			ddp_reducer_destroy(c[i].kept[k]);
		}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_a_huge_timeout_means_a_far_deadline),
		cmocka_unit_test(test_a_reducer_outliving_its_context_is_only_destroyed),
		cmocka_unit_test(test_ddp_free_refuses_what_is_not_its_block),
		cmocka_unit_test(test_a_finalized_context_is_taken_as_null),
		cmocka_unit_test(test_a_forked_child_cannot_use_the_context),
		cmocka_unit_test(test_an_option_overrides_a_bad_variable),
		cmocka_unit_test(test_a_negative_timeout_option_is_refused),
		cmocka_unit_test(test_a_spawned_child_with_no_fn_exits_1),
		cmocka_unit_test(test_every_failing_call_says_why),
		cmocka_unit_test(test_reducers_come_and_go_on_several_threads),
	};
	return cmocka_run_group_tests_name("ddp_api", tests, NULL, NULL);
}
