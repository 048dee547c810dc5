/* Unit tests for rendezvous/store_lookup.c: an address answered from the
 * loop's next turn (never from inside the start), a name from its thread,
 * each address once, a name that cannot resolve with getaddrinfo's reason,
 * and a cancelled lookup whose answer never comes and which the loop does
 * not wait for. Loop runs are bounded by a watchdog timer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <string.h>
#include <uv.h>

#include "store_addr.h"
#include "store_lookup.h"

struct got {
	int calls;
	struct store_lookup_result r;
};

static void on_done(void *arg, const struct store_lookup_result *r)
{
	struct got *g = arg;

	g->calls++;
	g->r = *r;
}

static void on_watchdog(uv_timer_t *t)
{
	uv_stop(t->loop);
}

/* Run loop until nothing is left in it, or 10 s. */
static void run(uv_loop_t *loop)
{
	uv_timer_t wd;

	uv_timer_init(loop, &wd);
	uv_timer_start(&wd, on_watchdog, 10000, 0);
	uv_unref((uv_handle_t *)&wd);
	uv_run(loop, UV_RUN_DEFAULT);
	uv_close((uv_handle_t *)&wd, NULL);
	uv_run(loop, UV_RUN_DEFAULT);
}

/* libddp's ring listens on every address where a node reaches its store
 * on one of these (tcp_setup.c). */
static void test_loopback_addresses_are_told_apart(void **state)
{
	(void)state;
	assert_true(store_addr_is_loopback("127.0.0.1"));
	assert_true(store_addr_is_loopback("127.0.1.1"));
	assert_true(store_addr_is_loopback("127.255.255.254"));
	assert_true(store_addr_is_loopback("::1"));
	assert_true(store_addr_is_loopback("::ffff:127.0.1.1"));
	assert_false(store_addr_is_loopback("128.0.0.1"));
	assert_false(store_addr_is_loopback("10.0.0.127"));
	assert_false(store_addr_is_loopback("::ffff:10.1.2.3"));
	assert_false(store_addr_is_loopback("::2"));
	assert_false(store_addr_is_loopback("fe80::1"));
	assert_false(store_addr_is_loopback("localhost"));
	assert_false(store_addr_is_loopback(""));
}

static void test_an_address_is_answered_from_the_loop(void **state)
{
	uv_loop_t loop;
	struct store_lookup *l = NULL;
	struct got g = {0};
	const struct sockaddr_in *in;

	(void)state;
	uv_loop_init(&loop);
	assert_int_equal(store_lookup_start(&loop, "127.0.0.1", on_done, &g, &l), 0);
	assert_non_null(l);
	assert_int_equal(g.calls, 0); /* never from inside the start */
	run(&loop);
	assert_int_equal(g.calls, 1);
	assert_int_equal(g.r.gai, 0);
	assert_int_equal(g.r.n, 1);
	in = (const struct sockaddr_in *)&g.r.addr[0];
	assert_int_equal(in->sin_family, AF_INET);
	assert_int_equal(ntohl(in->sin_addr.s_addr), INADDR_LOOPBACK);
	assert_int_equal(uv_loop_close(&loop), 0);
}

static void test_a_name_is_answered_each_address_once(void **state)
{
	uv_loop_t loop;
	struct store_lookup *l = NULL;
	struct got g = {0};

	(void)state;
	uv_loop_init(&loop);
	/* localhost: /etc/hosts, both families mostly, each one per socket
	 * type from getaddrinfo were it not for SOCK_STREAM and the dedupe. */
	assert_int_equal(store_lookup_start(&loop, "localhost", on_done, &g, &l), 0);
	run(&loop);
	assert_int_equal(g.calls, 1);
	assert_int_equal(g.r.gai, 0);
	assert_true(g.r.n >= 1);
	for (int i = 0; i < g.r.n; i++)
		for (int j = i + 1; j < g.r.n; j++)
			assert_true(memcmp(&g.r.addr[i], &g.r.addr[j], sizeof(g.r.addr[0])) != 0);
	assert_int_equal(uv_loop_close(&loop), 0);
}

static void test_a_name_that_cannot_resolve_gives_the_reason(void **state)
{
	uv_loop_t loop;
	struct store_lookup *l = NULL;
	struct got g = {0};

	(void)state;
	uv_loop_init(&loop);
	/* An empty label: the resolver refuses it without a query. */
	assert_int_equal(store_lookup_start(&loop, "bad..name", on_done, &g, &l), 0);
	run(&loop);
	assert_int_equal(g.calls, 1);
	assert_int_not_equal(g.r.gai, 0);
	assert_int_equal(g.r.n, 0);
	assert_int_equal(uv_loop_close(&loop), 0);
}

static void test_a_cancelled_lookup_never_answers_nor_holds_the_loop(void **state)
{
	uv_loop_t loop;
	struct store_lookup *a = NULL, *b = NULL, *none = NULL;
	struct got g = {0};

	(void)state;
	uv_loop_init(&loop);
	assert_int_equal(store_lookup_start(&loop, "localhost", on_done, &g, &a), 0);
	assert_int_equal(store_lookup_start(&loop, "::1", on_done, &g, &b), 0);
	store_lookup_cancel(&a);
	store_lookup_cancel(&b);
	assert_null(a);
	assert_null(b);
	store_lookup_cancel(&none); /* nothing under way: nothing done */
	run(&loop);
	assert_int_equal(g.calls, 0);
	assert_int_equal(uv_loop_close(&loop), 0);
}

static void test_a_host_name_too_long_is_refused(void **state)
{
	uv_loop_t loop;
	struct store_lookup *l = NULL;
	struct got g = {0};
	char host[300];

	(void)state;
	memset(host, 'a', sizeof(host) - 1);
	host[sizeof(host) - 1] = '\0';
	uv_loop_init(&loop);
	assert_int_equal(store_lookup_start(&loop, host, on_done, &g, &l), -ENAMETOOLONG);
	assert_null(l);
	run(&loop);
	assert_int_equal(g.calls, 0);
	assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_loopback_addresses_are_told_apart),
		cmocka_unit_test(test_an_address_is_answered_from_the_loop),
		cmocka_unit_test(test_a_name_is_answered_each_address_once),
		cmocka_unit_test(test_a_name_that_cannot_resolve_gives_the_reason),
		cmocka_unit_test(test_a_cancelled_lookup_never_answers_nor_holds_the_loop),
		cmocka_unit_test(test_a_host_name_too_long_is_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
