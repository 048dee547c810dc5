/* store_lookup: see store_lookup.h. The loop and the thread each hold a reference;
 * the thread signals the loop (uv_async_send) only under the mutex and
 * only while not cancelled, and the loop cancels under the same mutex
 * before it closes the async handle, so no send reaches a closed handle. */
#include "store_lookup.h"

#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

struct store_lookup {
	uv_async_t async;
	pthread_mutex_t mu;
	int refs; /* the thread's, and the loop's until the handle is closed */
	bool cancelled;
	void (*done)(void *arg, const struct store_lookup_result *r);
	void *arg;
	char host[256];
	struct store_lookup_result r; /* the thread's until it signals */
};

static void unref(struct store_lookup *l)
{
	bool last;

	pthread_mutex_lock(&l->mu);
	last = --l->refs == 0;
	pthread_mutex_unlock(&l->mu);
	if (last) {
		pthread_mutex_destroy(&l->mu);
		free(l);
	}
}

static void on_closed(uv_handle_t *h)
{
	unref(h->data);
}

static void on_answer(uv_async_t *h)
{
	struct store_lookup *l = h->data;
	struct store_lookup_result r;

	pthread_mutex_lock(&l->mu); /* the thread's writes happened before */
	r = l->r;
	pthread_mutex_unlock(&l->mu);
	uv_close((uv_handle_t *)h, on_closed);
	if (!l->cancelled)
		l->done(l->arg, &r);
}

static bool seen(const struct store_lookup_result *r, const struct addrinfo *p)
{
	for (int i = 0; i < r->n; i++)
		if (memcmp(&r->addr[i], p->ai_addr, p->ai_addrlen) == 0)
			return true;
	return false;
}

/* getaddrinfo into r: flags AI_NUMERICHOST answers without a query. */
static void resolve(const char *host, int flags, struct store_lookup_result *r)
{
	struct addrinfo hints, *ai = NULL, *p;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = flags;
	r->n = 0;
	r->gai = getaddrinfo(host, NULL, &hints, &ai);
	for (p = r->gai == 0 ? ai : NULL; p != NULL && r->n < STORE_LOOKUP_MAX; p = p->ai_next)
		if ((p->ai_family == AF_INET || p->ai_family == AF_INET6) &&
		    p->ai_addrlen <= sizeof(r->addr[0]) && !seen(r, p))
			memcpy(&r->addr[r->n++], p->ai_addr, p->ai_addrlen);
	if (ai != NULL)
		freeaddrinfo(ai);
	if (r->gai == 0 && r->n == 0)
		r->gai = EAI_NONAME;
}

static void *run(void *arg)
{
	struct store_lookup *l = arg;

	resolve(l->host, 0, &l->r);
	pthread_mutex_lock(&l->mu);
	if (!l->cancelled)
		uv_async_send(&l->async);
	pthread_mutex_unlock(&l->mu);
	unref(l);
	return NULL;
}

int store_lookup_start(uv_loop_t *loop, const char *host,
		       void (*done)(void *arg, const struct store_lookup_result *r), void *arg,
		       struct store_lookup **out)
{
	struct store_lookup *l;
	pthread_attr_t attr;
	pthread_t t;
	sigset_t all, old;
	int rc;

	if (strlen(host) >= sizeof(l->host))
		return -ENAMETOOLONG;
	l = calloc(1, sizeof(*l));
	if (l == NULL)
		return -ENOMEM;
	strcpy(l->host, host);
	l->done = done;
	l->arg = arg;
	rc = uv_async_init(loop, &l->async, on_answer);
	if (rc != 0) {
		free(l);
		return rc;
	}
	l->async.data = l;
	pthread_mutex_init(&l->mu, NULL);
	/* An address needs no thread: answered from the loop's next turn. */
	resolve(l->host, AI_NUMERICHOST, &l->r);
	if (l->r.gai == 0) {
		l->refs = 1;
		uv_async_send(&l->async);
		*out = l;
		return 0;
	}
	memset(&l->r, 0, sizeof(l->r));
	l->refs = 2;
	/* Signals are the loop's: the thread starts with all of them blocked. */
	sigfillset(&all);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&t, &attr, run, l);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	if (rc != 0) {
		l->refs = 1;
		uv_close((uv_handle_t *)&l->async, on_closed);
		return -rc;
	}
	*out = l;
	return 0;
}

void store_lookup_cancel(struct store_lookup **lp)
{
	struct store_lookup *l = *lp;

	if (l == NULL)
		return;
	*lp = NULL;
	pthread_mutex_lock(&l->mu);
	l->cancelled = true;
	pthread_mutex_unlock(&l->mu);
	uv_close((uv_handle_t *)&l->async, on_closed);
}
