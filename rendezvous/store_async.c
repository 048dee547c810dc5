/* store_async: non-blocking store client on a libuv loop (see store_async.h).
 *
 * Operations wait in sendq until the connection is up, then travel in order
 * into replyq, whose head owns the next reply bytes; one without a reply
 * completes at the head once written, so callbacks keep submission order
 * (libuv reports writes in order, so a count of completed writes says which
 * operations are out). A WAIT holds sendq until it completes (its reply may come after
 * replies to later requests otherwise). Connecting is a small state machine:
 * resolve, try each address, handshake (VALIDATE + PING), on failure retry
 * after a backoff until the deadline. */
#include "store_async.h"

#include <errno.h>
#include <netdb.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_addr.h"
#include "util.h"
#include "store_async_int.h"

/* ---- operations ------------------------------------------------------------------ */

struct aop *store_async_pop(struct aop **head, struct aop **tail)
{
	struct aop *op = *head;

	if (op) {
		*head = op->next;
		if (*head == NULL)
			*tail = NULL;
		op->next = NULL;
	}
	return op;
}

static void push(struct aop **head, struct aop **tail, struct aop *op)
{
	op->next = NULL;
	if (*tail)
		(*tail)->next = op;
	else
		*head = op;
	*tail = op;
}

/* Fail every queued operation. A callback may close the handle meanwhile;
 * the rest are then cancelled by the close. */
static void fail_all(struct store_async *a, int status)
{
	struct aop *op;

	while (a->state != AS_CLOSING && ((op = store_async_pop(&a->replyq, &a->replyq_tail)) ||
					  (op = store_async_pop(&a->sendq, &a->sendq_tail)))) {
		if (op == a->cur_wait)
			a->cur_wait = NULL;
		if (op->internal)
			store_async_op_free(op);
		else
			store_async_op_fail(op, status);
	}
}

/* ---- handles ------------------------------------------------------------------------ */

static void maybe_finish_close(struct store_async *a)
{
	struct aop *op;

	if (a->state != AS_CLOSING || a->nclosing > 0)
		return;
	while ((op = store_async_pop(&a->replyq, &a->replyq_tail)) ||
	       (op = store_async_pop(&a->sendq, &a->sendq_tail))) {
		if (op->internal)
			store_async_op_free(op);
		else
			store_async_op_fail(op, -ECANCELED);
	}
	free(a->rbuf);
	free(a->host);
	free(a->prefix);
	if (a->done) {
		void (*done)(void *) = a->done;
		void *arg = a->done_arg;

		free(a);
		done(arg);
	} else {
		free(a);
	}
}

static void on_tcp_closed(uv_handle_t *h)
{
	struct store_async *a = h->data;

	free(h);
	a->nclosing--;
	maybe_finish_close(a);
}

static void on_timer_closed(uv_handle_t *h)
{
	struct store_async *a = h->data;

	a->nclosing--;
	maybe_finish_close(a);
}

/* Whether t's connection reached itself (store_sock_is_self: then it is
 * set to close with a reset). */
static bool tcp_is_self(uv_tcp_t *t)
{
	uv_os_fd_t fd;

	return uv_fileno((uv_handle_t *)t, &fd) == 0 && store_sock_is_self(fd);
}

static void close_tcp(struct store_async *a)
{
	if (a->tcp == NULL)
		return;
	/* An attempt that reached itself may end here before on_connected
	 * looks at it (the deadline, or a close, came first). */
	tcp_is_self(a->tcp);
	a->tcp_up = false;
	a->nclosing++;
	uv_close((uv_handle_t *)a->tcp, on_tcp_closed);
	a->tcp = NULL;
	a->rlen = 0;
}

/* ---- sending ------------------------------------------------------------------------ */

static void lost(struct store_async *a, int reason);

static void process(struct store_async *a);

static void on_write(uv_write_t *req, int status)
{
	struct wreq *w = (struct wreq *)req;
	struct store_async *a = w->a;
	bool counted = w->op_write;

	free(w->data);
	free(w);
	if (status < 0) {
		if (a->state == AS_READY)
			lost(a, status);
		return;
	}
	if (counted) {
		a->nwritten++;
		process(a); /* a written SET may now complete */
	}
}

static int write_bytes(struct store_async *a, struct store_buf *b, bool op_write)
{
	struct wreq *w = malloc(sizeof(*w));
	uv_buf_t ub;
	int rc;

	if (w == NULL)
		return -ENOMEM;
	w->a = a;
	w->op_write = op_write;
	w->data = b->p;
	ub = uv_buf_init((char *)b->p, (unsigned)b->len);
	store_buf_init(b); /* the bytes travel with the request */
	rc = uv_write(&w->req, (uv_stream_t *)a->tcp, &ub, 1, on_write);
	if (rc < 0) {
		free(w->data);
		free(w);
	}
	return rc;
}

static void on_wait_timer(uv_timer_t *t);

static void send_op(struct store_async *a, struct aop *op)
{
	int rc;

	op->seq = a->nsent++;
	push(&a->replyq, &a->replyq_tail, op);
	if (op->op == STORE_OP_WAIT || op->op == STORE_OP_BARRIER) {
		a->cur_wait = op;
		if (op->timeout_ms > 0)
			uv_timer_start(&a->wait_timer, on_wait_timer, (uint64_t)op->timeout_ms, 0);
	}
	rc = write_bytes(a, &op->req, true);
	if (rc < 0)
		lost(a, rc);
}

/* Send what may go now: everything up to and including a WAIT (or BARRIER). */
static void pump(struct store_async *a)
{
	while (a->state == AS_READY && a->cur_wait == NULL && a->sendq)
		send_op(a, store_async_pop(&a->sendq, &a->sendq_tail));
}

static void on_wait_timer(uv_timer_t *t)
{
	struct store_async *a = t->data;
	struct store_msg cancel = {.op = STORE_OP_CANCEL_WAIT};
	struct store_buf b;

	if (a->cur_wait == NULL || a->cur_wait->cancel_sent || a->state != AS_READY)
		return;
	a->cur_wait->cancel_sent = true;
	store_buf_init(&b);
	if (store_encode(&b, STORE_DIALECT_V2, NULL, &cancel) < 0 ||
	    write_bytes(a, &b, false) < 0) {
		store_buf_free(&b);
		lost(a, -ENOMEM);
	}
}

/* ---- connecting ------------------------------------------------------------------------ */

static void start_attempt(struct store_async *a);
static void try_next_addr(struct store_async *a);

static void connect_failed(struct store_async *a, int err)
{
	a->answerless = a->tcp_up;
	a->state = AS_LOST;
	uv_timer_stop(&a->retry_timer);
	uv_timer_stop(&a->deadline_timer);
	close_tcp(a);
	fail_all(a, err);
	if (a->state != AS_CLOSING && a->cbs.on_connect)
		a->cbs.on_connect(a, err, a->cbs.arg);
}

static void on_retry(uv_timer_t *t)
{
	start_attempt(t->data);
}

/* This attempt failed: retry after a backoff, or give up at the deadline. */
static void attempt_failed(struct store_async *a, int err)
{
	struct aop *op;
	int64_t left;

	a->last_err = err;
	close_tcp(a);
	/* Drop the handshake's PING: the next attempt sends its own. */
	while (a->replyq && a->replyq->internal) {
		op = store_async_pop(&a->replyq, &a->replyq_tail);
		store_async_op_free(op);
	}
	left = a->deadline - util_now_ms();
	if (left <= 0) {
		connect_failed(a, err);
		return;
	}
	/* Tries go on until the deadline timer ends them: within the last
	 * backoff step they halve what is left, so that a store that comes up
	 * in the last second is still found (and one that refuses is still
	 * named by its refusal when the deadline comes). */
	if (a->backoff < left)
		uv_timer_start(&a->retry_timer, on_retry, (uint64_t)a->backoff, 0);
	else if (left >= 2)
		uv_timer_start(&a->retry_timer, on_retry, (uint64_t)(left / 2), 0);
	a->backoff = a->backoff * 2 > 1000 ? 1000 : a->backoff * 2;
}

static void on_deadline(uv_timer_t *t)
{
	struct store_async *a = t->data;
	int err = a->last_err ? a->last_err : -ETIMEDOUT;

	if (a->state != AS_CONNECTING)
		return;
	store_lookup_cancel(&a->lookup);
	/* An attempt that has waited STORE_ANSWER_MS got no answer: what an
	 * earlier one said (a refusal) no longer holds. */
	if (a->tcp && util_now_ms() - a->attempt_ms >= STORE_ANSWER_MS)
		err = -ETIMEDOUT;
	connect_failed(a, err);
}

/* The address being tried has not answered for STORE_ADDR_TRY_MS and another
 * of the name follows: go on to it. */
static void on_addr_silent(uv_timer_t *t)
{
	struct store_async *a = t->data;

	if (a->state != AS_CONNECTING || !a->tcp || a->addr_i >= a->addrs.n)
		return;
	a->last_err = -ETIMEDOUT;
	close_tcp(a);
	a->addr_i++;
	try_next_addr(a);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	struct store_async *a = h->data;

	if (a->rcap - a->rlen < 65536) {
		size_t cap = a->rcap ? a->rcap * 2 : 65536;
		uint8_t *n;

		while (cap - a->rlen < 65536)
			cap *= 2;
		n = realloc(a->rbuf, cap);
		if (n == NULL) {
			*buf = uv_buf_init(NULL, 0);
			return;
		}
		a->rbuf = n;
		a->rcap = cap;
	}
	*buf = uv_buf_init((char *)a->rbuf + a->rlen, (unsigned)(a->rcap - a->rlen));
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
	struct store_async *a = st->data;

	if (a->tcp != (uv_tcp_t *)st)
		return; /* a closed attempt */
	if (nread < 0) {
		int err = nread == UV_EOF ? -ECONNRESET : (int)nread;

		if (a->state == AS_CONNECTING)
			attempt_failed(a, err);
		else if (a->state == AS_READY)
			lost(a, err);
		return;
	}
	a->rlen += (size_t)nread;
	process(a);
}

static void on_connected(uv_connect_t *req, int status)
{
	struct store_async *a = req->data;
	struct store_msg hello[] = {{.op = STORE_OP_VALIDATE}, {.op = STORE_OP_PING}};
	struct aop *ping;
	uv_os_fd_t fd;
	int rc;
	bool stale = a->state != AS_CONNECTING || req->handle != (uv_stream_t *)a->tcp;

	free(req);
	if (stale)
		return;			/* closed meanwhile */
	uv_timer_stop(&a->retry_timer); /* on_addr_silent's */
	if (status == 0 && tcp_is_self(a->tcp))
		status = -ECONNREFUSED; /* nothing listens there */
	if (status < 0) {
		a->last_err = status;
		close_tcp(a);
		a->addr_i++;
		try_next_addr(a);
		return;
	}
	a->addr_i = a->addrs.n = 0;
	a->tcp_up = true;
	uv_tcp_nodelay(a->tcp, 1);
	/* A connection to a dead host must end (and fail its ops). */
	if (uv_fileno((uv_handle_t *)a->tcp, &fd) == 0)
		store_sock_keepalive(fd, 15);
	ping = calloc(1, sizeof(*ping));
	if (ping == NULL) {
		attempt_failed(a, -ENOMEM);
		return;
	}
	ping->internal = true;
	ping->op = STORE_OP_PING;
	ping->reply = STORE_REPLY_U32;
	ping->nonce = ++a->nonce;
	hello[1].num = ping->nonce;
	store_buf_init(&ping->req);
	/* These can only run out of memory, which req.err keeps for below. */
	store_encode(&ping->req, STORE_DIALECT_V2, NULL, &hello[0]);
	store_encode(&ping->req, STORE_DIALECT_V2, NULL, &hello[1]);
	/* The handshake answer comes before any other reply. */
	ping->next = a->replyq;
	a->replyq = ping;
	if (a->replyq_tail == NULL)
		a->replyq_tail = ping;
	rc = uv_read_start((uv_stream_t *)a->tcp, on_alloc, on_read);
	if (rc == 0)
		rc = ping->req.err ? ping->req.err : write_bytes(a, &ping->req, false);
	if (rc < 0)
		attempt_failed(a, rc);
}

static void try_next_addr(struct store_async *a)
{
	uv_connect_t *creq;
	struct sockaddr_storage to;

	if (a->addr_i >= a->addrs.n) {
		a->addr_i = a->addrs.n = 0;
		attempt_failed(a, a->last_err ? a->last_err : -ECONNREFUSED);
		return;
	}
	to = a->addrs.addr[a->addr_i];
	if (to.ss_family == AF_INET)
		((struct sockaddr_in *)&to)->sin_port = htons((uint16_t)a->port);
	else
		((struct sockaddr_in6 *)&to)->sin6_port = htons((uint16_t)a->port);
	a->tcp = malloc(sizeof(*a->tcp));
	if (a->tcp == NULL) {
		attempt_failed(a, -ENOMEM);
		return;
	}
	uv_tcp_init(a->loop, a->tcp);
	a->tcp->data = a;
	/* A request of its own per attempt: one given up on (on_addr_silent)
	 * is still in flight while the next starts, until its callback. */
	creq = malloc(sizeof(*creq));
	if (creq)
		creq->data = a;
	else
		a->last_err = -ENOMEM;
	if (!creq || uv_tcp_connect(creq, a->tcp, (struct sockaddr *)&to, on_connected) < 0) {
		free(creq);
		close_tcp(a);
		a->addr_i++;
		try_next_addr(a);
		return;
	}
	a->attempt_ms = util_now_ms();
	/* The retry timer is idle while an attempt runs. */
	if (a->addr_i + 1 < a->addrs.n)
		uv_timer_start(&a->retry_timer, on_addr_silent, STORE_ADDR_TRY_MS, 0);
}

/* Closing and the deadline cancel a lookup under way: this runs only while
 * connecting. */
static void on_resolved(void *arg, const struct store_lookup_result *r)
{
	struct store_async *a = arg;

	a->lookup = NULL;
	if (r->gai != 0) {
		attempt_failed(a, -EHOSTUNREACH);
		return;
	}
	a->addrs = *r;
	a->addr_i = 0;
	try_next_addr(a);
}

static void start_attempt(struct store_async *a)
{
	if (store_lookup_start(a->loop, a->host, on_resolved, a, &a->lookup) != 0)
		attempt_failed(a, -EHOSTUNREACH);
}

/* ---- replies ---------------------------------------------------------------------------- */

static void lost(struct store_async *a, int reason)
{
	if (a->state == AS_CONNECTING) {
		attempt_failed(a, reason);
		return;
	}
	if (a->state != AS_READY)
		return;
	a->state = AS_LOST;
	uv_timer_stop(&a->wait_timer);
	close_tcp(a);
	fail_all(a, reason);
	if (a->state == AS_LOST && a->cbs.on_lost)
		a->cbs.on_lost(a, reason, a->cbs.arg);
}

static void process(struct store_async *a)
{
	size_t pos = 0;

	while (a->replyq && (a->state == AS_READY || a->state == AS_CONNECTING)) {
		struct aop *op = a->replyq;
		long l;

		if (op->reply == STORE_REPLY_NONE) {
			if (op->seq >= a->nwritten)
				break; /* not out yet */
			store_async_op_fail(store_async_pop(&a->replyq, &a->replyq_tail), 0);
			continue;
		}
		l = store_reply_len(op->reply, op->n, a->rbuf + pos, a->rlen - pos,
				    STORE_MAX_REPLY);
		if (l < 0) {
			lost(a, -EPROTO);
			return;
		}
		if (l == 0)
			break; /* need more bytes */
		if (!store_async_deliver(a, a->rbuf + pos)) {
			lost(a, -EPROTO);
			return;
		}
		pos += (size_t)l;
	}
	if (a->state == AS_CLOSING || a->state == AS_LOST)
		return;
	if (pos > 0) {
		memmove(a->rbuf, a->rbuf + pos, a->rlen - pos);
		a->rlen -= pos;
	}
	pump(a);
}

/* ---- public ----------------------------------------------------------------------------- */

int store_async_connect(uv_loop_t *loop, const char *host, int port, int64_t connect_timeout_ms,
			const struct store_async_callbacks *cbs, struct store_async **out)
{
	struct store_async *a;

	if (host == NULL || port <= 0 || port > UTIL_PORT_MAX)
		return -EINVAL;
	a = calloc(1, sizeof(*a));
	if (a == NULL)
		return -ENOMEM;
	a->host = strdup(host);
	if (a->host == NULL) {
		free(a);
		return -ENOMEM;
	}
	a->loop = loop;
	a->port = port;
	a->backoff = 10;
	a->nonce = (uint32_t)util_now_ms();
	if (cbs)
		a->cbs = *cbs;
	/* The deadline timer counts from the loop's time: bring it to now, or
	 * a loop that has been idle a while ends the attempts early. */
	uv_update_time(loop);
	a->deadline = util_now_ms() + (connect_timeout_ms > 0 ? connect_timeout_ms : 0);
	uv_timer_init(loop, &a->retry_timer);
	uv_timer_init(loop, &a->deadline_timer);
	uv_timer_init(loop, &a->wait_timer);
	a->retry_timer.data = a->deadline_timer.data = a->wait_timer.data = a;
	uv_timer_start(
		&a->deadline_timer, on_deadline,
		(uint64_t)(connect_timeout_ms > 0 ? connect_timeout_ms : STORE_ASYNC_HANDSHAKE_MS),
		0);
	start_attempt(a);
	*out = a;
	return 0;
}

void store_async_close(struct store_async *a, void (*done)(void *arg), void *arg)
{
	uv_timer_t *timers[] = {&a->retry_timer, &a->deadline_timer, &a->wait_timer};
	size_t i;

	if (a->state == AS_CLOSING)
		return;
	a->state = AS_CLOSING;
	a->done = done;
	a->done_arg = arg;
	for (i = 0; i < 3; i++) {
		a->nclosing++;
		uv_close((uv_handle_t *)timers[i], on_timer_closed);
	}
	close_tcp(a);
	store_lookup_cancel(&a->lookup);
}

static int sock_addr(const struct store_async *a, bool peer, char *buf, size_t len)
{
	struct sockaddr_storage ss;
	int n = sizeof(ss), rc;

	if (a->state != AS_READY || a->tcp == NULL)
		return -ENOTCONN;
	rc = peer ? uv_tcp_getpeername(a->tcp, (struct sockaddr *)&ss, &n)
		  : uv_tcp_getsockname(a->tcp, (struct sockaddr *)&ss, &n);
	if (rc < 0)
		return rc;
	return store_addr_format((struct sockaddr *)&ss, false, buf, len);
}

bool store_async_unanswered(const struct store_async *a)
{
	return a->answerless || (a->state == AS_CONNECTING && a->tcp_up);
}

int store_async_local_addr(const struct store_async *a, char *buf, size_t len)
{
	return sock_addr(a, false, buf, len);
}

int store_async_peer_addr(const struct store_async *a, char *buf, size_t len)
{
	return sock_addr(a, true, buf, len);
}

int store_async_set_prefix(struct store_async *a, const char *prefix)
{
	char *p = NULL;

	if (prefix && *prefix && (p = strdup(prefix)) == NULL)
		return -ENOMEM;
	free(a->prefix);
	a->prefix = p;
	return 0;
}

int store_async_queue(struct store_async *a, const struct aop *t, const struct store_msg *m,
		      size_t nm)
{
	struct aop *o;
	size_t i;
	int rc = 0;

	if (a->state == AS_LOST || a->state == AS_CLOSING)
		return -ENOTCONN;
	o = malloc(sizeof(*o));
	if (o == NULL)
		return -ENOMEM;
	*o = *t;
	o->next = NULL;
	o->op = m[nm - 1].op;
	store_buf_init(&o->req);
	for (i = 0; i < nm && rc == 0; i++)
		rc = store_encode(&o->req, STORE_DIALECT_V2, a->prefix, &m[i]);
	if (rc < 0) {
		store_async_op_free(o);
		return rc;
	}
	push(&a->sendq, &a->sendq_tail, o);
	pump(a);
	return 0;
}
