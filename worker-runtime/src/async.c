/* async: the communication thread that reduces gradient buckets in the
 * background for backends without streams (cpu). Buckets run strictly in
 * submission order, which the reducer makes the same on every rank. After the
 * first failure the remaining queue is dropped and the context is marked
 * broken; the program's next call that looks returns the error
 * (ddpi_ctx_check).
 *
 * Each bucket's all_reduce carries the context's timeout itself, so a wait
 * for several of them bounds progress, not their sum: buckets that together
 * take longer than the timeout, each well inside it, are a slow job, not a
 * failed one. A bucket whose wait gave up may still be in flight: its memory
 * is freed only once the thread is done with it (ddpi_async_free). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ddp_internal.h"
#include "progress.h"
#include "util.h"

struct job {
	void *buf;
	size_t count;
	enum ddp_dtype dt;
	enum ddp_op op;
};

struct ddpi_async {
	struct ddp_ctx *ctx;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct job *q;
	size_t cap, head, tail; /* ring buffer of jobs */
	size_t running;		/* jobs submitted and not finished */
	int err;		/* a job failed: the context is broken, the rest is dropped */
	int stop;
	int gave_up;  /* a wait timed out: later ones do not wait again */
	int stall_ms; /* test hook DDP_TEST_BUCKET_STALL_MS: a job stalls in flight */
	void **later; /* buffers given up while a job ran: freed after the join */
	size_t nlater, caplater;
	int threaded; /* 0: no thread, the queue runs in ddpi_async_wait */
};

__thread int ddpi_in_background;

/* Runs one queued reduction under the context lock. */
static int run_job(struct ddpi_async *a, const struct job *j)
{
	struct ddp_ctx *ctx = a->ctx;
	int rc;

	pthread_mutex_lock(&ctx->lock);
	ddpi_progress_enter(DDPI_PROG_BUCKET);
	if (ctx->broken) {
		rc = DDP_EBROKEN;
	} else {
		if (a->stall_ms > 0)
			util_sleep_ms(a->stall_ms); /* a thread the kernel does not run */
		rc = ctx->ops->all_reduce(ctx->be, j->buf, j->count, j->dt, j->op,
					  ddpi_deadline(ctx));
	}
	if (rc < 0)
		ddpi_ctx_fail_later(ctx, ddpi_err_prefix(rc, "gradient bucket all_reduce"));
	ddpi_progress_leave();
	pthread_mutex_unlock(&ctx->lock);
	return rc;
}

/* Takes the head job (a->mu held), runs it unlocked, records the outcome. */
static void run_head(struct ddpi_async *a)
{
	struct job j = a->q[a->head % a->cap];
	int skip = a->err != 0, rc = 0;

	pthread_mutex_unlock(&a->mu);
	if (!skip)
		rc = run_job(a, &j);
	pthread_mutex_lock(&a->mu);
	if (rc < 0 && !a->err)
		a->err = rc;
	a->head++;
	a->running--;
	pthread_cond_broadcast(&a->cv);
}

static void *comm_main(void *arg)
{
	struct ddpi_async *a = arg;

	ddpi_in_background = 1;
	pthread_mutex_lock(&a->mu);
	for (;;) {
		while (a->head == a->tail && !a->stop)
			pthread_cond_wait(&a->cv, &a->mu);
		if (a->head == a->tail && a->stop)
			break;
		run_head(a);
	}
	pthread_mutex_unlock(&a->mu);
	return NULL;
}

int ddpi_async_start(struct ddp_ctx *ctx, int threaded, struct ddpi_async **out)
{
	struct ddpi_async *a = calloc(1, sizeof(*a));
	int rc;

	if (!a)
		return ddpi_err(-ENOMEM, "out of memory for the communication thread");
	a->ctx = ctx;
	a->cap = 64;
	a->threaded = threaded;
	const char *t = getenv("DDP_TEST_BUCKET_STALL_MS");
	a->stall_ms = t ? atoi(t) : 0;
	a->q = calloc(a->cap, sizeof(*a->q));
	if (!a->q) {
		free(a);
		return ddpi_err(-ENOMEM, "out of memory for the communication thread");
	}
	pthread_mutex_init(&a->mu, NULL);
	pthread_cond_init(&a->cv, NULL);
	if (threaded && (rc = pthread_create(&a->thread, NULL, comm_main, a)) != 0) {
		free(a->q);
		free(a);
		return ddpi_err(-rc, "cannot start the communication thread: %s", strerror(rc));
	}
	*out = a;
	return 0;
}

int ddpi_async_submit(struct ddpi_async *a, void *buf, size_t count, enum ddp_dtype dt,
		      enum ddp_op op)
{
	pthread_mutex_lock(&a->mu);
	if (a->tail - a->head == a->cap) {
		/* Grow the ring, keeping order. */
		struct job *nq = calloc(a->cap * 2, sizeof(*nq));
		if (!nq) {
			pthread_mutex_unlock(&a->mu);
			return ddpi_err(-ENOMEM, "out of memory queueing a gradient bucket");
		}
		for (size_t i = a->head; i < a->tail; i++)
			nq[i % (a->cap * 2)] = a->q[i % a->cap];
		free(a->q);
		a->q = nq;
		a->cap *= 2;
	}
	a->q[a->tail % a->cap] = (struct job){buf, count, dt, op};
	a->tail++;
	a->running++;
	pthread_cond_broadcast(&a->cv);
	pthread_mutex_unlock(&a->mu);
	return 0;
}

/* A bucket's own all_reduce fails at the timeout after it began, which is
 * after the last one finished: the wait allows that much and this more, so
 * that the bucket's error, which says who did not come, is what the caller
 * sees. */
#define ASYNC_GRACE_MS 2000

int ddpi_async_wait(struct ddpi_async *a, const char *what)
{
	struct ddp_ctx *ctx = a->ctx;
	size_t seen;
	int64_t until;
	int failed, rc;

	pthread_mutex_lock(&a->mu);
	/* Without a thread, the queue runs here, in order. */
	while (!a->threaded && a->head != a->tail)
		run_head(a);
	seen = a->head;
	if (a->gave_up)
		goto out; /* waited the timeout once: the running job is left to end */
	until = util_now_ms() + ctx->timeout_ms + ASYNC_GRACE_MS;
	while (a->running) {
		/* Only guards against a thread that cannot be scheduled at all. */
		struct timespec ts;
		int64_t now = util_now_ms();
		if (a->head != seen) {
			seen = a->head;
			until = now + ctx->timeout_ms + ASYNC_GRACE_MS;
		}
		if (now >= until) {
			size_t left = a->running;
			if (!a->err)
				a->err = -ETIMEDOUT; /* what is queued behind it is dropped */
			a->gave_up = 1;
			pthread_mutex_unlock(&a->mu);
			rc = ddpi_err(
				-ETIMEDOUT,
				"%s: timed out waiting for gradient buckets: the communication "
				"thread finished none of the last %zu in %.1f s",
				what ? what : "reducer", left,
				(double)(ctx->timeout_ms + ASYNC_GRACE_MS) / 1000);
			if (what)
				return ddpi_ctx_fail(ctx, rc);
			ddpi_ctx_fail_later(ctx, rc);
			return DDP_EBROKEN;
		}
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 1;
		pthread_cond_timedwait(&a->cv, &a->mu, &ts);
	}
out:
	failed = a->err < 0;
	pthread_mutex_unlock(&a->mu);
	if (!failed)
		return 0;
	return what ? ddpi_ctx_check(ctx, what) : DDP_EBROKEN;
}

void ddpi_async_free(struct ddpi_async *a, void *buf)
{
	struct ddp_ctx *ctx = a->ctx;

	pthread_mutex_lock(&a->mu);
	if (a->running && a->nlater == a->caplater) {
		size_t cap = a->caplater ? a->caplater * 2 : 16;
		void **n = realloc(a->later, cap * sizeof(*n));
		if (!n) {
			/* Kept, not freed under a running job: a leak is the lesser harm. */
			pthread_mutex_unlock(&a->mu);
			return;
		}
		a->later = n;
		a->caplater = cap;
	}
	if (a->running) {
		a->later[a->nlater++] = buf;
		pthread_mutex_unlock(&a->mu);
		return;
	}
	pthread_mutex_unlock(&a->mu);
	ctx->ops->mem_free(ctx->be, buf);
}

void ddpi_async_stop(struct ddpi_async *a)
{
	if (!a)
		return;
	pthread_mutex_lock(&a->mu);
	a->stop = 1;
	pthread_cond_broadcast(&a->cv);
	pthread_mutex_unlock(&a->mu);
	if (a->threaded)
		pthread_join(a->thread, NULL);
	for (size_t i = 0; i < a->nlater; i++)
		a->ctx->ops->mem_free(a->ctx->be, a->later[i]);
	free(a->later);
	pthread_mutex_destroy(&a->mu);
	pthread_cond_destroy(&a->cv);
	free(a->q);
	free(a);
}
