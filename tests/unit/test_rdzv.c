/* Unit tests for the node rendezvous's building blocks: --rdzv-conf parsing
 * (torchrun's keys, ddprun's defaults, clear errors) and the values kept in
 * the store (node descriptors, job config and its comparison, closed, meta,
 * end), including malformed input from the network. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv_conf.h"
#include "rdzv_msg.h"

static void test_conf_defaults_are_ddpruns(void **state)
{
	struct rdzv_conf c;
	char err[256];

	rdzv_conf_default(&c);
	assert_int_equal(rdzv_conf_parse("", &c, err, sizeof(err)), 0);
	assert_int_equal(c.join_timeout_ms, 600000);
	assert_int_equal(c.last_call_timeout_ms, 30000);
	assert_int_equal(c.heartbeat_timeout_ms, 5000);
	assert_int_equal(c.keep_alive_interval_ms, 1000);
	assert_int_equal(c.exit_barrier_timeout_ms, 300000);
	assert_int_equal(c.is_host, -1);
}

static void test_conf_accepts_torchruns_keys(void **state)
{
	struct rdzv_conf c;
	char err[256];

	rdzv_conf_default(&c);
	assert_int_equal(rdzv_conf_parse("join_timeout=20, last_call_timeout=0.5,"
					 "heartbeat_timeout=0.8,keep_alive_interval=0.2,"
					 "keep_alive_max_attempt=4,read_timeout=9,close_timeout=3,"
					 "timeout=7,is_host=true,exit_barrier_timeout=0",
					 &c, err, sizeof(err)),
			 0);
	assert_int_equal(c.join_timeout_ms, 20000);
	assert_int_equal(c.last_call_timeout_ms, 500);
	assert_int_equal(c.heartbeat_timeout_ms, 800);
	assert_int_equal(c.keep_alive_interval_ms, 200);
	assert_int_equal(c.keep_alive_max_attempt, 4);
	assert_int_equal(c.read_timeout_ms, 9000);
	assert_int_equal(c.close_timeout_ms, 3000);
	assert_int_equal(c.timeout_ms, 7000);
	assert_int_equal(c.is_host, 1);
	assert_int_equal(c.exit_barrier_timeout_ms, 0);
	assert_int_equal(rdzv_conf_parse("is_host=0", &c, err, sizeof(err)), 0);
	assert_int_equal(c.is_host, 0);
}

static void expect_conf_error(const char *s, const char *says)
{
	struct rdzv_conf c;
	char err[512] = "";

	rdzv_conf_default(&c);
	assert_int_equal(rdzv_conf_parse(s, &c, err, sizeof(err)), -EINVAL);
	if (strstr(err, says) == NULL)
		fail_msg("'%s': error '%s' does not say '%s'", s, err, says);
}

static int64_t heartbeat_ms(const char *s)
{
	struct rdzv_conf c;
	char err[512] = "";

	rdzv_conf_default(&c);
	if (rdzv_conf_parse(s, &c, err, sizeof(err)) != 0)
		fail_msg("'%s': %s", s, err);
	return c.heartbeat_timeout_ms;
}

/* torchrun drops a node after keep_alive_interval x keep_alive_max_attempt
 * without a heartbeat: so does ddprun when heartbeat_timeout is not given.
 * keep_alive_interval=5 (torchrun's default) took every healthy node for
 * lost after ddprun's 5 s, and keep_alive_max_attempt was never read. */
static void test_conf_heartbeat_timeout_follows_torchruns_keep_alive(void **state)
{
	(void)state;
	assert_int_equal(heartbeat_ms(""), 5000); /* ddprun's own */
	assert_int_equal(heartbeat_ms("keep_alive_interval=5"), 15000);
	assert_int_equal(heartbeat_ms("keep_alive_interval=5,keep_alive_max_attempt=4"), 20000);
	assert_int_equal(heartbeat_ms("keep_alive_max_attempt=2"), 2000);
	assert_int_equal(heartbeat_ms("heartbeat_timeout=30,keep_alive_interval=5"), 30000);
	assert_int_equal(heartbeat_ms("heartbeat_timeout=15,keep_alive_interval=5,"
				      "keep_alive_max_attempt=3"),
			 15000);
}

/* Settings under which a healthy node is lost, or that say two things. */
static void test_conf_refuses_a_heartbeat_timeout_a_late_beat_would_pass(void **state)
{
	(void)state;
	expect_conf_error("keep_alive_interval=5,heartbeat_timeout=5",
			  "heartbeat_timeout=5 is below two keep_alive_intervals (5 s each)");
	expect_conf_error("heartbeat_timeout=1.5", "heartbeat_timeout=1.5 is below two");
	expect_conf_error("keep_alive_max_attempt=1", "keep_alive_max_attempt=1: a healthy node");
	expect_conf_error("keep_alive_interval=5,keep_alive_max_attempt=3,heartbeat_timeout=20",
			  "heartbeat_timeout=20 contradicts keep_alive_max_attempt=3");
}

/* torchrun 2.x passes keys its backend does not read (use_libuv,
 * store_type): so does ddprun, naming them for one warning. */
static void test_conf_passes_unknown_keys_over(void **state)
{
	struct rdzv_conf c;
	char err[512] = "";

	(void)state;
	rdzv_conf_default(&c);
	assert_string_equal(c.unknown, "");
	assert_int_equal(rdzv_conf_parse("use_libuv=1, join_timeout=7,store_type=file", &c, err,
					 sizeof(err)),
			 0);
	assert_int_equal(c.join_timeout_ms, 7000);
	assert_string_equal(c.unknown, "use_libuv, store_type");
	expect_conf_error("use_libuv=1,join_timeout=x", "join_timeout=x");
}

/* A long list of unknown keys is cut with ", ..." inside the buffer: one
 * key of 251 characters left room for 4 more, not the 5 of ", ..." and its
 * NUL (fuzz_rdzv_conf). */
static void test_conf_unknown_keys_are_cut_within_bounds(void **state)
{
	char s[300], err[512] = "";
	struct rdzv_conf c;
	size_t k;

	(void)state;
	for (k = 246; k <= 252; k++) {
		memset(s, 'k', k);
		strcpy(s + k, "=1,ab=2,cd=3");
		rdzv_conf_default(&c);
		assert_int_equal(rdzv_conf_parse(s, &c, err, sizeof(err)), 0);
		assert_true(strlen(c.unknown) < sizeof(c.unknown));
		assert_int_equal(strncmp(c.unknown, s, k), 0);
		if (k <= 250) /* ", ab" fits */
			assert_int_equal(strncmp(c.unknown + k, ", ab", 4), 0);
		else /* nothing more does */
			assert_int_equal(strlen(c.unknown), k);
	}
	memset(s, 'k', 240);
	strcpy(s + 240, "=1,xxxxxxxxxxxxxxxxxxxx=2");
	rdzv_conf_default(&c);
	assert_int_equal(rdzv_conf_parse(s, &c, err, sizeof(err)), 0);
	assert_string_equal(c.unknown + 240, ", ...");
}

static void test_conf_errors_name_the_key(void **state)
{
	/* One line, whatever the item holds (fuzz_rdzv_conf: "kee\n ="). */
	expect_conf_error("kee\n =", "'kee? =' is not KEY=VALUE");
	expect_conf_error("join_timeout=\0335", "join_timeout=?5: expected");
	expect_conf_error("join_timeout", "not KEY=VALUE");
	expect_conf_error("join_timeout=", "not KEY=VALUE");
	expect_conf_error("=3", "not KEY=VALUE");
	expect_conf_error("join_timeout=soon", "join_timeout=soon");
	expect_conf_error("join_timeout=0", "above 0");
	expect_conf_error("heartbeat_timeout=-1", "heartbeat_timeout");
	expect_conf_error("is_host=maybe", "is_host");
	expect_conf_error("keep_alive_max_attempt=0", "keep_alive_max_attempt");
}

static void test_node_descriptor_round_trips(void **state)
{
	struct rdzv_node n = {.host = "node-a",
			      .addr = "10.0.0.1",
			      .nproc = 4,
			      .pid = 123,
			      .node_rank = 2,
			      .worker_port = 29501};
	struct rdzv_node m;
	char *s = rdzv_node_encode(&n);

	assert_non_null(s);
	assert_int_equal(rdzv_node_decode(s, strlen(s), &m), 0);
	assert_string_equal(m.host, "node-a");
	assert_string_equal(m.addr, "10.0.0.1");
	assert_int_equal(m.nproc, 4);
	assert_int_equal(m.pid, 123);
	assert_int_equal(m.node_rank, 2);
	assert_int_equal(m.worker_port, 29501);
	free(s);
	assert_int_equal(rdzv_node_decode("{}", 2, &m), -EINVAL);
	assert_int_equal(rdzv_node_decode("[1]", 3, &m), -EINVAL);
	assert_int_equal(rdzv_node_decode("not json", 8, &m), -EINVAL);
	assert_int_equal(rdzv_node_decode(NULL, 0, &m), -EINVAL);
	s = "{\"host\":\"h\",\"addr\":\"a\",\"nproc\":0,\"pid\":1,\"node_rank\":0,\"worker_port\":"
	    "0}";
	assert_int_equal(rdzv_node_decode(s, strlen(s), &m), -EINVAL); /* nproc >= 1 */
}

static void test_config_diff_names_both_nodes(void **state)
{
	struct rdzv_config a = {.backend = "static",
				.min_nodes = 2,
				.max_nodes = 2,
				.max_restarts = 1,
				.version = "0.1.0",
				.node_rank = 1,
				.host = "b"};
	struct rdzv_config b, c;
	char msg[512], *s = rdzv_config_encode(&a);

	assert_int_equal(rdzv_config_decode(s, strlen(s), &b), 0);
	free(s);
	b.node_rank = 0;
	strcpy(b.host, "a");
	/* The writer does not count: the same job. */
	assert_int_equal(rdzv_config_diff(&a, &b, msg, sizeof(msg)), 0);
	c = b;
	c.min_nodes = c.max_nodes = 3;
	assert_int_equal(rdzv_config_diff(&a, &c, msg, sizeof(msg)), 1);
	assert_string_equal(msg, "--nnodes differs: 2 on node 1 (host b), 3 on node 0 (host a)");
	c = b;
	c.max_restarts = 0;
	assert_int_equal(rdzv_config_diff(&a, &c, msg, sizeof(msg)), 1);
	assert_non_null(strstr(msg, "--max-restarts differs: 1 on node 1"));
	c = b;
	strcpy(c.version, "0.2.0");
	assert_int_equal(rdzv_config_diff(&a, &c, msg, sizeof(msg)), 1);
	assert_non_null(strstr(msg, "ddprun version differs: 0.1.0 on node 1 (host b), 0.2.0"));
	/* Another build of the same version: an older one beats only while its
	 * workers run, and a newer host takes it for lost between attempts (2);
	 * a dynamic round's last call waits for its nodes of the round before,
	 * which an older one never says where they are (3). */
	c = b;
	strcpy(c.protocol, RDZV_PROTOCOL);
	assert_int_equal(rdzv_config_diff(&a, &c, msg, sizeof(msg)), 1);
	assert_string_equal(msg, "ddprun rendezvous protocol (run the same ddprun build on every "
				 "node) differs: 1 (older) on node 1 (host b), " RDZV_PROTOCOL
				 " on node 0 (host a)");
	c = b;
	strcpy(c.hang_timeout, "30");
	assert_int_equal(rdzv_config_diff(&a, &c, msg, sizeof(msg)), 1);
	assert_string_equal(msg, "--hang-timeout differs: off on node 1 (host b), 30 on node 0 "
				 "(host a)");
	/* The waits for the others' lists and leaving count on every node's. */
	c = b;
	strcpy(c.shutdown_timeout, "5");
	assert_int_equal(rdzv_config_diff(&a, &c, msg, sizeof(msg)), 1);
	assert_string_equal(msg, "--shutdown-timeout differs: the default on node 1 (host b), 5 "
				 "on node 0 (host a)");
	/* The store's host judges every node's heartbeats by its own timeout. */
	c = b;
	strcpy(c.keep_alive_interval, "4");
	assert_int_equal(rdzv_config_diff(&a, &c, msg, sizeof(msg)), 1);
	assert_string_equal(msg, "--rdzv-conf keep_alive_interval differs: the default on node 1 "
				 "(host b), 4 on node 0 (host a)");
	c = b;
	strcpy(c.heartbeat_timeout, "12");
	s = rdzv_config_encode(&c);
	assert_int_equal(rdzv_config_decode(s, strlen(s), &c), 0);
	free(s);
	assert_int_equal(rdzv_config_diff(&a, &c, msg, sizeof(msg)), 1);
	assert_non_null(
		strstr(msg, "--rdzv-conf heartbeat_timeout differs: the default on node 1"));
}

static void test_closed_is_a_count_or_an_error(void **state)
{
	char msg[128], *e;
	int n = 0, st = 0;

	assert_int_equal(rdzv_closed_decode("4", 1, &n, &st, msg, sizeof(msg)), 0);
	assert_int_equal(n, 4);
	e = rdzv_closed_error(2, "node rank 1 claimed twice");
	assert_int_equal(rdzv_closed_decode(e, strlen(e), &n, &st, msg, sizeof(msg)), 1);
	assert_int_equal(st, 2);
	assert_string_equal(msg, "node rank 1 claimed twice");
	free(e);
	assert_int_equal(rdzv_closed_decode("0", 1, &n, &st, msg, sizeof(msg)), -EINVAL);
	assert_int_equal(rdzv_closed_decode("x", 1, &n, &st, msg, sizeof(msg)), -EINVAL);
	assert_int_equal(rdzv_closed_decode("error:x:m", 9, &n, &st, msg, sizeof(msg)), -EINVAL);
	assert_int_equal(rdzv_closed_decode("error:", 6, &n, &st, msg, sizeof(msg)), -EINVAL);
}

/* A round that closes without a node that left: the participants by arrival. */
static void test_closed_names_its_participants(void **state)
{
	int all[3] = {1, 2, 3}, some[4] = {1, 3, 4, 7}, got[4] = {0}, n = 0, st = 0;
	char msg[64], *e;

	e = rdzv_closed_encode(all, 3);
	assert_string_equal(e, "3");
	assert_int_equal(rdzv_closed_members(e, strlen(e), got, 3), 0);
	assert_int_equal(got[2], 3);
	free(e);
	e = rdzv_closed_encode(some, 4);
	assert_string_equal(e, "4:1,3-4,7");
	assert_int_equal(rdzv_closed_decode(e, strlen(e), &n, &st, msg, sizeof(msg)), 0);
	assert_int_equal(n, 4);
	assert_int_equal(rdzv_closed_members(e, strlen(e), got, 4), 0);
	assert_memory_equal(got, some, sizeof(some));
	/* Too few or too many arrivals for the count, or out of order. */
	assert_int_equal(rdzv_closed_members(e, strlen(e), got, 3), -EINVAL);
	free(e);
	assert_int_equal(rdzv_closed_members("3:1-2", 5, got, 3), -EINVAL);
	assert_int_equal(rdzv_closed_members("2:3,1", 5, got, 2), -EINVAL);
	assert_int_equal(rdzv_closed_members("2:1,", 4, got, 2), -EINVAL);
	assert_int_equal(rdzv_closed_members("2:2-1", 5, got, 2), -EINVAL);
	/* Up to the largest int, without stepping past it (fuzz_rdzv_msg:
	 * "1:2147483647" overflowed the next arrival, undefined). */
	assert_int_equal(rdzv_closed_members("1:2147483647", 12, got, 1), 0);
	assert_int_equal(got[0], INT_MAX);
	assert_int_equal(rdzv_closed_members("3:5,2147483646-2147483647", 25, got, 3), 0);
	assert_int_equal(got[0], 5);
	assert_int_equal(got[1], INT_MAX - 1);
	assert_int_equal(got[2], INT_MAX);
	assert_int_equal(rdzv_closed_members("2:2147483647,5", 14, got, 2), -EINVAL);
	assert_int_equal(rdzv_closed_members("2:2147483647,2147483648", 23, got, 2), -EINVAL);
	assert_int_equal(rdzv_closed_members("2:1-2147483647", 14, got, 2), -EINVAL);
}

static void test_meta_round_trips(void **state)
{
	char *s = rdzv_meta_encode(3);
	int n = 0;

	assert_int_equal(rdzv_meta_decode(s, strlen(s), &n), 0);
	assert_int_equal(n, 3);
	free(s);
	assert_int_equal(rdzv_meta_decode("{\"restart_count\":-1}", 20, &n), -EINVAL);
}

static void test_end_values(void **state)
{
	struct rdzv_end f = {.kind = RDZV_END_FAIL,
			     .node = 1,
			     .host = "b",
			     .rank = 3,
			     .local_rank = 1,
			     .pid = 77,
			     .status = 5,
			     .time_us = 1700000000123456};
	struct rdzv_end g;
	char *s = rdzv_end_encode(&f);

	assert_int_equal(rdzv_end_decode(s, strlen(s), &g), 0);
	free(s);
	assert_int_equal(g.kind, RDZV_END_FAIL);
	assert_int_equal(g.node, 1);
	assert_string_equal(g.host, "b");
	assert_int_equal(g.rank, 3);
	assert_int_equal(g.local_rank, 1);
	assert_int_equal(g.pid, 77);
	assert_int_equal(g.status, 5);
	assert_false(g.final);
	assert_int_equal(g.time_us, 1700000000123456);
	assert_string_equal(g.caused_by, ""); /* a primary failure */
	/* Exact up to 2^53 (found by the fuzzer: cJSON's 15 digits lost one). */
	for (int k = 0; k < 2; k++) {
		f.time_us = k ? 9007199254740991 : 6000000328365259;
		s = rdzv_end_encode(&f);
		assert_int_equal(rdzv_end_decode(s, strlen(s), &g), 0);
		free(s);
		assert_int_equal(g.time_us, f.time_us);
	}
	strcpy(f.caused_by, "rank 2 (pid 9) exited");
	s = rdzv_end_encode(&f);
	assert_int_equal(rdzv_end_decode(s, strlen(s), &g), 0);
	free(s);
	assert_string_equal(g.caused_by, "rank 2 (pid 9) exited");
	assert_string_equal(g.culprit, ""); /* none named */
	/* A hang's end names the rank its verdict found the others waited
	 * for; an older node's end, without the field, names none. */
	strcpy(f.culprit, "12");
	s = rdzv_end_encode(&f);
	assert_int_equal(rdzv_end_decode(s, strlen(s), &g), 0);
	free(s);
	assert_string_equal(g.culprit, "12");

	assert_int_equal(rdzv_end_decode("ok", 2, &g), 0);
	assert_int_equal(g.kind, RDZV_END_OK);
	assert_int_equal(rdzv_end_decode("rejoin", 6, &g), 0);
	assert_int_equal(g.kind, RDZV_END_REJOIN);
	assert_int_equal(g.node, -1); /* a node waits to join: none named */
	assert_int_equal(rdzv_end_decode("rejoin:3:no descriptor", 22, &g), 0);
	assert_int_equal(g.kind, RDZV_END_REJOIN);
	assert_int_equal(g.node, 3);
	assert_string_equal(g.why, "no descriptor");
	f.kind = RDZV_END_REJOIN;
	f.node = -1;
	s = rdzv_end_encode(&f);
	assert_string_equal(s, "rejoin");
	free(s);
	f.node = 0;
	strcpy(f.why, "no descriptor");
	s = rdzv_end_encode(&f);
	assert_string_equal(s, "rejoin:0:no descriptor");
	free(s);
	f.node = 1;
	assert_int_equal(rdzv_end_decode("rejoin:", 7, &g), -EINVAL);
	assert_int_equal(rdzv_end_decode("rejoin:x:y", 10, &g), -EINVAL);
	assert_int_equal(rdzv_end_decode("lost:2:the agent on host c exited", 33, &g), 0);
	assert_int_equal(g.kind, RDZV_END_LOST);
	assert_int_equal(g.node, 2);
	assert_string_equal(g.why, "the agent on host c exited");
	f.kind = RDZV_END_LOST;
	strcpy(f.why, "no heartbeat for 5 s");
	s = rdzv_end_encode(&f);
	assert_string_equal(s, "lost:1:no heartbeat for 5 s");
	free(s);

	assert_int_equal(rdzv_end_decode("lost::x", 7, &g), -EINVAL);
	assert_int_equal(rdzv_end_decode("lost:1", 6, &g), -EINVAL);
	assert_int_equal(rdzv_end_decode("okay", 4, &g), -EINVAL);
	assert_int_equal(rdzv_end_decode("{\"fail\":{}}", 11, &g), -EINVAL);
	assert_int_equal(rdzv_end_decode("{\"fail\":1}", 10, &g), -EINVAL);
	assert_int_equal(rdzv_end_decode("", 0, &g), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_conf_defaults_are_ddpruns),
		cmocka_unit_test(test_conf_accepts_torchruns_keys),
		cmocka_unit_test(test_conf_errors_name_the_key),
		cmocka_unit_test(test_conf_heartbeat_timeout_follows_torchruns_keep_alive),
		cmocka_unit_test(test_conf_refuses_a_heartbeat_timeout_a_late_beat_would_pass),
		cmocka_unit_test(test_conf_passes_unknown_keys_over),
		cmocka_unit_test(test_conf_unknown_keys_are_cut_within_bounds),
		cmocka_unit_test(test_node_descriptor_round_trips),
		cmocka_unit_test(test_config_diff_names_both_nodes),
		cmocka_unit_test(test_closed_is_a_count_or_an_error),
		cmocka_unit_test(test_closed_names_its_participants),
		cmocka_unit_test(test_meta_round_trips),
		cmocka_unit_test(test_end_values),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
