/* Unit tests for rendezvous/store_async.c against an in-process store server
 * on the same libuv loop (as the ddprun agent runs them): ordered operations,
 * get without waiting, waits (answered, timed out and cancelled, racing with
 * STOP_WAITING), connect retry and failure, connection loss, close
 * cancelling everything, ON_CLOSE_SET waking a waiter (and never replacing a
 * value), the connection's addresses, and the server's conn_closed hook. Every loop run is
 * bounded by a watchdog timer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>
#include <uv.h>

#include "store_async.h"
#include "store_proto.h"
#include "store_server.h"
#include "util.h"

struct env {
	uv_loop_t loop;
	struct store_server *srv;
	int port;
	uv_timer_t watchdog;
	bool timed_out;
};

/* A log of callback events, in the order they happened. */
static char events[64][64];
static int nevents;

static void ev(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void ev(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (nevents < 64)
		vsnprintf(events[nevents++], sizeof(events[0]), fmt, ap);
	va_end(ap);
}

static bool has_event(const char *e)
{
	int i;

	for (i = 0; i < nevents; i++)
		if (strcmp(events[i], e) == 0)
			return true;
	return false;
}

static int index_of(const char *e)
{
	int i;

	for (i = 0; i < nevents; i++)
		if (strcmp(events[i], e) == 0)
			return i;
	return -1;
}

static void on_watchdog(uv_timer_t *t)
{
	struct env *e = t->data;

	e->timed_out = true;
	uv_stop(&e->loop);
}

/* Run the loop until `until` events were logged (bounded: 10 s). */
static void run_until(struct env *e, int until)
{
	uv_timer_start(&e->watchdog, on_watchdog, 10000, 0);
	while (nevents < until && !e->timed_out)
		uv_run(&e->loop, UV_RUN_ONCE);
	uv_timer_stop(&e->watchdog);
	assert_false(e->timed_out);
}

static int setup(void **state)
{
	struct env *e = calloc(1, sizeof(*e));
	struct store_server_opts o;

	nevents = 0;
	uv_loop_init(&e->loop);
	uv_timer_init(&e->loop, &e->watchdog);
	e->watchdog.data = e;
	store_server_opts_init(&o);
	assert_int_equal(store_server_start(&e->loop, &o, "127.0.0.1", 0, &e->srv), 0);
	e->port = store_server_port(e->srv);
	*state = e;
	return 0;
}

static void on_srv_closed(void *arg)
{
	ev("server closed");
}

static int teardown(void **state)
{
	struct env *e = *state;

	if (e->srv)
		store_server_close(e->srv, NULL, NULL);
	uv_close((uv_handle_t *)&e->watchdog, NULL);
	uv_run(&e->loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&e->loop), 0);
	free(e);
	return 0;
}

static void on_connect(struct store_async *a, int status, void *arg)
{
	ev("connect %d", status);
}

static void on_lost(struct store_async *a, int reason, void *arg)
{
	ev("lost %s", reason < 0 ? "error" : "?");
}

static const struct store_async_callbacks cbs = {on_connect, on_lost, NULL};

static void done_cb(int status, void *arg)
{
	ev("%s %d", (const char *)arg, status);
}

static void int_cb(int status, int64_t v, void *arg)
{
	ev("%s %d %lld", (const char *)arg, status, (long long)v);
}

static void bytes_cb(int status, const void *val, size_t len, void *arg)
{
	ev("%s %d '%.*s'", (const char *)arg, status, (int)len, val ? (const char *)val : "");
}

static void multi_cb(int status, size_t n, const void *const *vals, const size_t *lens, void *arg)
{
	ev("%s %d %zu '%.*s' '%.*s'", (const char *)arg, status, n, n ? (int)lens[0] : 0,
	   n ? (const char *)vals[0] : "", n > 1 ? (int)lens[1] : 0,
	   n > 1 ? (const char *)vals[1] : "");
}

static void closed_cb(void *arg)
{
	ev("closed %s", (const char *)arg);
}

static struct store_async *connect_ok(struct env *e)
{
	struct store_async *a;
	int before = nevents;

	assert_int_equal(store_async_connect(&e->loop, "127.0.0.1", e->port, 5000, &cbs, &a), 0);
	run_until(e, before + 1);
	assert_string_equal(events[before], "connect 0");
	return a;
}

static void close_and_wait(struct env *e, struct store_async *a, const char *name)
{
	int before = nevents;

	store_async_close(a, closed_cb, (void *)name);
	run_until(e, before + 1);
}

static void test_operations_complete_in_order(void **state)
{
	struct env *e = *state;
	struct store_async *a;
	const char *mk[] = {"m1", "m2"};
	const void *mv[] = {"one", "two"};
	size_t ml[] = {3, 3};
	const char *both[] = {"k", "m2"};

	/* Queued before the connection is up. */
	assert_int_equal(store_async_connect(&e->loop, "127.0.0.1", e->port, 5000, &cbs, &a), 0);
	assert_int_equal(store_async_set(a, "k", "v", 1, done_cb, "set"), 0);
	assert_int_equal(store_async_get(a, "k", bytes_cb, "get"), 0);
	assert_int_equal(store_async_add(a, "n", 5, int_cb, "add"), 0);
	assert_int_equal(store_async_compare_set(a, "k", "v", 1, "w", 1, bytes_cb, "cas"), 0);
	assert_int_equal(store_async_multi_set(a, mk, mv, ml, 2, done_cb, "mset"), 0);
	assert_int_equal(store_async_multi_get(a, mk, 2, multi_cb, "mget"), 0);
	assert_int_equal(store_async_check(a, both, 2, int_cb, "check"), 0);
	assert_int_equal(store_async_num_keys(a, int_cb, "numkeys"), 0);
	assert_int_equal(store_async_delete(a, "k", int_cb, "del"), 0);
	assert_int_equal(store_async_delete(a, "k", int_cb, "del-again"), 0);
	assert_int_equal(store_async_ping(a, done_cb, "ping"), 0);
	run_until(e, 12);
	assert_string_equal(events[0], "connect 0");
	assert_string_equal(events[1], "set 0");
	assert_string_equal(events[2], "get 0 'v'");
	assert_string_equal(events[3], "add 0 5");
	assert_string_equal(events[4], "cas 0 'w'");
	assert_string_equal(events[5], "mset 0");
	assert_string_equal(events[6], "mget 0 2 'one' 'two'");
	assert_string_equal(events[7], "check 0 1");
	assert_string_equal(events[8], "numkeys 0 4");
	assert_string_equal(events[9], "del 0 1");
	assert_string_equal(events[10], "del-again 0 0");
	assert_string_equal(events[11], "ping 0");
	close_and_wait(e, a, "a");
}

static void test_get_does_not_wait(void **state)
{
	struct env *e = *state;
	struct store_async *a = connect_ok(e);

	store_async_get(a, "missing", bytes_cb, "get");
	store_async_set(a, "empty", "", 0, done_cb, "set");
	store_async_get(a, "empty", bytes_cb, "get-empty");
	run_until(e, 4);
	assert_string_equal(events[1], "get -2 ''"); /* -ENOENT */
	assert_string_equal(events[3], "get-empty 0 ''");
	close_and_wait(e, a, "a");
}

static void set_later(uv_timer_t *t)
{
	store_async_set(t->data, "late", "x", 1, done_cb, "set-late");
}

static void test_wait_answered_and_holds_later_ops(void **state)
{
	struct env *e = *state;
	struct store_async *a = connect_ok(e), *b = connect_ok(e);
	const char *k[] = {"late"};
	uv_timer_t t;

	assert_int_equal(store_async_wait(a, k, 1, 0, done_cb, "wait"), 0);
	assert_int_equal(store_async_ping(a, done_cb, "ping-after"), 0);
	uv_timer_init(&e->loop, &t);
	t.data = b;
	uv_timer_start(&t, set_later, 100, 0);
	run_until(e, 5);
	/* The ping queued behind the wait completes after it. */
	assert_true(index_of("wait 0") >= 0);
	assert_true(index_of("ping-after 0") > index_of("wait 0"));
	assert_true(index_of("wait 0") > index_of("set-late 0"));
	uv_close((uv_handle_t *)&t, NULL);
	close_and_wait(e, a, "a");
	close_and_wait(e, b, "b");
}

static void test_wait_timeout_cancels_and_stays_usable(void **state)
{
	struct env *e = *state;
	struct store_async *a = connect_ok(e);
	const char *k[] = {"never"};

	assert_int_equal(store_async_wait(a, k, 1, 50, done_cb, "wait"), 0);
	assert_int_equal(store_async_add(a, "after", 1, int_cb, "add"), 0);
	run_until(e, 3);
	assert_string_equal(events[1], "wait -110"); /* -ETIMEDOUT */
	assert_string_equal(events[2], "add 0 1");
	close_and_wait(e, a, "a");
}

static void test_on_close_set_wakes_a_waiter(void **state)
{
	struct env *e = *state;
	struct store_async *agent = connect_ok(e), *peer = connect_ok(e);
	const char *k[] = {"job/1/failed"};

	store_async_on_close_set(agent, "job/1/failed", "agent0", 6, done_cb, "registered");
	run_until(e, 3);
	assert_string_equal(events[2], "registered 0");
	store_async_wait(peer, k, 1, 5000, done_cb, "peer-wait");
	store_async_close(agent, closed_cb, "agent");
	run_until(e, 5);
	assert_true(has_event("peer-wait 0"));
	store_async_get(peer, "job/1/failed", bytes_cb, "value");
	run_until(e, 6);
	assert_string_equal(events[5], "value 0 'agent0'");
	close_and_wait(e, peer, "peer");
}

static void test_on_close_set_keeps_a_value_set_before(void **state)
{
	struct env *e = *state;
	struct store_async *agent = connect_ok(e), *peer = connect_ok(e);

	/* The round already ended with a reason: an agent dying afterwards
	 * must not replace it (create-if-absent). */
	store_async_on_close_set(agent, "r0/end", "lost", 4, done_cb, "registered");
	store_async_set(peer, "r0/end", "ok", 2, done_cb, "ended");
	run_until(e, 4);
	close_and_wait(e, agent, "agent");
	store_async_ping(peer, done_cb, "ping"); /* the server has seen the close by now */
	store_async_get(peer, "r0/end", bytes_cb, "value");
	run_until(e, 7);
	assert_string_equal(events[6], "value 0 'ok'");
	close_and_wait(e, peer, "peer");
}

static void test_local_and_peer_addresses_once_connected(void **state)
{
	struct env *e = *state;
	struct store_async *a;
	char buf[64];

	assert_int_equal(store_async_connect(&e->loop, "127.0.0.1", e->port, 5000, &cbs, &a), 0);
	assert_int_equal(store_async_peer_addr(a, buf, sizeof(buf)), -ENOTCONN);
	run_until(e, 1);
	assert_int_equal(store_async_local_addr(a, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "127.0.0.1");
	assert_int_equal(store_async_peer_addr(a, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "127.0.0.1"); /* numeric, no port */
	assert_int_equal(store_async_peer_addr(a, buf, 4), -ENAMETOOLONG);
	close_and_wait(e, a, "a");
}

static void on_conn_closed(void *arg)
{
	struct env *e = arg;

	ev("conn closed, %u left", store_server_num_conns(e->srv));
}

static void test_server_tells_when_a_connection_closes(void **state)
{
	struct env *e = *state;
	struct store_server_opts o;
	struct store_async *a, *b;

	/* A second server with the hook, on the same loop. */
	store_server_close(e->srv, NULL, NULL);
	store_server_opts_init(&o);
	o.conn_closed = on_conn_closed;
	o.conn_closed_arg = e;
	assert_int_equal(store_server_start(&e->loop, &o, "127.0.0.1", 0, &e->srv), 0);
	e->port = store_server_port(e->srv);
	a = connect_ok(e);
	b = connect_ok(e);
	store_async_close(a, closed_cb, "a");
	run_until(e, 4);
	assert_true(has_event("conn closed, 1 left"));
	store_async_close(b, closed_cb, "b");
	run_until(e, 6);
	assert_true(has_event("conn closed, 0 left"));
}

static void test_close_cancels_pending_operations(void **state)
{
	struct env *e = *state;
	struct store_async *a;
	const char *k[] = {"never"};

	assert_int_equal(store_async_connect(&e->loop, "127.0.0.1", e->port, 5000, &cbs, &a), 0);
	store_async_wait(a, k, 1, 0, done_cb, "wait");
	store_async_get(a, "x", bytes_cb, "get");
	store_async_close(a, closed_cb, "a");
	/* After close, nothing more is accepted. */
	assert_int_equal(store_async_ping(a, done_cb, "refused"), -ENOTCONN);
	run_until(e, 3);
	assert_string_equal(events[0], "wait -125"); /* -ECANCELED */
	assert_string_equal(events[1], "get -125 ''");
	assert_string_equal(events[2], "closed a");
	assert_false(has_event("connect 0"));
}

static void test_close_cancels_a_parked_wait(void **state)
{
	struct env *e = *state;
	struct store_async *a = connect_ok(e);
	const char *k[] = {"never"};

	store_async_wait(a, k, 1, 0, done_cb, "wait");
	uv_run(&e->loop, UV_RUN_NOWAIT);
	store_async_close(a, closed_cb, "a");
	run_until(e, 3);
	assert_string_equal(events[1], "wait -125");
	assert_string_equal(events[2], "closed a");
}

static void start_server_later(uv_timer_t *t)
{
	struct env *e = t->data;
	struct store_server_opts o;

	store_server_opts_init(&o);
	assert_int_equal(store_server_start(&e->loop, &o, "127.0.0.1", e->port, &e->srv), 0);
	ev("server up");
}

/* Close the test's server: nothing listens on e->port any more. */
static void free_the_port(struct env *e)
{
	store_server_close(e->srv, on_srv_closed, NULL);
	e->srv = NULL;
	run_until(e, 1);
}

static void test_connect_retries_until_the_server_starts(void **state)
{
	struct env *e = *state;
	struct store_async *a;
	uv_timer_t t;

	/* Bring the server back 300 ms after connecting. */
	free_the_port(e);
	assert_int_equal(store_async_connect(&e->loop, "127.0.0.1", e->port, 10000, &cbs, &a), 0);
	store_async_ping(a, done_cb, "ping");
	uv_timer_init(&e->loop, &t);
	t.data = e;
	uv_timer_start(&t, start_server_later, 300, 0);
	run_until(e, 4);
	assert_string_equal(events[1], "server up");
	assert_string_equal(events[2], "connect 0");
	assert_string_equal(events[3], "ping 0");
	uv_close((uv_handle_t *)&t, NULL);
	close_and_wait(e, a, "a");
}

static void test_connect_failure_fails_queued_ops(void **state)
{
	struct env *e = *state;
	struct store_async *a;

	int64_t t0;

	free_the_port(e);
	t0 = util_now_ms();
	assert_int_equal(store_async_connect(&e->loop, "127.0.0.1", e->port, 200, &cbs, &a), 0);
	store_async_ping(a, done_cb, "ping");
	run_until(e, 3);
	assert_string_equal(events[1], "ping -111"); /* -ECONNREFUSED */
	assert_string_equal(events[2], "connect -111");
	/* Only at the deadline: the backoff's last step no longer gives up
	 * early (it did at 150 ms here, up to 1 s before longer timeouts). The
	 * deadline's timer counts on the loop's clock, which may be the coarse
	 * one (a millisecond behind). */
	assert_true(util_now_ms() - t0 >= 199);
	close_and_wait(e, a, "a");
}

/* A listener on the port whose queue is full (one connection it never
 * accepts): the kernel drops new connections to it, which get no answer. */
struct silent {
	int lfd, cfd;
	int port;
};

static void start_silent_later(uv_timer_t *t)
{
	struct silent *q = t->data;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)q->port)};
	int one = 1;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	q->lfd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(q->lfd >= 0);
	setsockopt(q->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	assert_int_equal(bind(q->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(q->lfd, 0), 0);
	/* The client's attempts run on this loop, which waits for this
	 * callback: the connection below takes the only place in the queue. */
	q->cfd = socket(AF_INET, SOCK_STREAM, 0);
	assert_int_equal(connect(q->cfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ev("silent");
}

/* Refused at first (nothing listens), then no answer for the rest of the
 * timeout: the failure is the silence, not the old refusal (the launcher
 * said "connection refused" of a store that had stopped answering). */
static void test_connect_failure_after_silence_is_a_timeout(void **state)
{
	struct env *e = *state;
	struct silent q = {.lfd = -1, .cfd = -1, .port = e->port};
	struct store_async *a;
	uv_timer_t t;

	free_the_port(e);
	assert_int_equal(store_async_connect(&e->loop, "127.0.0.1", e->port, 3000, &cbs, &a), 0);
	uv_timer_init(&e->loop, &t);
	t.data = &q;
	uv_timer_start(&t, start_silent_later, 200, 0);
	run_until(e, 3);
	assert_string_equal(events[1], "silent");
	assert_string_equal(events[2], "connect -110"); /* -ETIMEDOUT */
	uv_close((uv_handle_t *)&t, NULL);
	close_and_wait(e, a, "a");
	close(q.cfd);
	close(q.lfd);
}

static void test_connection_loss_fails_pending_and_reports(void **state)
{
	struct env *e = *state;
	struct store_async *a = connect_ok(e);
	const char *k[] = {"never"};

	store_async_wait(a, k, 1, 0, done_cb, "wait");
	uv_run(&e->loop, UV_RUN_NOWAIT);
	store_server_close(e->srv, on_srv_closed, NULL);
	e->srv = NULL;
	run_until(e, 4);
	assert_true(has_event("wait -104")); /* -ECONNRESET */
	assert_true(has_event("lost error"));
	assert_true(index_of("lost error") > index_of("wait -104"));
	assert_int_equal(store_async_ping(a, done_cb, "after"), -ENOTCONN);
	close_and_wait(e, a, "a");
}

/* A fake server that answers the handshake, parks WAIT, and answers
 * CANCEL_WAIT with STOP_WAITING then WAIT_CANCELED: the race the client
 * must treat as success. */
struct fake {
	uv_tcp_t listener, conn;
	struct store_parser p;
	uint8_t buf[4096];
	size_t len;
};

static void fake_alloc(uv_handle_t *h, size_t s, uv_buf_t *b)
{
	struct fake *f = h->data;

	*b = uv_buf_init((char *)f->buf + f->len, (unsigned)(sizeof(f->buf) - f->len));
}

static void fake_write(struct fake *f, const void *p, size_t n)
{
	uv_buf_t b = uv_buf_init((char *)p, (unsigned)n);

	assert_int_equal(uv_try_write((uv_stream_t *)&f->conn, &b, 1), (int)n);
}

static void fake_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
	struct fake *f = s->data;
	struct store_req r;
	size_t pos = 0;

	if (n <= 0) {
		if (n < 0)
			uv_read_stop(s);
		return;
	}
	f->len += (size_t)n;
	while (store_parse(&f->p, f->buf + pos, f->len - pos, &r) == 1) {
		uint32_t nonce = (uint32_t)r.num;

		if (r.op == STORE_OP_PING)
			fake_write(f, &nonce, 4);
		else if (r.op == STORE_OP_CANCEL_WAIT)
			fake_write(f, "\x00\x01", 2);
		pos += r.len;
	}
	memmove(f->buf, f->buf + pos, f->len - pos);
	f->len -= pos;
}

static void fake_accept(uv_stream_t *l, int status)
{
	struct fake *f = l->data;

	uv_tcp_init(l->loop, &f->conn);
	f->conn.data = f;
	assert_int_equal(uv_accept(l, (uv_stream_t *)&f->conn), 0);
	uv_read_start((uv_stream_t *)&f->conn, fake_alloc, fake_read);
}

static void test_stop_waiting_racing_with_cancel_counts_as_success(void **state)
{
	struct env *e = *state;
	struct fake f;
	struct sockaddr_in sa;
	struct sockaddr_storage ss;
	int len = sizeof(ss);
	struct store_async *a;
	const char *k[] = {"raced"};

	memset(&f, 0, sizeof(f));
	store_parser_init(&f.p, NULL, STORE_DIALECT_NONE);
	uv_tcp_init(&e->loop, &f.listener);
	f.listener.data = &f;
	uv_ip4_addr("127.0.0.1", 0, &sa);
	assert_int_equal(uv_tcp_bind(&f.listener, (struct sockaddr *)&sa, 0), 0);
	assert_int_equal(uv_listen((uv_stream_t *)&f.listener, 8, fake_accept), 0);
	uv_tcp_getsockname(&f.listener, (struct sockaddr *)&ss, &len);
	assert_int_equal(store_async_connect(&e->loop, "127.0.0.1",
					     ntohs(((struct sockaddr_in *)&ss)->sin_port), 5000,
					     &cbs, &a),
			 0);
	store_async_wait(a, k, 1, 30, done_cb, "wait");
	store_async_ping(a, done_cb, "ping");
	run_until(e, 3);
	assert_string_equal(events[1], "wait 0");
	assert_string_equal(events[2], "ping 0");
	close_and_wait(e, a, "a");
	uv_close((uv_handle_t *)&f.conn, NULL);
	uv_close((uv_handle_t *)&f.listener, NULL);
	uv_run(&e->loop, UV_RUN_NOWAIT);
}

/* LIST_KEYS' keys, sorted (the server gives no order), joined by commas. */
static int cmp_keys(const void *x, const void *y)
{
	return strcmp(*(char *const *)x, *(char *const *)y);
}

static void list_cb(int status, size_t n, const void *const *vals, const size_t *lens, void *arg)
{
	char *k[8] = {NULL}, line[256] = "";
	size_t i;

	assert_true(n <= 8);
	for (i = 0; i < n; i++)
		k[i] = strndup(vals[i], lens[i]);
	qsort(k, n, sizeof(k[0]), cmp_keys);
	for (i = 0; i < n; i++) {
		strncat(line, i ? "," : "", sizeof(line) - strlen(line) - 1);
		strncat(line, k[i], sizeof(line) - strlen(line) - 1);
		free(k[i]);
	}
	ev("%s %d %zu [%s]", (const char *)arg, status, n, line);
}

static void test_barrier_and_list_keys(void **state)
{
	struct store_async *a, *b;
	struct env *e = *state;

	a = connect_ok(e);
	b = connect_ok(e);
	/* a parks (and holds its ping); b's arrival releases both. */
	assert_int_equal(store_async_barrier(a, "bar", 2, 0, done_cb, "bar-a"), 0);
	assert_int_equal(store_async_ping(a, done_cb, "ping-a"), 0);
	assert_int_equal(store_async_barrier(b, "bar", 2, 0, done_cb, "bar-b"), 0);
	run_until(e, 5);
	assert_true(index_of("bar-a 0") >= 0 && index_of("bar-b 0") >= 0);
	assert_true(index_of("ping-a 0") > index_of("bar-a 0"));
	/* Alone: cancelled at the timeout, the handle goes on. */
	assert_int_equal(store_async_barrier(a, "pair", 2, 50, done_cb, "bar-alone"), 0);
	assert_int_equal(store_async_set_prefix(b, "job"), 0);
	assert_int_equal(store_async_set(b, "x", "1", 1, done_cb, "set-x"), 0);
	assert_int_equal(store_async_ping(b, done_cb, "ping-b"), 0);
	run_until(e, 8);
	assert_true(index_of("bar-alone -110") >= 0); /* -ETIMEDOUT */
	assert_int_equal(store_async_list_keys(a, list_cb, "list-a"), 0);
	assert_int_equal(store_async_list_keys(b, list_cb, "list-b"), 0);
	run_until(e, 10);
	/* The counters are keys; under a prefix only its keys, without it. */
	assert_true(index_of("list-a 0 3 [bar,job/x,pair]") >= 0);
	assert_true(index_of("list-b 0 1 [x]") >= 0);
	close_and_wait(e, a, "a");
	close_and_wait(e, b, "b");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_operations_complete_in_order, setup, teardown),
		cmocka_unit_test_setup_teardown(test_get_does_not_wait, setup, teardown),
		cmocka_unit_test_setup_teardown(test_barrier_and_list_keys, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wait_answered_and_holds_later_ops, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_wait_timeout_cancels_and_stays_usable, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_on_close_set_wakes_a_waiter, setup, teardown),
		cmocka_unit_test_setup_teardown(test_on_close_set_keeps_a_value_set_before, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_local_and_peer_addresses_once_connected, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_server_tells_when_a_connection_closes, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_close_cancels_pending_operations, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_close_cancels_a_parked_wait, setup, teardown),
		cmocka_unit_test_setup_teardown(test_connect_retries_until_the_server_starts, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_connect_failure_fails_queued_ops, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_connect_failure_after_silence_is_a_timeout,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_connection_loss_fails_pending_and_reports,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_stop_waiting_racing_with_cancel_counts_as_success, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
