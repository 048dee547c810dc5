/* Unit tests for rendezvous/store_client.c (the blocking client libddp and
 * the CLI use) against a store server running on its own loop in a thread:
 * every operation, waits that time out and leave the client usable, blocking
 * queue pops, the key prefix, ON_CLOSE_SET, argument errors, and connecting
 * before the server is up. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "store_client.h"
#include "util.h"
#include "store_server.h"

struct srv {
	pthread_t thread;
	uv_loop_t loop;
	uv_async_t stop;
	struct store_server *s;
	int port;     /* 0: pick one */
	int delay_ms; /* start listening after this */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool up;
};

static void on_stop(uv_async_t *h)
{
	struct srv *v = h->data;

	store_server_close(v->s, NULL, NULL);
	uv_close((uv_handle_t *)h, NULL);
}

static void *serve(void *arg)
{
	struct srv *v = arg;
	struct store_server_opts o;

	if (v->delay_ms)
		usleep((useconds_t)v->delay_ms * 1000);
	store_server_opts_init(&o);
	if (store_server_start(&v->loop, &o, "127.0.0.1", v->port, &v->s) != 0)
		abort();
	pthread_mutex_lock(&v->mu);
	v->port = store_server_port(v->s);
	v->up = true;
	pthread_cond_signal(&v->cv);
	pthread_mutex_unlock(&v->mu);
	uv_run(&v->loop, UV_RUN_DEFAULT);
	return NULL;
}

static struct srv *srv_start(int port, int delay_ms, bool wait_up)
{
	struct srv *v = calloc(1, sizeof(*v));

	v->port = port;
	v->delay_ms = delay_ms;
	pthread_mutex_init(&v->mu, NULL);
	pthread_cond_init(&v->cv, NULL);
	uv_loop_init(&v->loop);
	uv_async_init(&v->loop, &v->stop, on_stop);
	v->stop.data = v;
	pthread_create(&v->thread, NULL, serve, v);
	pthread_mutex_lock(&v->mu);
	while (wait_up && !v->up)
		pthread_cond_wait(&v->cv, &v->mu);
	pthread_mutex_unlock(&v->mu);
	return v;
}

static void srv_stop(struct srv *v)
{
	uv_async_send(&v->stop);
	pthread_join(v->thread, NULL);
	uv_loop_close(&v->loop);
	free(v);
}

static int setup(void **state)
{
	*state = srv_start(0, 0, true);
	return 0;
}

static int teardown(void **state)
{
	srv_stop(*state);
	return 0;
}

static struct store_client *conn(void **state, int64_t op_ms)
{
	struct srv *v = *state;
	struct store_client *c = NULL;

	assert_int_equal(store_client_connect("127.0.0.1", v->port, 5000, op_ms, &c), 0);
	return c;
}

/* The call runs first, then v/len are read (argument order is unspecified). */
#define GOT(call, v, len, want)                \
	do {                                   \
		int rc_ = (call);              \
		assert_got(rc_, v, len, want); \
	} while (0)

static void assert_got(int rc, void *val, size_t len, const char *want)
{
	assert_int_equal(rc, 0);
	assert_int_equal(len, strlen(want));
	assert_memory_equal(val, want, len);
	assert_int_equal(((char *)val)[len], '\0'); /* NUL-terminated for convenience */
	free(val);
}

static void test_every_operation(void **state)
{
	struct store_client *c = conn(state, 5000);
	const char *keys[] = {"m1", "m2"};
	const void *vals[] = {"one", "two"};
	size_t lens[] = {3, 3}, len;
	void *v, *mv[2];
	size_t ml[2];
	int64_t n;

	assert_int_equal(store_client_set(c, "k", "v", 1), 0);
	GOT(store_client_get(c, "k", &v, &len), v, len, "v");
	assert_int_equal(store_client_add(c, "n", 40, &n), 0);
	assert_int_equal(store_client_add(c, "n", 2, &n), 0);
	assert_int_equal(n, 42);
	GOT(store_client_get(c, "n", &v, &len), v, len, "42");
	GOT(store_client_compare_set(c, "k", "v", 1, "w", 1, &v, &len), v, len, "w");
	GOT(store_client_compare_set(c, "k", "x", 1, "y", 1, &v, &len), v, len, "w");
	assert_int_equal(store_client_multi_set(c, keys, vals, lens, 2), 0);
	assert_int_equal(store_client_multi_get(c, keys, 2, mv, ml), 0);
	assert_got(0, mv[0], ml[0], "one");
	assert_got(0, mv[1], ml[1], "two");
	assert_int_equal(store_client_check(c, keys, 2), 1);
	assert_int_equal(store_client_append(c, "log", "ab", 2), 0);
	assert_int_equal(store_client_append(c, "log", "cd", 2), 0);
	GOT(store_client_get(c, "log", &v, &len), v, len, "abcd");
	assert_int_equal(store_client_num_keys(c, &n), 0);
	assert_int_equal(n, 5);
	assert_int_equal(store_client_delete(c, "k"), 1);
	assert_int_equal(store_client_delete(c, "k"), 0);
	assert_int_equal(store_client_try_get(c, "k", &v, &len), -ENOENT);
	assert_int_equal(store_client_ping(c), 0);
	store_client_close(c);
}

static void test_wait_timeout_leaves_client_usable(void **state)
{
	struct store_client *c = conn(state, 5000);
	const char *k[] = {"never"};
	void *v;
	size_t len;

	assert_int_equal(store_client_wait(c, k, 1, 50), -ETIMEDOUT);
	assert_int_equal(store_client_ping(c), 0);
	store_client_set_timeout(c, 50);
	assert_int_equal(store_client_get(c, "never", &v, &len), -ETIMEDOUT);
	assert_int_equal(store_client_set(c, "now", "x", 1), 0);
	assert_int_equal(store_client_check(c, (const char *[]){"now"}, 1), 1);
	store_client_close(c);
}

struct later {
	void **state;
	const char *key;
	int op; /* 0 set, 1 queue push */
};

static void *do_later(void *arg)
{
	struct later *l = arg;
	struct store_client *c = conn(l->state, 5000);

	usleep(100 * 1000);
	if (l->op == 0)
		store_client_set(c, l->key, "arrived", 7);
	else
		store_client_queue_push(c, l->key, "job", 3);
	store_client_ping(c);
	store_client_close(c);
	return NULL;
}

static void test_get_and_queue_pop_block_until_data(void **state)
{
	struct store_client *c = conn(state, 10000);
	struct later l1 = {state, "slow", 0}, l2 = {state, "q", 1};
	pthread_t t;
	void *v;
	size_t len;
	int64_t n;

	pthread_create(&t, NULL, do_later, &l1);
	GOT(store_client_get(c, "slow", &v, &len), v, len, "arrived");
	pthread_join(t, NULL);
	pthread_create(&t, NULL, do_later, &l2);
	GOT(store_client_queue_pop(c, "q", &v, &len), v, len, "job");
	pthread_join(t, NULL);
	assert_int_equal(store_client_queue_len(c, "q", &n), 0);
	assert_int_equal(n, 0);
	store_client_set_timeout(c, 50);
	assert_int_equal(store_client_queue_pop(c, "q", &v, &len), -ETIMEDOUT);
	/* A plain value under the same key does not make pop spin forever. */
	assert_int_equal(store_client_set(c, "q", "plain", 5), 0);
	assert_int_equal(store_client_queue_pop(c, "q", &v, &len), -ETIMEDOUT);
	assert_int_equal(store_client_ping(c), 0);
	store_client_close(c);
}

static void test_prefix_and_shared_key_layout(void **state)
{
	struct store_client *a = conn(state, 5000), *b = conn(state, 5000);
	void *v;
	size_t len;

	assert_int_equal(store_client_set_prefix(a, "/worker/attempt_0"), 0);
	assert_int_equal(store_client_set(a, "rank_1", "addr", 4), 0);
	/* PrefixStore(p, TCPStore): "/" + p + "/" + key on the wire. */
	GOT(store_client_get(b, "/worker/attempt_0/rank_1", &v, &len), v, len, "addr");
	assert_int_equal(store_client_set_prefix(a, NULL), 0);
	assert_int_equal(store_client_try_get(a, "rank_1", &v, &len), -ENOENT);
	store_client_close(a);
	store_client_close(b);
}

static void test_on_close_set(void **state)
{
	struct store_client *agent = conn(state, 5000), *peer = conn(state, 5000);
	const char *k[] = {"job/1/failed"};
	void *v;
	size_t len;

	assert_int_equal(store_client_on_close_set(agent, "job/1/failed", "boom", 4), 0);
	assert_int_equal(store_client_check(peer, k, 1), 0);
	store_client_close(agent);
	assert_int_equal(store_client_wait(peer, k, 1, 5000), 0);
	GOT(store_client_get(peer, "job/1/failed", &v, &len), v, len, "boom");
	/* Cleared registrations do nothing. */
	agent = conn(state, 5000);
	assert_int_equal(store_client_on_close_set(agent, "job/2/failed", "x", 1), 0);
	assert_int_equal(store_client_on_close_set(agent, NULL, NULL, 0), 0);
	store_client_close(agent);
	assert_int_equal(store_client_ping(peer), 0);
	assert_int_equal(store_client_check(peer, (const char *[]){"job/2/failed"}, 1), 0);
	store_client_close(peer);
}

struct arrival {
	void **state;
	int rc;
};

static void *arrive(void *arg)
{
	struct arrival *a = arg;
	struct store_client *c = conn(a->state, 10000);

	a->rc = store_client_barrier(c, "bar", 3, 0);
	store_client_close(c);
	return NULL;
}

static void test_barrier_releases_all_and_times_out_usable(void **state)
{
	struct store_client *c = conn(state, 10000);
	struct arrival a[2] = {{state, 1}, {state, 1}};
	pthread_t t[2];
	void *v;
	size_t len;
	int i;

	for (i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, arrive, &a[i]);
	/* The third arrival releases them all, wherever it comes in order. */
	assert_int_equal(store_client_barrier(c, "bar", 3, 0), 0);
	for (i = 0; i < 2; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(a[i].rc, 0);
	}
	GOT(store_client_get(c, "bar", &v, &len), v, len, "3");
	assert_int_equal(store_client_barrier(c, "solo", 1, 0), 0);
	/* Alone in a barrier of 2: cancelled at the timeout, client usable. */
	assert_int_equal(store_client_barrier(c, "pair", 2, 50), -ETIMEDOUT);
	assert_int_equal(store_client_ping(c), 0);
	GOT(store_client_get(c, "pair", &v, &len), v, len, "1");
	store_client_close(c);
}

static int has_key(char **keys, size_t n, const char *k)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (strcmp(keys[i], k) == 0)
			return 1;
	return 0;
}

static void test_list_keys_in_the_clients_key_space(void **state)
{
	struct store_client *c = conn(state, 5000), *p = conn(state, 5000);
	char **keys;
	size_t n;

	assert_int_equal(store_client_list_keys(c, &keys, &n), 0);
	assert_int_equal(n, 0);
	assert_null(keys);
	assert_int_equal(store_client_set(c, "a", "1", 1), 0);
	assert_int_equal(store_client_set(c, "dir/b", "2", 1), 0);
	assert_int_equal(store_client_queue_push(c, "q", "x", 1), 0);
	assert_int_equal(store_client_set_prefix(p, "job"), 0);
	assert_int_equal(store_client_set(p, "x", "3", 1), 0);
	assert_int_equal(store_client_ping(p), 0); /* SET has no reply: applied by now */
	assert_int_equal(store_client_list_keys(c, &keys, &n), 0);
	assert_int_equal(n, 3); /* a, dir/b, job/x; the queue is not a key */
	assert_true(has_key(keys, n, "a") && has_key(keys, n, "dir/b") &&
		    has_key(keys, n, "job/x"));
	store_client_keys_free(keys, n);
	/* Under a prefix: only its keys, without it (PrefixStore's view). */
	assert_int_equal(store_client_list_keys(p, &keys, &n), 0);
	assert_int_equal(n, 1);
	assert_string_equal(keys[0], "x");
	store_client_keys_free(keys, n);
	store_client_close(c);
	store_client_close(p);
}

static void test_argument_errors(void **state)
{
	struct store_client *c = conn(state, 5000);
	char *big_key = malloc(9000);
	void *v;
	size_t len;

	memset(big_key, 'k', 8999);
	big_key[8999] = '\0';
	assert_int_equal(store_client_set(c, big_key, "v", 1), -ENAMETOOLONG);
	assert_int_equal(store_client_set(c, "k", NULL, 9 * 1024 * 1024), -EMSGSIZE);
	assert_int_equal(store_client_get(c, NULL, &v, &len), -EINVAL);
	/* Rejected locally: the connection is still fine. */
	assert_int_equal(store_client_ping(c), 0);
	free(big_key);
	store_client_close(c);
	assert_string_equal(store_strerror(-ETIMEDOUT), "timed out");
	assert_non_null(strstr(store_strerror(-ECONNREFUSED), "refused"));
}

static void test_connect_waits_for_a_late_server(void **state)
{
	struct srv *v = *state, *late;
	struct store_client *c;
	int port = v->port;
	int64_t t0;

	srv_stop(v);
	*state = NULL;
	/* Nothing listens: a short deadline gives -ECONNREFUSED, and only once it
	 * has passed (the backoff's last sleep is cut to it, not skipped: the
	 * client gave up 290 ms early here, up to 1 s with longer timeouts). */
	t0 = util_now_ms();
	assert_int_equal(store_client_connect("127.0.0.1", port, 600, 1000, &c), -ECONNREFUSED);
	assert_true(util_now_ms() - t0 >= 600);
	late = srv_start(port, 300, false);
	assert_int_equal(store_client_connect("127.0.0.1", port, 10000, 1000, &c), 0);
	assert_int_equal(store_client_ping(c), 0);
	store_client_close(c);
	*state = late;
}

/* A listening socket of family on the wildcard address, port 0 (any) or the
 * given one; its fd (*port set), or -1 when the host lacks the family or
 * the port is taken. */
static int listen_wild(int family, int *port)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0), on = 1;

	if (fd < 0)
		return -1;
	memset(&ss, 0, sizeof(ss));
	ss.ss_family = (sa_family_t)family;
	((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)*port); /* shared offset */
	if (family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof(on));
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
	if (bind(fd, (struct sockaddr *)&ss,
		 family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6)) <
		    0 ||
	    listen(fd, 1) < 0 || getsockname(fd, (struct sockaddr *)&ss, &len) < 0) {
		close(fd);
		return -1;
	}
	*port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
	return fd;
}

static bool has_family(int family)
{
	int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return false;
	close(fd);
	return true;
}

/* Regression: two dynamic agents raced for one --rdzv-endpoint port; one
 * took IPv4, the other skipped its taken IPv4 and kept IPv6 alone, so
 * clients of 127.0.0.1 found no store and the rendezvous hung. A store
 * whose port is taken on any address it listens on must not start, and
 * must not keep the others. Each family in turn is the one taken. */
static void test_a_port_taken_on_any_family_fails_the_start(void **state)
{
	int fams[2] = {AF_INET, AF_INET6}, i;

	(void)state;
	for (i = 0; i < 2; i++) {
		int other = fams[1 - i], port = 0, fd = listen_wild(fams[i], &port), fd2, p2;
		struct store_server_opts o;
		struct store_server *s = NULL;
		uv_loop_t loop;
		int rc;

		if (fd < 0)
			continue; /* no such family here */
		uv_loop_init(&loop);
		store_server_opts_init(&o);
		rc = store_server_start(&loop, &o, NULL, port, &s);
		assert_true(rc == UV_EADDRINUSE || rc == -EADDRINUSE);
		uv_run(&loop, UV_RUN_DEFAULT); /* the failed start's handles close */
		/* Nothing of ours holds the other family's port. */
		p2 = port;
		fd2 = listen_wild(other, &p2);
		if (has_family(other))
			assert_true(fd2 >= 0);
		if (fd2 >= 0)
			close(fd2);
		close(fd);
		assert_int_equal(uv_loop_close(&loop), 0);
	}
}

/* A host list with an empty item is refused, not shortened: strtok_r passed
 * over it, so "127.0.0.1,,::1" listened on both and ",::1" on one. */
static void test_a_host_list_with_an_empty_item_is_refused(void **state)
{
	static const char *const bad[] = {"", ",", "127.0.0.1,,::1", ",::1", "::1,"};
	static const char *const good[] = {"127.0.0.1", "127.0.0.1,::1", "*", "localhost"};
	struct store_server_opts o;
	struct store_server *s = NULL;
	uv_loop_t loop;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(store_server_host_check(bad[i]), -EINVAL);
	for (i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		assert_int_equal(store_server_host_check(good[i]), 0);
	uv_loop_init(&loop);
	store_server_opts_init(&o);
	assert_int_equal(store_server_start(&loop, &o, "127.0.0.1,,::1", 0, &s), -EINVAL);
	assert_int_equal(store_server_start(&loop, &o, ",127.0.0.1", 0, &s), -EINVAL);
	uv_run(&loop, UV_RUN_DEFAULT); /* the failed starts' handles close */
	assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_every_operation, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wait_timeout_leaves_client_usable, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_get_and_queue_pop_block_until_data, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_prefix_and_shared_key_layout, setup, teardown),
		cmocka_unit_test_setup_teardown(test_on_close_set, setup, teardown),
		cmocka_unit_test_setup_teardown(test_barrier_releases_all_and_times_out_usable,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_list_keys_in_the_clients_key_space, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_argument_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_connect_waits_for_a_late_server, setup,
						teardown),
		cmocka_unit_test(test_a_port_taken_on_any_family_fails_the_start),
		cmocka_unit_test(test_a_host_list_with_an_empty_item_is_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
