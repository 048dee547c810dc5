/* Unit tests for rdzv_codec, the table-driven JSON objects of the rendezvous
 * values: every message round-trips through its table with the same bytes,
 * and each kind of malformed input (not JSON, not an object, a field missing,
 * of the wrong type, out of bounds, a string too long for its buffer, a
 * value too long) is rejected with -EINVAL. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv_codec.h"
#include "rdzv_msg.h"

/* One field of every type: all_msg is its object, wrapped_msg the same
 * inside {"w": {...}}. */
struct all {
	int i;
	int64_t big;
	bool b;
	char s[8];
	int lo, hi;
	char opt[8];
};

static const struct rdzv_field all_fields[] = {
	RDZV_INT(struct all, i, -1, 100),
	RDZV_I64(struct all, big, 0, (int64_t)1 << 53),
	RDZV_BOOL(struct all, b),
	RDZV_STR(struct all, s, 0),
	RDZV_INT_PAIR("pair", struct all, lo, hi, 1, 9),
	RDZV_STR(struct all, opt, RDZV_F_OPTIONAL),
};
static const struct rdzv_msgdef all_msg = RDZV_MSGDEF(NULL, all_fields);
static const struct rdzv_msgdef wrapped_msg = RDZV_MSGDEF("w", all_fields);

static int decode(const struct rdzv_msgdef *d, const char *text, struct all *out)
{
	return rdzv_codec_decode(d, text, strlen(text), out);
}

static void test_every_type_round_trips(void **state)
{
	struct all a = {.i = -1,
			.big = 1700000000123456,
			.b = true,
			.s = "abcdefg",
			.lo = 2,
			.hi = 9,
			.opt = "x"},
		   b;
	char *s = rdzv_codec_encode(&all_msg, &a);

	assert_string_equal(s, "{\"i\":-1,\"big\":1700000000123456,\"b\":true,\"s\":\"abcdefg\","
			       "\"pair\":\"2:9\",\"opt\":\"x\"}");
	memset(&b, 0x55, sizeof(b));
	assert_int_equal(decode(&all_msg, s, &b), 0);
	free(s);
	assert_int_equal(b.i, -1);
	assert_int_equal(b.big, 1700000000123456);
	assert_true(b.b);
	assert_string_equal(b.s, "abcdefg");
	assert_int_equal(b.lo, 2);
	assert_int_equal(b.hi, 9);
	assert_string_equal(b.opt, "x");

	/* An empty optional string is left out, and reads back empty. */
	a.opt[0] = '\0';
	a.b = false;
	s = rdzv_codec_encode(&wrapped_msg, &a);
	assert_string_equal(s, "{\"w\":{\"i\":-1,\"big\":1700000000123456,\"b\":false,"
			       "\"s\":\"abcdefg\",\"pair\":\"2:9\"}}");
	assert_int_equal(decode(&wrapped_msg, s, &b), 0);
	free(s);
	assert_string_equal(b.opt, "");
	assert_false(b.b);
}

/* all_msg's keys, in order, and a value of each that decodes. */
#define NKEYS 6
static const char *const keys[NKEYS] = {"i", "big", "b", "s", "pair", "opt"};
static const char *const good_value[NKEYS] = {"1", "2", "true", "\"x\"", "\"1:2\"", "\"y\""};
/* Values each key must refuse: of the wrong type, out of bounds (a number no
 * int64_t holds among them), a pair that is not "A:B" of ints in bounds, a
 * string too long for its buffer (7 characters fit, 8 do not). */
static const char *const bad_values[NKEYS][8] = {
	{"\"1\"", "-2", "101", "null"},
	{"null", "-1", "1e300", "1e999"},
	{"1", "\"true\""},
	{"7", "\"12345678\""},
	{"12", "\"1\"", "\"0:2\"", "\"1:10\"", "\"1:2x\"", "\":2\""},
	{"false", "\"12345678\""}};

/* The object of good values but key k's, which is v (left out when NULL). */
static void object_but(size_t k, const char *v, char *buf, size_t len)
{
	const char *sep = "{";
	size_t i, at = 0;

	for (i = 0; i < NKEYS; i++) {
		const char *val = i == k ? v : good_value[i];

		if (val != NULL)
			at += (size_t)snprintf(buf + at, len - at, "%s\"%s\":%s", sep, keys[i],
					       val);
		sep = val != NULL ? "," : sep;
	}
	snprintf(buf + at, len - at, "}");
}

static void test_each_kind_of_malformed_input_is_rejected(void **state)
{
	/* Not JSON, not an object, cut short, a key in the wrong case. */
	static const char *const junk[] = {
		"not json", "[1]", "\"s\"", "{\"i\":1",
		"{\"I\":1,\"big\":2,\"b\":true,\"s\":\"x\",\"pair\":\"1:2\"}"};
	struct all out;
	char text[256], *big;
	size_t i, j;

	object_but(NKEYS, NULL, text, sizeof(text));
	assert_int_equal(decode(&all_msg, text, &out), 0);
	for (i = 0; i < NKEYS; i++) {
		/* Each key left out: only the optional one may be. */
		object_but(i, NULL, text, sizeof(text));
		assert_int_equal(decode(&all_msg, text, &out), i == NKEYS - 1 ? 0 : -EINVAL);
		for (j = 0; bad_values[i][j] != NULL; j++) {
			object_but(i, bad_values[i][j], text, sizeof(text));
			if (decode(&all_msg, text, &out) != -EINVAL)
				fail_msg("accepted: %s", text);
		}
	}
	for (i = 0; i < sizeof(junk) / sizeof(junk[0]); i++)
		assert_int_equal(decode(&all_msg, junk[i], &out), -EINVAL);
	/* The wrapper: there and an object, or nothing. */
	object_but(NKEYS, NULL, text, sizeof(text));
	assert_int_equal(decode(&wrapped_msg, text, &out), -EINVAL);
	assert_int_equal(decode(&wrapped_msg, "{\"w\":1}", &out), -EINVAL);
	assert_int_equal(decode(&wrapped_msg, "{\"w\":[]}", &out), -EINVAL);
	assert_int_equal(rdzv_codec_decode(&all_msg, NULL, 0, &out), -EINVAL);
	assert_int_equal(rdzv_codec_decode(&all_msg, "{}", 0, &out), -EINVAL);
	/* A value longer than any of ours, however well-formed. */
	big = malloc(RDZV_MSG_MAX + 2);
	assert_non_null(big);
	memset(big, ' ', RDZV_MSG_MAX + 1);
	object_but(NKEYS, NULL, text, sizeof(text));
	memcpy(big, text, strlen(text));
	big[RDZV_MSG_MAX + 1] = '\0';
	assert_int_equal(rdzv_codec_decode(&all_msg, big, RDZV_MSG_MAX, &out), 0);
	assert_int_equal(rdzv_codec_decode(&all_msg, big, RDZV_MSG_MAX + 1, &out), -EINVAL);
	free(big);
}

enum which { NODE_MSG, CONFIG_MSG, END_MSG };

/* The message w from s into dst, a zeroed struct of w's type (or NULL). */
static int msg_decode(enum which w, const char *s, void *dst)
{
	union {
		struct rdzv_node n;
		struct rdzv_config c;
		struct rdzv_end e;
	} any;
	void *to = dst ? dst : &any;

	switch (w) {
	case NODE_MSG:
		return rdzv_node_decode(s, strlen(s), to);
	case CONFIG_MSG:
		return rdzv_config_decode(s, strlen(s), to);
	case END_MSG:
		break;
	}
	return rdzv_end_decode(s, strlen(s), to);
}

/* text, malloc'd by an encoder, is want and decodes to msg (size bytes, every
 * one set, padding and string tails included); frees text. */
static void round_trip(enum which w, char *text, const char *want, const void *msg, size_t size)
{
	void *back = calloc(1, size);

	assert_non_null(back);
	assert_string_equal(text, want);
	assert_int_equal(msg_decode(w, text, back), 0);
	assert_memory_equal(back, msg, size);
	free(back);
	free(text);
}

/* Every rendezvous message through rdzv_msg.h: the bytes ddprun writes (the
 * launcher's reports and `ddpstore status` read them) and back. */
/* Only a string has an "absent" value: a table that marks an int optional
 * is refused when the field is missing, not left with one byte zeroed. */
static void test_an_optional_non_string_field_is_refused_when_absent(void **state)
{
	static const struct rdzv_field f[] = {
		RDZV_INT(struct all, i, -1, 100),
		{"lo", RDZV_F_INT, offsetof(struct all, lo), 0, 0, 0, 9, RDZV_F_OPTIONAL},
	};
	static const struct rdzv_msgdef d = RDZV_MSGDEF(NULL, f);
	struct all out;

	memset(&out, 0x55, sizeof(out));
	assert_int_equal(decode(&d, "{\"i\":3}", &out), -EINVAL);
	assert_int_equal(decode(&d, "{\"i\":3,\"lo\":4}", &out), 0);
	assert_int_equal(out.lo, 4);
}

static void test_every_message_round_trips(void **state)
{
	/* In struct order: host, addr, nproc, pid, node_rank, worker_port, role. */
	struct rdzv_node n = {"a\"b", "::1", 8, 9, 1, 65535, "ps", "2"};
	/* backend, min and max nodes, max_restarts, version, node_rank, host,
	 * hang_timeout, shutdown_timeout, keep_alive_interval, heartbeat_timeout. */
	struct rdzv_config c = {"c10d", 1, 4, 3, "0.1.0", -1, "h", "2.5", "7", "0.5", "12", "2"};
	struct rdzv_end e;
	char *s;
	int rc = 0;

	memset(&e, 0, sizeof(e));
	e.kind = RDZV_END_FAIL;
	e.rank = e.local_rank = -1;
	e.pid = 5;
	e.status = 255;
	e.signal = 15;
	e.final = true;
	strcpy(e.host, "h");
	strcpy(e.caused_by, "rank 1");
	round_trip(NODE_MSG, rdzv_node_encode(&n),
		   "{\"host\":\"a\\\"b\",\"addr\":\"::1\",\"nproc\":8,\"pid\":9,"
		   "\"node_rank\":1,\"worker_port\":65535,\"role\":\"ps\",\"protocol\":\"2\"}",
		   &n, sizeof(n));
	round_trip(CONFIG_MSG, rdzv_config_encode(&c),
		   "{\"backend\":\"c10d\",\"nnodes\":\"1:4\",\"max_restarts\":3,"
		   "\"version\":\"0.1.0\",\"node_rank\":-1,\"host\":\"h\",\"hang_timeout\":\"2.5\","
		   "\"shutdown_timeout\":\"7\",\"keep_alive_interval\":\"0.5\","
		   "\"heartbeat_timeout\":\"12\",\"protocol\":\"2\"}",
		   &c, sizeof(c));
	round_trip(END_MSG, rdzv_end_encode(&e),
		   "{\"fail\":{\"node\":0,\"host\":\"h\",\"rank\":-1,\"local_rank\":-1,"
		   "\"pid\":5,\"status\":255,\"signal\":15,\"final\":true,"
		   "\"time_us\":0,\"caused_by\":\"rank 1\"}}",
		   &e, sizeof(e));
	s = rdzv_meta_encode(0);
	assert_string_equal(s, "{\"restart_count\":0}");
	assert_int_equal(rdzv_meta_decode(s, strlen(s), &rc), 0);
	free(s);
	assert_int_equal(rc, 0);
}

#define NODE(rank, port)                                                           \
	"{\"host\":\"h\",\"addr\":\"a\",\"nproc\":1,\"pid\":1,\"node_rank\":" rank \
	",\"worker_port\":" port "}"
#define CONFIG(backend, nnodes, rank)                                                \
	"{\"backend\":\"" backend "\",\"nnodes\":\"" nnodes "\",\"max_restarts\":0," \
	"\"version\":\"v\",\"node_rank\":" rank ",\"host\":\"h\"}"
#define FAIL(status, final, time)                                                       \
	"{\"fail\":{\"node\":0,\"host\":\"h\",\"rank\":-1,\"local_rank\":-1,\"pid\":5," \
	"\"status\":" status ",\"signal\":0,\"final\":" final ",\"time_us\":" time "}}"

/* The bounds each message's table sets, one past each. */
static void test_message_bounds_hold(void **state)
{
	static const struct {
		enum which w;
		const char *text;
	} good[] = {{NODE_MSG, NODE("0", "65535")},
		    {CONFIG_MSG, CONFIG("0123456789abcde", "1:2", "-1")},
		    {END_MSG, FAIL("255", "true", "0")},
		    {NODE_MSG, NODE("2.0", "65535")}}, /* whole, however it is written */
		bad[] = {
			{NODE_MSG, NODE("0", "65536")},
			{NODE_MSG, NODE("-1", "0")},
			{CONFIG_MSG, CONFIG("b", "1:2", "-2")},
			{CONFIG_MSG, CONFIG("0123456789abcdef", "1:2", "0")},
			{END_MSG, FAIL("256", "true", "0")},
			{END_MSG, FAIL("0", "true", "0")},
			{END_MSG, FAIL("1", "\"yes\"", "0")},
			/* Stricter than the hand-written decoders were: a time_us no
		   * int64_t holds (its conversion was undefined), a count pair
		   * with a tail. */
			{END_MSG, FAIL("1", "true", "1e300")},
			{CONFIG_MSG, CONFIG("b", "1:2x", "0")},
			/* a fraction is not truncated into a whole number */
			{NODE_MSG, NODE("1.7", "0")},
			{NODE_MSG, NODE("0", "80.5")},
			{END_MSG, FAIL("1", "true", "0.25")},
			{CONFIG_MSG, CONFIG("b", "1:2", "-0.5")},
		};
	size_t i;

	for (i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		if (msg_decode(good[i].w, good[i].text, NULL) != 0)
			fail_msg("rejected: %s", good[i].text);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (msg_decode(bad[i].w, bad[i].text, NULL) != -EINVAL)
			fail_msg("accepted: %s", bad[i].text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_type_round_trips),
		cmocka_unit_test(test_each_kind_of_malformed_input_is_rejected),
		cmocka_unit_test(test_an_optional_non_string_field_is_refused_when_absent),
		cmocka_unit_test(test_every_message_round_trips),
		cmocka_unit_test(test_message_bounds_hold),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
