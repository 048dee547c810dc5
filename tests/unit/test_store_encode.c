/* Unit tests for store_encode (rendezvous/store_proto_enc.c), the request
 * encoder of both store clients and the benchmarks: every operation of both
 * dialects, with and without a key prefix, parses back through the server's
 * parser to what was asked; the bytes are PyTorch's own; the client limits
 * hold at exactly their boundary; a refused request appends nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_proto.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

static const char *const keys3[] = {"a", "bb", "ccc"};
static const void *const vals2[] = {"1", ""};
static const size_t lens2[] = {1, 0};

/* One request of every shape. */
static const struct store_msg msgs[] = {
	{.op = STORE_OP_SET, .key = "k1", .val = "v1", .val_len = 2},
	{.op = STORE_OP_SET, .key = ""}, /* empty key ("/") and value */
	{.op = STORE_OP_COMPARE_SET,
	 .key = "cas",
	 .val = "old",
	 .val_len = 3,
	 .val2 = "new!",
	 .val2_len = 4},
	{.op = STORE_OP_GET, .key = "key"},
	{.op = STORE_OP_ADD, .key = "ctr", .num = -42},
	{.op = STORE_OP_CHECK, .keys = keys3, .n = 3},
	{.op = STORE_OP_WAIT, .keys = keys3, .n = 2},
	{.op = STORE_OP_WAIT}, /* no keys */
	{.op = STORE_OP_NUMKEYS},
	{.op = STORE_OP_DELETE, .key = "gone"},
	{.op = STORE_OP_WATCH_KEY, .key = "w"},
	{.op = STORE_OP_APPEND, .key = "log", .val = "line", .val_len = 4},
	{.op = STORE_OP_MULTI_GET, .keys = keys3, .n = 2},
	{.op = STORE_OP_MULTI_SET, .keys = keys3, .vals = vals2, .lens = lens2, .n = 2},
	{.op = STORE_OP_MULTI_SET}, /* no pairs */
	{.op = STORE_OP_CANCEL_WAIT},
	{.op = STORE_OP_PING, .num = 0xdeadbeef},
	{.op = STORE_OP_QUEUE_PUSH, .key = "q", .val = "item", .val_len = 4},
	{.op = STORE_OP_QUEUE_POP, .key = "q"},
	{.op = STORE_OP_QUEUE_LEN, .key = "q"},
	{.op = STORE_OP_ON_CLOSE_SET, .key = "job/failed", .val = "agent 3", .val_len = 7},
	{.op = STORE_OP_ON_CLOSE_SET}, /* NULL key: clears */
	{.op = STORE_OP_LIST_KEYS},
	{.op = STORE_OP_BARRIER, .key = "bar", .num = 8},
};

/* The wire form of a user key: "/" key, or "/" prefix "/" key. */
static const char *wire_key(const char *prefix, const char *key)
{
	static char buf[STORE_MAX_KEY + 2];

	snprintf(buf, sizeof(buf), "/%s%s%s", prefix ? prefix : "", prefix ? "/" : "", key);
	return buf;
}

static void assert_field(const uint8_t *p, size_t n, const void *want, size_t wn)
{
	assert_int_equal(n, wn);
	if (n)
		assert_memory_equal(p, want, n);
}

static void assert_str(const uint8_t *p, size_t n, const char *want)
{
	assert_field(p, n, want, strlen(want));
}

static void parser_for(struct store_parser *p, enum store_dialect d)
{
	store_parser_init(p, NULL, d); /* the server's default limits */
}

static bool has_key(const struct store_msg *m)
{
	return m->key != NULL || m->op == STORE_OP_ON_CLOSE_SET;
}

/* A parsed non-MULTI_SET request is m under prefix. */
static void check_req(const struct store_msg *m, const char *prefix, const struct store_req *r)
{
	const uint8_t *pos = r->list, *item;
	size_t il, i;

	assert_int_equal(r->op, m->op);
	if (m->op == STORE_OP_ON_CLOSE_SET && m->key == NULL)
		assert_int_equal(r->key_len, 0);
	else if (has_key(m))
		assert_str(r->key, r->key_len, wire_key(prefix, m->key));
	if (m->val || m->op == STORE_OP_SET)
		assert_field(r->val, r->val_len, m->val, m->val_len);
	if (m->val2)
		assert_field(r->val2, r->val2_len, m->val2, m->val2_len);
	if (m->op == STORE_OP_ADD || m->op == STORE_OP_BARRIER)
		assert_int_equal(r->num, m->num);
	if (m->op == STORE_OP_PING)
		assert_int_equal((uint32_t)r->num, (uint32_t)m->num);
	if (m->op == STORE_OP_CHECK || m->op == STORE_OP_WAIT || m->op == STORE_OP_MULTI_GET) {
		assert_int_equal(r->count, m->n);
		for (i = 0; i < m->n; i++) {
			store_list_next(&pos, &item, &il);
			assert_str(item, il, wire_key(prefix, m->keys[i]));
		}
	}
}

/* Parse one whole request of m from buf (a MULTI_SET pair by pair); returns
 * the bytes it took. */
static size_t parse_back(struct store_parser *p, const struct store_msg *m, const char *prefix,
			 const uint8_t *buf, size_t len)
{
	struct store_req r;
	const uint8_t *pos, *item;
	size_t il, off = 0, pair = 0;

	if (m->op != STORE_OP_MULTI_SET) {
		assert_int_equal(store_parse(p, buf, len, &r), 1);
		check_req(m, prefix, &r);
		return r.len;
	}
	do {
		assert_int_equal(store_parse(p, buf + off, len - off, &r), 1);
		assert_int_equal(r.op, STORE_OP_MULTI_SET);
		assert_int_equal(r.count, m->n ? 1 : 0);
		if (r.count) {
			pos = r.list;
			store_list_next(&pos, &item, &il);
			assert_str(item, il, wire_key(prefix, m->keys[pair]));
			store_list_next(&pos, &item, &il);
			assert_field(item, il, m->vals[pair], m->lens[pair]);
			pair++;
		}
		off += r.len;
	} while (r.more);
	assert_int_equal(pair, m->n);
	return off;
}

static void test_every_op_round_trips_through_the_server_parser(void **state)
{
	enum store_dialect ds[] = {STORE_DIALECT_V1, STORE_DIALECT_V2};
	const char *prefixes[] = {NULL, "pre/fix"};
	size_t i, k, j, n = 0;

	for (k = 0; k < NELEM(ds); k++) {
		for (j = 0; j < NELEM(prefixes); j++) {
			for (i = 0; i < NELEM(msgs); i++) {
				struct store_buf b;
				struct store_parser p;
				int rc;

				store_buf_init(&b);
				store_put_u8(&b, 0xAA); /* what was there stays */
				rc = store_encode(&b, ds[k], prefixes[j], &msgs[i]);
				if (store_opcode(ds[k], msgs[i].op) < 0) {
					assert_int_equal(rc, -EINVAL);
					assert_int_equal(b.len, 1);
					store_buf_free(&b);
					continue;
				}
				assert_int_equal(rc, 0);
				assert_int_equal(b.p[0], 0xAA);
				parser_for(&p, ds[k]);
				assert_int_equal(
					parse_back(&p, &msgs[i], prefixes[j], b.p + 1, b.len - 1),
					b.len - 1);
				store_buf_free(&b);
				n++;
			}
		}
	}
	/* 1.x: its 9 ops; 2.x: all but WATCH_KEY. */
	assert_int_equal(n, 2 * (11 + 23));
}

/* A client's connection as the server sees it: VALIDATE chooses the 2.x
 * dialect, then the requests follow in the order they were appended. */
static void test_pipelined_after_validate(void **state)
{
	struct store_msg validate = {.op = STORE_OP_VALIDATE};
	struct store_buf b;
	struct store_parser p;
	struct store_req r;
	size_t i, off;

	store_buf_init(&b);
	assert_int_equal(store_encode(&b, STORE_DIALECT_V2, NULL, &validate), 0);
	assert_int_equal(b.len, 5);
	for (i = 0; i < NELEM(msgs); i++)
		store_encode(&b, STORE_DIALECT_V2, "p", &msgs[i]);
	assert_int_equal(b.err, 0);
	parser_for(&p, STORE_DIALECT_NONE);
	assert_int_equal(store_parse(&p, b.p, b.len, &r), 1);
	assert_int_equal(r.op, STORE_OP_VALIDATE);
	assert_int_equal(r.num, STORE_V2_MAGIC);
	off = r.len;
	for (i = 0; i < NELEM(msgs); i++)
		if (store_opcode(STORE_DIALECT_V2, msgs[i].op) >= 0)
			off += parse_back(&p, &msgs[i], "p", b.p + off, b.len - off);
	assert_int_equal(off, b.len);
	/* VALIDATE is the 2.x handshake only. */
	assert_int_equal(store_encode(&b, STORE_DIALECT_V1, NULL, &validate), -EINVAL);
	assert_int_equal(off, b.len);
	store_buf_free(&b);
}

static void assert_encodes_to(enum store_dialect d, const struct store_msg *m, const uint8_t *want,
			      size_t n)
{
	struct store_buf b;

	store_buf_init(&b);
	assert_int_equal(store_encode(&b, d, NULL, m), 0);
	assert_field(b.p, b.len, want, n);
	store_buf_free(&b);
}

/* The bytes PyTorch's own clients send (the captures of test_store_proto.c). */
static void test_bytes_are_torchs(void **state)
{
	/* set("k1", b"v1") from Debian's torch 1.13 client. */
	static const uint8_t set[] = {0x00, 0x03, 0, 0, 0, 0, 0, 0, 0, 0x2f, 0x6b,
				      0x31, 0x02, 0, 0, 0, 0, 0, 0, 0, 0x76, 0x31};
	/* torch 2.14: its handshake, list_keys(), barrier("solo", 1), and a
	 * timed-out wait's CANCEL_WAIT. */
	static const uint8_t validate[] = {0x00, 0xCE, 0xF7, 0x85, 0x3C};
	static const uint8_t barrier[] = {0x12, 5,    0,    0, 0, 0, 0, 0, 0, 0x2f, 0x73,
					  0x6f, 0x6c, 0x6f, 1, 0, 0, 0, 0, 0, 0,    0};
	struct store_msg m = {.op = STORE_OP_SET, .key = "k1", .val = "v1", .val_len = 2};

	assert_encodes_to(STORE_DIALECT_V1, &m, set, sizeof(set));
	m = (struct store_msg){.op = STORE_OP_VALIDATE};
	assert_encodes_to(STORE_DIALECT_V2, &m, validate, sizeof(validate));
	m = (struct store_msg){.op = STORE_OP_LIST_KEYS};
	assert_encodes_to(STORE_DIALECT_V2, &m, (const uint8_t *)"\x11", 1);
	m = (struct store_msg){.op = STORE_OP_BARRIER, .key = "solo", .num = 1};
	assert_encodes_to(STORE_DIALECT_V2, &m, barrier, sizeof(barrier));
	m = (struct store_msg){.op = STORE_OP_CANCEL_WAIT};
	assert_encodes_to(STORE_DIALECT_V2, &m, (const uint8_t *)"\x0c", 1);
}

/* Encode m into a fresh buffer: rc, and on success that the server's
 * default-limits parser takes the request whole. */
static int encode_and_parse(const struct store_msg *m)
{
	struct store_buf b;
	struct store_parser p;
	int rc;

	store_buf_init(&b);
	rc = store_encode(&b, STORE_DIALECT_V2, NULL, m);
	if (rc == 0) {
		parser_for(&p, STORE_DIALECT_V2);
		assert_int_equal(parse_back(&p, m, NULL, b.p, b.len), b.len);
	} else {
		assert_int_equal(b.len, 0);
	}
	store_buf_free(&b);
	return rc;
}

/* A wire key of STORE_MAX_KEY bytes ("/" and prefix included) goes and the
 * server takes it; one byte more is refused before anything is written. */
static void test_key_limit_at_the_boundary(void **state)
{
	static char key[STORE_MAX_KEY + 1];
	const char *list[] = {"a", key};
	struct store_msg get = {.op = STORE_OP_GET, .key = key};
	struct store_msg check = {.op = STORE_OP_CHECK, .keys = list, .n = 2};
	struct store_buf b;

	memset(key, 'k', STORE_MAX_KEY - 1);
	assert_int_equal(encode_and_parse(&get), 0);
	assert_int_equal(encode_and_parse(&check), 0);
	key[STORE_MAX_KEY - 1] = 'k';
	assert_int_equal(encode_and_parse(&get), -ENAMETOOLONG);
	assert_int_equal(encode_and_parse(&check), -ENAMETOOLONG);
	/* With prefix "p" the wire key is "/p/" + key. */
	key[STORE_MAX_KEY - 3] = '\0';
	store_buf_init(&b);
	assert_int_equal(store_encode(&b, STORE_DIALECT_V2, "p", &get), 0);
	assert_int_equal(store_get_u64(b.p + 1), STORE_MAX_KEY);
	b.len = 0;
	key[STORE_MAX_KEY - 3] = 'k';
	key[STORE_MAX_KEY - 2] = '\0';
	assert_int_equal(store_encode(&b, STORE_DIALECT_V2, "p", &get), -ENAMETOOLONG);
	assert_int_equal(b.len, 0);
	store_buf_free(&b);
}

/* A value of STORE_MAX_VALUE bytes goes (either of COMPARE_SET's and each of
 * MULTI_SET's); one byte more is refused. */
static void test_value_limit_at_the_boundary(void **state)
{
	char *v = calloc(1, STORE_MAX_VALUE + 1);
	const char *k[] = {"k"};
	const void *vs[] = {v};
	size_t ls[] = {STORE_MAX_VALUE};
	struct store_msg set = {
		.op = STORE_OP_SET, .key = "k", .val = v, .val_len = STORE_MAX_VALUE};
	struct store_msg cas = {.op = STORE_OP_COMPARE_SET,
				.key = "k",
				.val = "",
				.val2 = v,
				.val2_len = STORE_MAX_VALUE};
	struct store_msg mset = {
		.op = STORE_OP_MULTI_SET, .keys = k, .vals = vs, .lens = ls, .n = 1};

	assert_non_null(v);
	assert_int_equal(encode_and_parse(&set), 0);
	assert_int_equal(encode_and_parse(&cas), 0);
	assert_int_equal(encode_and_parse(&mset), 0);
	set.val_len++;
	cas.val2_len++;
	ls[0]++;
	assert_int_equal(encode_and_parse(&set), -EMSGSIZE);
	assert_int_equal(encode_and_parse(&cas), -EMSGSIZE);
	assert_int_equal(encode_and_parse(&mset), -EMSGSIZE);
	free(v);
}

/* STORE_MAX_MULTI_KEYS keys go in a key list and in MULTI_SET; one more is
 * refused. */
static void test_key_count_limit_at_the_boundary(void **state)
{
	size_t n = STORE_MAX_MULTI_KEYS + 1, i;
	const char **ks = malloc(n * sizeof(*ks));
	const void **vs = malloc(n * sizeof(*vs));
	size_t *ls = calloc(n, sizeof(*ls));
	struct store_msg wait = {.op = STORE_OP_WAIT, .keys = ks, .n = STORE_MAX_MULTI_KEYS};
	struct store_msg mset = {.op = STORE_OP_MULTI_SET,
				 .keys = ks,
				 .vals = vs,
				 .lens = ls,
				 .n = STORE_MAX_MULTI_KEYS};

	assert_true(ks && vs && ls);
	for (i = 0; i < n; i++) {
		ks[i] = "k";
		vs[i] = "";
	}
	assert_int_equal(encode_and_parse(&wait), 0);
	assert_int_equal(encode_and_parse(&mset), 0);
	wait.n++;
	mset.n++;
	assert_int_equal(encode_and_parse(&wait), -E2BIG);
	assert_int_equal(encode_and_parse(&mset), -E2BIG);
	free(ks);
	free(vs);
	free(ls);
}

/* Bad arguments: -EINVAL and nothing appended to what the buffer held. */
static void test_bad_arguments_append_nothing(void **state)
{
	const char *ks[] = {"a", NULL};
	const void *vs[] = {"x", NULL};
	size_t ls[] = {1, 1};
	struct store_msg bad[] = {
		{.op = STORE_OP_GET}, /* NULL key */
		{.op = STORE_OP_SET, .key = "k", .val_len = 1},
		{.op = STORE_OP_COMPARE_SET, .key = "k", .val2_len = 1},
		{.op = STORE_OP_CHECK, .keys = ks, .n = 2},
		{.op = STORE_OP_MULTI_SET, .keys = ks, .vals = vs, .lens = ls, .n = 2},
		{.op = STORE_OP_COUNT_},
	};
	struct store_buf b;
	size_t i;

	store_buf_init(&b);
	store_put_u8(&b, 7);
	for (i = 0; i < NELEM(bad); i++) {
		assert_int_equal(store_encode(&b, STORE_DIALECT_V2, NULL, &bad[i]), -EINVAL);
		assert_int_equal(b.len, 1);
		assert_int_equal(b.err, 0);
	}
	/* A buffer that ran out of memory keeps saying so. */
	b.err = -ENOMEM;
	assert_int_equal(store_encode(&b, STORE_DIALECT_V2, NULL, &msgs[0]), -ENOMEM);
	assert_int_equal(b.len, 1);
	store_buf_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_op_round_trips_through_the_server_parser),
		cmocka_unit_test(test_pipelined_after_validate),
		cmocka_unit_test(test_bytes_are_torchs),
		cmocka_unit_test(test_key_limit_at_the_boundary),
		cmocka_unit_test(test_value_limit_at_the_boundary),
		cmocka_unit_test(test_key_count_limit_at_the_boundary),
		cmocka_unit_test(test_bad_arguments_append_nothing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
