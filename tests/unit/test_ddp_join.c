/* Unit tests for ddp_init's join at the store (worker-runtime/src/join*.c):
 * the published record, the checks that name ranks that disagree, are
 * started twice or fill a node wrongly, the rank lists in messages, and the
 * whole conversation with ranks as threads against a store server running in
 * this process: agreement, a rank that disagrees arriving last, a rank that
 * never comes, an unreachable store, the leftovers of an earlier job, and a
 * store that closes the handshake (PyTorch 1.x's). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "ddp_internal.h"
#include "join.h"
#include "store_client.h"
#include "store_server.h"
#include "util.h"

/* ---- records and checks ------------------------------------------------------------ */

static struct ddpi_join_rec rec(int rank, int world, int lr, int lw, int node, int nnodes)
{
	struct ddpi_join_rec r = {.rank = rank,
				  .world = world,
				  .local_rank = lr,
				  .local_world = lw,
				  .node = node,
				  .nnodes = nnodes,
				  .pid = 1000 + rank};
	strcpy(r.backend, "cpu");
	strcpy(r.version, "0.1.0");
	strcpy(r.host, "h");
	return r;
}

/* n ranks on one node, all agreeing. */
static void one_node(struct ddpi_join_rec *v, int n)
{
	for (int i = 0; i < n; i++)
		v[i] = rec(i, n, i, n, 0, 1);
}

static void check_says(const struct ddpi_join_rec *v, size_t n, int complete, const char *msg)
{
	char buf[512];
	int rc = ddpi_join_check(v, n, complete, buf, sizeof(buf));

	if (!msg) {
		assert_int_equal(rc, 0);
		assert_string_equal(buf, "");
		return;
	}
	assert_int_equal(rc, DDP_EENV);
	assert_string_equal(buf, msg);
}

static void test_record_round_trip(void **state)
{
	struct ddp_env env = {
		.rank = 5, .world = 8, .local_rank = 1, .local_world = 4, .node = 1, .nnodes = 2};
	struct ddpi_join_rec r, *back;
	char text[600];
	size_t n;
	int len, len2;

	ddpi_join_rec_init(&r, &env, DDP_BACKEND_CPU);
	assert_int_equal(r.pid, (int)getpid());
	assert_string_equal(r.backend, "cpu");
	len = ddpi_join_rec_format(&r, text, sizeof(text));
	assert_true(len > 0 && text[len - 1] == '\n');
	/* Two members, as APPEND leaves them, one with a blank line after it. */
	r.rank = 6;
	r.local_rank = 2;
	len2 = ddpi_join_rec_format(&r, text + len, sizeof(text) - (size_t)len);
	memcpy(text + len + len2, "\n", 2);
	assert_int_equal(ddpi_join_parse(text, strlen(text), &back, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(back[0].rank, 5);
	assert_int_equal(back[0].world, 8);
	assert_int_equal(back[0].local_rank, 1);
	assert_int_equal(back[0].local_world, 4);
	assert_int_equal(back[0].node, 1);
	assert_int_equal(back[0].nnodes, 2);
	assert_int_equal(back[1].rank, 6);
	assert_string_equal(back[1].host, r.host);
	free(back);
	assert_int_equal(ddpi_join_rec_format(&r, text, 10), -ENOSPC);
}

static void test_malformed_members_are_a_protocol_error(void **state)
{
	static const char *const bad[] = {
		"0 4 0 4 0 1 cpu 0.1.0 1\n",	     /* a field short */
		"0 4 0 4 0 1 cpu 0.1.0 1 h extra\n", /* one too many */
		"x 4 0 4 0 1 cpu 0.1.0 1 h\n",
		"-1 4 0 4 0 1 cpu 0.1.0 1 h\n",
		"0 0 0 4 0 1 cpu 0.1.0 1 h\n",
		/* numbers past an int, which sscanf's %d read as something else
		 * ("4294967296" as rank 0), and words past their buffers */
		"4294967296 4 0 4 0 1 cpu 0.1.0 1 h\n",
		"0 4294967300 0 4 0 1 cpu 0.1.0 1 h\n",
		"0 4 0 4 0 1 cpu 0.1.0 99999999999 h\n",
		"0 4 0 4 0 1 cpu_and_more 0.1.0 1 h\n",
	};
	struct ddpi_join_rec *v = NULL;
	size_t n;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(ddpi_join_parse(bad[i], strlen(bad[i]), &v, &n), -EPROTO);
		assert_non_null(strstr(ddp_errmsg(), "malformed entry 1"));
	}
	assert_int_equal(ddpi_join_parse("", 0, &v, &n), 0);
	assert_int_equal(n, 0);
	free(v);
}

/* join/members with no line parses to no records (NULL): the checks take
 * that too (fuzz_ddp_join: memcpy from NULL, undefined, under SAN=1). */
static void test_no_records_pass_the_checks(void **state)
{
	struct ddpi_join_rec *v = (struct ddpi_join_rec *)1;
	char msg[128];
	size_t n = 7;

	assert_int_equal(ddpi_join_parse("\n\n", 2, &v, &n), 0);
	assert_int_equal(n, 0);
	assert_null(v);
	assert_int_equal(ddpi_join_duplicates(v, n, msg, sizeof(msg)), 0);
	assert_string_equal(msg, "");
	assert_int_equal(ddpi_join_check(v, n, 1, msg, sizeof(msg)), 0);
}

static void test_digest_covers_the_shared_beliefs_only(void **state)
{
	struct ddpi_join_rec a = rec(0, 4, 0, 4, 0, 1), b = rec(3, 4, 3, 4, 0, 1);
	int64_t d = ddpi_join_digest(&a);

	assert_true(d >= 0 && d <= DDPI_JOIN_MAX_WORLD);
	b.pid = 77;
	strcpy(b.host, "other");
	assert_int_equal(ddpi_join_digest(&b), d); /* rank, pid, host: not shared */
	b = a;
	b.world = 8;
	assert_int_not_equal(ddpi_join_digest(&b), d);
	b = a;
	b.nnodes = 2;
	assert_int_not_equal(ddpi_join_digest(&b), d);
	b = a;
	strcpy(b.backend, "nccl");
	assert_int_not_equal(ddpi_join_digest(&b), d);
	b = a;
	strcpy(b.version, "0.2.0");
	assert_int_not_equal(ddpi_join_digest(&b), d);
}

static void test_rank_lists_read_like_prose(void **state)
{
	char buf[200];
	int many[40];

	ddpi_join_format_ranks((int[]){3}, 1, buf, sizeof(buf));
	assert_string_equal(buf, "rank 3");
	ddpi_join_format_ranks((int[]){2, 5}, 2, buf, sizeof(buf));
	assert_string_equal(buf, "ranks 2, 5");
	ddpi_join_format_ranks((int[]){4, 5}, 2, buf, sizeof(buf));
	assert_string_equal(buf, "ranks 4, 5");
	ddpi_join_format_ranks((int[]){0, 1, 2, 7, 9, 10, 11, 12}, 8, buf, sizeof(buf));
	assert_string_equal(buf, "ranks 0-2, 7, 9-12");
	for (int i = 0; i < 40; i++)
		many[i] = 3 * i;
	ddpi_join_format_ranks(many, 40, buf, sizeof(buf));
	assert_string_equal(buf,
			    "ranks 0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 33, ... (40 in all)");
	ddpi_join_format_ranks(many, 40, buf, 16); /* truncated, still a string */
	assert_int_equal(strlen(buf), 15);
}

static void test_missing_ranks_are_named(void **state)
{
	struct ddpi_join_rec v[6];
	char buf[200];

	one_node(v, 6);
	assert_int_equal(ddpi_join_missing(v, 6, 6, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "");
	v[2] = v[4]; /* ranks 0, 1, 3, 4, 4, 5: rank 2 never came */
	assert_int_equal(ddpi_join_missing(v, 6, 6, buf, sizeof(buf)), 1);
	assert_string_equal(buf, "rank 2");
	/* the first four claim 0, 1, 4, 3 of a world of eight */
	assert_int_equal(ddpi_join_missing(v, 4, 8, buf, sizeof(buf)), 4);
	assert_string_equal(buf, "ranks 2, 5-7");
}

static void test_agreeing_ranks_pass(void **state)
{
	struct ddpi_join_rec v[4];

	one_node(v, 4);
	check_says(v, 4, 1, NULL);
	check_says(v, 2, 0, NULL); /* a partial set that agrees so far */
	/* nodes of different sizes are fine when each is filled: 3 + 1 */
	v[0] = rec(0, 4, 0, 3, 0, 2);
	v[1] = rec(1, 4, 1, 3, 0, 2);
	v[2] = rec(2, 4, 2, 3, 0, 2);
	v[3] = rec(3, 4, 0, 1, 1, 2);
	check_says(v, 4, 1, NULL);
}

static void test_the_minority_is_named_against_the_majority(void **state)
{
	struct ddpi_join_rec v[5];

	one_node(v, 4);
	v[3].world = 8;
	check_says(v, 4, 0, "rank 3 says WORLD_SIZE=8, ranks 0-2 say 4");
	one_node(v, 4);
	v[0].world = 8; /* the odd one may be rank 0 */
	check_says(v, 4, 0, "rank 0 says WORLD_SIZE=8, ranks 1-3 say 4");
	one_node(v, 4);
	v[1].nnodes = 2;
	check_says(v, 4, 0, "rank 1 says GROUP_WORLD_SIZE=2, ranks 0, 2, 3 say 1");
	one_node(v, 4);
	strcpy(v[2].backend, "nccl");
	strcpy(v[3].backend, "nccl");
	/* a tie: the side holding the lowest rank is taken as the reference */
	check_says(v, 4, 0, "ranks 2, 3 say backend=nccl, ranks 0, 1 say cpu");
	one_node(v, 4);
	strcpy(v[2].version, "0.2.0");
	check_says(v, 4, 0, "rank 2 runs libddp 0.2.0, ranks 0, 1, 3 run 0.1.0");
	one_node(v, 5);
	v[1].world = 8;
	v[4].world = 16;
	check_says(v, 5, 0,
		   "rank 1 says WORLD_SIZE=8, ranks 0, 2, 3 say 5 (and 1 more rank "
		   "disagrees)");
	/* two ranks: whoever came, both are named */
	one_node(v, 4);
	v[3].world = 8;
	check_says(v + 2, 2, 0, "rank 3 says WORLD_SIZE=8, rank 2 says 4");
}

static void test_a_rank_started_twice_is_named_with_both_processes(void **state)
{
	struct ddpi_join_rec v[4];

	one_node(v, 4);
	v[3] = rec(1, 4, 1, 4, 0, 1);
	v[3].pid = 4242;
	strcpy(v[3].host, "node7");
	check_says(v, 4, 0, "rank 1 was started twice (pid 1001 on h, pid 4242 on node7)");
	v[2] = v[3];
	check_says(v, 4, 0, "rank 1 was started 3 times (pid 1001 on h, pid 4242 on node7, ...)");
}

static void test_nodes_must_be_filled_as_they_say(void **state)
{
	struct ddpi_join_rec v[4];

	/* two nodes of two */
	for (int i = 0; i < 4; i++)
		v[i] = rec(i, 4, i % 2, 2, i / 2, 2);
	check_says(v, 4, 1, NULL);
	v[3].local_world = 3;
	check_says(v, 4, 1, "GROUP_RANK=1: rank 3 says LOCAL_WORLD_SIZE=3, rank 2 says 2");
	/* rank 1 thinks it is on node 1: node 0 has one rank, node 1 three */
	for (int i = 0; i < 4; i++)
		v[i] = rec(i, 4, i % 2, 2, i / 2, 2);
	v[1].node = 1;
	v[1].local_rank = 0;
	check_says(v, 4, 1, "GROUP_RANK=0 has 1 rank (rank 0) but LOCAL_WORLD_SIZE=2");
	v[1].local_rank = 1;
	v[0].node = 1; /* and nobody is left on node 0 */
	v[0].local_rank = 2;
	check_says(v, 4, 1, "no rank says GROUP_RANK=0 (GROUP_WORLD_SIZE=2)");
	for (int i = 0; i < 4; i++)
		v[i] = rec(i, 4, i % 2, 2, i / 2, 2);
	v[3].local_rank = 0;
	check_says(v, 4, 1, "ranks 2 and 3 both say GROUP_RANK=1 LOCAL_RANK=0");
	/* the node checks only run once everyone is there */
	check_says(v, 4, 0, NULL);
	for (int i = 0; i < 4; i++)
		v[i] = rec(i, 4, i, 4, 0, 3);
	check_says(v, 4, 1, "no rank says GROUP_RANK=1 (GROUP_WORLD_SIZE=3)");
}

/* ---- the conversation, ranks as threads ------------------------------------------------ */

struct srv {
	uv_loop_t loop;
	uv_async_t stop;
	struct store_server *s;
	pthread_t thread;
	int port;
};

static void srv_stop_cb(uv_async_t *h)
{
	struct srv *v = h->data;
	store_server_close(v->s, NULL, NULL);
	uv_close((uv_handle_t *)h, NULL);
}

static void *srv_loop(void *arg)
{
	uv_run(&((struct srv *)arg)->loop, UV_RUN_DEFAULT);
	return NULL;
}

static int srv_setup(void **state)
{
	struct srv *v = calloc(1, sizeof(*v));
	struct store_server_opts o;

	signal(SIGPIPE, SIG_IGN);
	uv_loop_init(&v->loop);
	store_server_opts_init(&o);
	/* Started here, served on the thread: the port is known on return. */
	assert_int_equal(store_server_start(&v->loop, &o, "127.0.0.1", 0, &v->s), 0);
	v->port = store_server_port(v->s);
	uv_async_init(&v->loop, &v->stop, srv_stop_cb);
	v->stop.data = v;
	pthread_create(&v->thread, NULL, srv_loop, v);
	*state = v;
	return 0;
}

static int srv_teardown(void **state)
{
	struct srv *v = *state;
	uv_async_send(&v->stop);
	pthread_join(v->thread, NULL);
	uv_loop_close(&v->loop);
	free(v);
	return 0;
}

struct rank_run {
	struct ddp_env env;
	int64_t timeout_ms;
	pthread_t thread;
	int rc;
	int connected; /* ddpi_join handed back a connection */
	char msg[512];
};

static struct ddp_env job_env(int port, const char *run_id, int rank, int world)
{
	struct ddp_env e = {.rank = rank,
			    .world = world,
			    .local_rank = rank,
			    .local_world = world,
			    .node = 0,
			    .nnodes = 1,
			    .master_port = port,
			    .use_store = 1};
	snprintf(e.master_addr, sizeof(e.master_addr), "127.0.0.1");
	snprintf(e.run_id, sizeof(e.run_id), "%s", run_id);
	return e;
}

static void *rank_main(void *arg)
{
	struct rank_run *r = arg;

	struct store_client *sc = NULL;

	r->rc = ddpi_join(&r->env, DDP_BACKEND_CPU, r->timeout_ms, util_now_ms() + r->timeout_ms,
			  &sc);
	snprintf(r->msg, sizeof(r->msg), "%s", ddp_errmsg());
	r->connected = sc != NULL;
	store_client_close(sc);
	return NULL;
}

static void start_rank(struct rank_run *r, struct ddp_env env, int64_t timeout_ms)
{
	memset(r, 0, sizeof(*r));
	r->env = env;
	r->timeout_ms = timeout_ms;
	pthread_create(&r->thread, NULL, rank_main, r);
}

/* join/count's rank count under run_id, read with a client of our own. */
static int64_t joined(int port, const char *run_id)
{
	struct store_client *c;
	char prefix[200];
	int64_t v = 0;

	assert_int_equal(store_client_connect("127.0.0.1", port, 5000, 5000, &c), 0);
	snprintf(prefix, sizeof(prefix), "ddp/%s/r0", run_id);
	store_client_set_prefix(c, prefix);
	assert_int_equal(store_client_add(c, "join/count", 0, &v), 0);
	store_client_close(c);
	return v & DDPI_JOIN_MAX_WORLD;
}

static void test_agreeing_ranks_join_and_keep_the_connection(void **state)
{
	struct srv *v = *state;
	struct rank_run r[4];

	for (int i = 0; i < 4; i++)
		start_rank(&r[i], job_env(v->port, "ok", i, 4), 10000);
	for (int i = 0; i < 4; i++) {
		pthread_join(r[i].thread, NULL);
		assert_int_equal(r[i].rc, 0);
		assert_true(r[i].connected); /* connected, for the node leaders' exchange */
	}
}

static void test_a_disagreeing_rank_arriving_last_fails_everyone_at_once(void **state)
{
	struct srv *v = *state;
	struct rank_run r[4];
	int64_t end = util_now_ms() + 10000;

	/* An init timeout far beyond the join deadline below: a verdict found
	 * only when the wait runs out (where the ranks present are checked too)
	 * does not pass. */
	for (int i = 0; i < 3; i++)
		start_rank(&r[i], job_env(v->port, "odd", i, 4), 600000);
	while (joined(v->port, "odd") < 3 && util_now_ms() < end)
		usleep(2000);
	/* Rank 3 completes the count of 4 but waits for 8 itself: without the
	 * digest in the count, everyone would wait for a verdict nobody gives. */
	struct ddp_env odd = job_env(v->port, "odd", 3, 8);
	start_rank(&r[3], odd, 600000);
	for (int i = 0; i < 4; i++) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 60;
		assert_int_equal(pthread_timedjoin_np(r[i].thread, NULL, &ts), 0);
		assert_int_equal(r[i].rc, DDP_EENV);
		assert_string_equal(r[i].msg, "rank 3 says WORLD_SIZE=8, ranks 0-2 say 4");
	}
}

static void test_a_rank_that_never_comes_is_named(void **state)
{
	struct srv *v = *state;
	struct rank_run r[2];

	start_rank(&r[0], job_env(v->port, "miss", 0, 3), 500);
	start_rank(&r[1], job_env(v->port, "miss", 2, 3), 500);
	for (int i = 0; i < 2; i++) {
		pthread_join(r[i].thread, NULL);
		assert_int_equal(r[i].rc, -ETIMEDOUT);
		assert_string_equal(r[i].msg, "rank 1 did not join within 0.45 s (2 of 3 did)");
		assert_false(r[i].connected);
	}
}

static void test_leftovers_of_an_earlier_job_are_not_taken_for_this_one(void **state)
{
	struct srv *v = *state;
	struct rank_run r[2];

	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < 2; i++)
			start_rank(&r[i], job_env(v->port, "again", i, 2), 10000);
		for (int i = 0; i < 2; i++) {
			pthread_join(r[i].thread, NULL);
			if (round == 0) {
				assert_int_equal(r[i].rc, 0);
				continue;
			}
			assert_int_equal(r[i].rc, DDP_EENV);
			assert_non_null(
				strstr(r[i].msg, "processes joined for WORLD_SIZE=2: rank "));
			assert_non_null(strstr(r[i].msg, "was started twice"));
			assert_non_null(strstr(r[i].msg, "TORCHELASTIC_RUN_ID=again"));
		}
	}
}

static void test_an_unreachable_store_is_named(void **state)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t l = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;
	struct rank_run r;
	char want[200];

	/* a port that was free a moment ago, nothing listening */
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	getsockname(fd, (struct sockaddr *)&a, &l);
	port = ntohs(a.sin_port);
	close(fd);
	start_rank(&r, job_env(port, "gone", 0, 2), 300);
	pthread_join(r.thread, NULL);
	assert_int_equal(r.rc, -ECONNREFUSED);
	snprintf(want, sizeof(want),
		 "cannot reach the store at 127.0.0.1:%d (MASTER_ADDR:MASTER_PORT) within 0.3 s: "
		 "connection refused (nothing listens at that address)",
		 port);
	assert_string_equal(r.msg, want);
}

/* A store that closes every connection at once, as PyTorch 1.x's TCPStore
 * does on the 2.x handshake. */
static void *close_all(void *arg)
{
	int lfd = *(int *)arg, fd;
	while ((fd = accept(lfd, NULL, NULL)) >= 0)
		close(fd);
	return NULL;
}

static void test_an_older_store_leaves_one_node_to_shared_memory(void **state)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t l = sizeof(a);
	int lfd = socket(AF_INET, SOCK_STREAM, 0);
	struct rank_run r;
	pthread_t t;

	assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(lfd, 8), 0);
	getsockname(lfd, (struct sockaddr *)&a, &l);
	pthread_create(&t, NULL, close_all, &lfd);
	/* rank 1: rank 0 alone says so on stderr */
	start_rank(&r, job_env(ntohs(a.sin_port), "old", 1, 2), 5000);
	pthread_join(r.thread, NULL);
	assert_int_equal(r.rc, 0);
	assert_false(r.connected);
	/* two nodes cannot do without it */
	struct ddp_env two = job_env(ntohs(a.sin_port), "old", 1, 2);
	two.local_world = 1;
	two.local_rank = 0;
	two.node = 1;
	two.nnodes = 2;
	start_rank(&r, two, 5000);
	pthread_join(r.thread, NULL);
	assert_true(r.rc == -ECONNRESET || r.rc == -EPIPE);
	assert_non_null(strstr(r.msg, "does not speak PyTorch's TCPStore 2.x protocol"));
	shutdown(lfd, SHUT_RDWR);
	close(lfd);
	pthread_join(t, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_record_round_trip),
		cmocka_unit_test(test_malformed_members_are_a_protocol_error),
		cmocka_unit_test(test_no_records_pass_the_checks),
		cmocka_unit_test(test_digest_covers_the_shared_beliefs_only),
		cmocka_unit_test(test_rank_lists_read_like_prose),
		cmocka_unit_test(test_missing_ranks_are_named),
		cmocka_unit_test(test_agreeing_ranks_pass),
		cmocka_unit_test(test_the_minority_is_named_against_the_majority),
		cmocka_unit_test(test_a_rank_started_twice_is_named_with_both_processes),
		cmocka_unit_test(test_nodes_must_be_filled_as_they_say),
		cmocka_unit_test_setup_teardown(test_agreeing_ranks_join_and_keep_the_connection,
						srv_setup, srv_teardown),
		cmocka_unit_test_setup_teardown(
			test_a_disagreeing_rank_arriving_last_fails_everyone_at_once, srv_setup,
			srv_teardown),
		cmocka_unit_test_setup_teardown(test_a_rank_that_never_comes_is_named, srv_setup,
						srv_teardown),
		cmocka_unit_test_setup_teardown(
			test_leftovers_of_an_earlier_job_are_not_taken_for_this_one, srv_setup,
			srv_teardown),
		cmocka_unit_test(test_an_unreachable_store_is_named),
		cmocka_unit_test(test_an_older_store_leaves_one_node_to_shared_memory),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
