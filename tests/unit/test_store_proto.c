/* Unit tests for rendezvous/store_proto.c: every request of both dialects
 * parses back to what was encoded; every truncation point is "need more
 * bytes", whether parsed afresh or resumed; oversize lengths and unknown
 * opcodes are rejected before anything is trusted; random garbage never
 * crashes the parser; reply lengths are recognised. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "store_proto.h"

/* One request of every shape, as the fields a test expects back. */
struct sample {
	enum store_op op;
	const char *key, *val, *val2;
	int64_t num;
	const char *list[3]; /* keys, or key/value pairs for MULTI_SET */
	uint64_t count;
};

static const struct sample samples[] = {
	{STORE_OP_SET, "/k1", "v1", NULL, 0, {NULL}, 0},
	{STORE_OP_SET, "", "", NULL, 0, {NULL}, 0}, /* empty key and value */
	{STORE_OP_COMPARE_SET, "/cas", "old", "new", 0, {NULL}, 0},
	{STORE_OP_GET, "/key", NULL, NULL, 0, {NULL}, 0},
	{STORE_OP_ADD, "/ctr", NULL, NULL, -42, {NULL}, 0},
	{STORE_OP_CHECK, NULL, NULL, NULL, 0, {"/a", "/bb", "/ccc"}, 3},
	{STORE_OP_WAIT, NULL, NULL, NULL, 0, {"/a", "/b"}, 2},
	{STORE_OP_WAIT, NULL, NULL, NULL, 0, {NULL}, 0}, /* no keys */
	{STORE_OP_NUMKEYS, NULL, NULL, NULL, 0, {NULL}, 0},
	{STORE_OP_DELETE, "/gone", NULL, NULL, 0, {NULL}, 0},
	{STORE_OP_WATCH_KEY, "/w", NULL, NULL, 0, {NULL}, 0},
	{STORE_OP_APPEND, "/log", "line", NULL, 0, {NULL}, 0},
	{STORE_OP_MULTI_GET, NULL, NULL, NULL, 0, {"/x", "/y"}, 2},
	{STORE_OP_MULTI_SET, NULL, NULL, NULL, 0, {"/x", "1", NULL}, 1},
	{STORE_OP_CANCEL_WAIT, NULL, NULL, NULL, 0, {NULL}, 0},
	{STORE_OP_PING, NULL, NULL, NULL, 0xdeadbeef, {NULL}, 0},
	{STORE_OP_QUEUE_PUSH, "/q", "item", NULL, 0, {NULL}, 0},
	{STORE_OP_QUEUE_POP, "/q", NULL, NULL, 0, {NULL}, 0},
	{STORE_OP_QUEUE_LEN, "/q", NULL, NULL, 0, {NULL}, 0},
	{STORE_OP_ON_CLOSE_SET, "/job/failed", "agent 3", NULL, 0, {NULL}, 0},
	{STORE_OP_ON_CLOSE_SET, "", "", NULL, 0, {NULL}, 0}, /* clear */
	{STORE_OP_LIST_KEYS, NULL, NULL, NULL, 0, {NULL}, 0},
	{STORE_OP_BARRIER, "/bar", NULL, NULL, 8, {NULL}, 0},
};

static void put_str(struct store_buf *b, const char *s)
{
	store_put_bytes(b, s, strlen(s));
}

/* Encode a sample in dialect d; false if the dialect lacks the op. */
static bool encode(struct store_buf *b, enum store_dialect d, const struct sample *s)
{
	uint64_t i;

	if (store_opcode(d, s->op) < 0)
		return false;
	store_put_op(b, d, s->op);
	switch (s->op) {
	case STORE_OP_SET:
	case STORE_OP_APPEND:
	case STORE_OP_QUEUE_PUSH:
	case STORE_OP_ON_CLOSE_SET:
		put_str(b, s->key);
		put_str(b, s->val);
		break;
	case STORE_OP_COMPARE_SET:
		put_str(b, s->key);
		put_str(b, s->val);
		put_str(b, s->val2);
		break;
	case STORE_OP_ADD:
	case STORE_OP_BARRIER:
		put_str(b, s->key);
		store_put_i64(b, s->num);
		break;
	case STORE_OP_CHECK:
	case STORE_OP_WAIT:
	case STORE_OP_MULTI_GET:
		store_put_u64(b, s->count);
		for (i = 0; i < s->count; i++)
			put_str(b, s->list[i]);
		break;
	case STORE_OP_MULTI_SET:
		store_put_u64(b, s->count);
		for (i = 0; i < 2 * s->count; i++)
			put_str(b, s->list[i]);
		break;
	case STORE_OP_PING:
		store_put_u32(b, (uint32_t)s->num);
		break;
	case STORE_OP_NUMKEYS:
	case STORE_OP_CANCEL_WAIT:
	case STORE_OP_LIST_KEYS:
		break;
	default:
		put_str(b, s->key);
		break;
	}
	assert_int_equal(b->err, 0);
	return true;
}

static void assert_field(const uint8_t *p, size_t n, const char *want)
{
	assert_int_equal(n, strlen(want));
	assert_memory_equal(p, want, n);
}

static void check_req(const struct sample *s, const struct store_req *r, size_t len)
{
	const uint8_t *pos, *item;
	size_t il;
	uint64_t i;

	assert_int_equal(r->op, s->op);
	assert_int_equal(r->len, len);
	if (s->key)
		assert_field(r->key, r->key_len, s->key);
	if (s->val)
		assert_field(r->val, r->val_len, s->val);
	if (s->val2)
		assert_field(r->val2, r->val2_len, s->val2);
	if (s->op == STORE_OP_ADD || s->op == STORE_OP_PING || s->op == STORE_OP_BARRIER)
		assert_true(r->num == s->num || (uint32_t)r->num == (uint32_t)s->num);
	assert_int_equal(r->count, s->count);
	pos = r->list;
	for (i = 0; i < (s->op == STORE_OP_MULTI_SET ? 2 * s->count : s->count); i++) {
		store_list_next(&pos, &item, &il);
		assert_field(item, il, s->list[i]);
	}
}

static void parser_for(struct store_parser *p, enum store_dialect d)
{
	store_parser_init(p, NULL, d);
}

static void test_every_op_round_trips(void **state)
{
	enum store_dialect ds[] = {STORE_DIALECT_V1, STORE_DIALECT_V2};
	size_t i, k, n = 0;

	for (k = 0; k < 2; k++) {
		for (i = 0; i < sizeof(samples) / sizeof(samples[0]); i++) {
			struct store_buf b;
			struct store_parser p;
			struct store_req r;

			store_buf_init(&b);
			if (!encode(&b, ds[k], &samples[i])) {
				store_buf_free(&b);
				continue;
			}
			parser_for(&p, ds[k]);
			assert_int_equal(store_parse(&p, b.p, b.len, &r), 1);
			check_req(&samples[i], &r, b.len);
			store_buf_free(&b);
			n++;
		}
	}
	/* 1.x: 9 ops x samples; 2.x: all but WATCH_KEY. */
	assert_true(n >= 30);
}

/* Every prefix of every message is "need more", both afresh and resumed. */
static void test_every_truncation_needs_more(void **state)
{
	enum store_dialect ds[] = {STORE_DIALECT_V1, STORE_DIALECT_V2};
	size_t i, k, cut;

	for (k = 0; k < 2; k++) {
		for (i = 0; i < sizeof(samples) / sizeof(samples[0]); i++) {
			struct store_buf b;
			struct store_parser fresh, resumed;
			struct store_req r;
			uint8_t *copy;

			store_buf_init(&b);
			if (!encode(&b, ds[k], &samples[i])) {
				store_buf_free(&b);
				continue;
			}
			parser_for(&resumed, ds[k]);
			for (cut = 0; cut < b.len; cut++) {
				/* A fresh copy each time: the buffer may move. */
				copy = malloc(cut ? cut : 1);
				memcpy(copy, b.p, cut);
				parser_for(&fresh, ds[k]);
				assert_int_equal(store_parse(&fresh, copy, cut, &r), 0);
				assert_true(fresh.need > cut && fresh.need <= b.len);
				assert_int_equal(store_parse(&resumed, copy, cut, &r), 0);
				assert_true(resumed.need > cut && resumed.need <= b.len);
				free(copy);
			}
			assert_int_equal(store_parse(&resumed, b.p, b.len, &r), 1);
			check_req(&samples[i], &r, b.len);
			store_buf_free(&b);
		}
	}
}

static void test_pipelined_messages(void **state)
{
	struct store_buf b;
	struct store_parser p;
	struct store_req r;
	size_t off = 0, i, n = sizeof(samples) / sizeof(samples[0]);

	store_buf_init(&b);
	for (i = 0; i < n; i++)
		encode(&b, STORE_DIALECT_V2, &samples[i]);
	parser_for(&p, STORE_DIALECT_V2);
	for (i = 0; i < n; i++) {
		if (store_opcode(STORE_DIALECT_V2, samples[i].op) < 0)
			continue;
		assert_int_equal(store_parse(&p, b.p + off, b.len - off, &r), 1);
		check_req(&samples[i], &r, r.len);
		off += r.len;
	}
	assert_int_equal(off, b.len);
	assert_int_equal(store_parse(&p, b.p + off, 0, &r), 0);
	store_buf_free(&b);
}

static void test_dialect_chosen_by_first_bytes(void **state)
{
	static const uint8_t validate[] = {0x00, 0xCE, 0xF7, 0x85, 0x3C};
	static const uint8_t v1_set[] = {0x00, 0x01, 0, 0, 0, 0, 0, 0, 0,
					 'k',  0,    0, 0, 0, 0, 0, 0, 0};
	struct store_parser p;
	struct store_req r;

	parser_for(&p, STORE_DIALECT_NONE);
	assert_int_equal(store_parse(&p, validate, 3, &r), 0);
	assert_int_equal(p.need, 5);
	assert_int_equal(store_parse(&p, validate, 5, &r), 1);
	assert_int_equal(r.op, STORE_OP_VALIDATE);
	assert_int_equal(r.len, 5);
	assert_int_equal(p.dialect, STORE_DIALECT_V2);
	/* After the handshake a second VALIDATE is an error. */
	assert_int_equal(store_parse(&p, validate, 5, &r), -EPROTO);

	parser_for(&p, STORE_DIALECT_NONE);
	assert_int_equal(store_parse(&p, v1_set, sizeof(v1_set), &r), 1);
	assert_int_equal(p.dialect, STORE_DIALECT_V1);
	assert_int_equal(r.op, STORE_OP_SET);
	assert_int_equal(r.key_len, 1);
	assert_int_equal(r.key[0], 'k');

	/* A 1.x ADD (opcode 3) is recognised at once. */
	parser_for(&p, STORE_DIALECT_NONE);
	assert_int_equal(store_parse(&p, (const uint8_t *)"\x03", 1, &r), 0);
	assert_int_equal(p.dialect, STORE_DIALECT_V1);
}

static void test_unknown_opcodes_rejected(void **state)
{
	static const uint8_t v1_bad[] = {9, 17, 18, 0x7f, 0x80, 0xff};
	static const uint8_t v2_bad[] = {19, 0x7f, 0x81, 0xff};
	struct store_parser p;
	struct store_req r;
	size_t i;

	for (i = 0; i < sizeof(v1_bad); i++) {
		parser_for(&p, STORE_DIALECT_V1);
		assert_int_equal(store_parse(&p, &v1_bad[i], 1, &r), -EPROTO);
		assert_non_null(strstr(p.err, "unknown opcode"));
	}
	for (i = 0; i < sizeof(v2_bad); i++) {
		parser_for(&p, STORE_DIALECT_V2);
		assert_int_equal(store_parse(&p, &v2_bad[i], 1, &r), -EPROTO);
	}
	/* The ddp extension exists only in the 2.x dialect. */
	assert_int_equal(store_opcode(STORE_DIALECT_V1, STORE_OP_ON_CLOSE_SET), -1);
	assert_int_equal(store_opcode(STORE_DIALECT_V2, STORE_OP_ON_CLOSE_SET), 0x80);
	assert_int_equal(store_opcode(STORE_DIALECT_V2, STORE_OP_WATCH_KEY), -1);
}

static void test_oversize_lengths_rejected(void **state)
{
	struct store_limits lim = {
		.max_key_len = 16, .max_value_len = 64, .max_multi_keys = 4, .max_msg_len = 256};
	struct store_parser p;
	struct store_req r;
	struct store_buf b;
	int i;

	/* Key one byte over; a declared 2^63 value length; header only. */
	store_buf_init(&b);
	store_put_op(&b, STORE_DIALECT_V2, STORE_OP_SET);
	store_put_u64(&b, 17);
	store_parser_init(&p, &lim, STORE_DIALECT_V2);
	assert_int_equal(store_parse(&p, b.p, b.len, &r), -EMSGSIZE);
	assert_non_null(strstr(p.err, "key length 17"));

	b.len = 0;
	store_put_op(&b, STORE_DIALECT_V2, STORE_OP_SET);
	put_str(&b, "k");
	store_put_u64(&b, (uint64_t)1 << 63);
	store_parser_init(&p, &lim, STORE_DIALECT_V2);
	assert_int_equal(store_parse(&p, b.p, b.len, &r), -EMSGSIZE);

	/* Exactly at the limits is fine. */
	b.len = 0;
	store_put_op(&b, STORE_DIALECT_V2, STORE_OP_SET);
	store_put_u64(&b, 16);
	store_buf_put(&b, "0123456789abcdef", 16);
	store_put_u64(&b, 64);
	store_buf_reserve(&b, 64);
	memset(b.p + b.len, 'v', 64);
	b.len += 64;
	store_parser_init(&p, &lim, STORE_DIALECT_V2);
	assert_int_equal(store_parse(&p, b.p, b.len, &r), 1);

	/* Too many keys in a multi-key op, in both dialects. */
	b.len = 0;
	store_put_op(&b, STORE_DIALECT_V1, STORE_OP_WAIT);
	store_put_u64(&b, 5);
	store_parser_init(&p, &lim, STORE_DIALECT_V1);
	assert_int_equal(store_parse(&p, b.p, b.len, &r), -EMSGSIZE);
	b.len = 0;
	store_put_op(&b, STORE_DIALECT_V2, STORE_OP_MULTI_SET);
	store_put_u64(&b, UINT64_MAX);
	store_parser_init(&p, &lim, STORE_DIALECT_V2);
	assert_int_equal(store_parse(&p, b.p, b.len, &r), -EMSGSIZE);

	/* A key list held whole over max_msg_len (5 x 16-byte keys). */
	lim.max_multi_keys = 8;
	lim.max_msg_len = 100;
	b.len = 0;
	store_put_op(&b, STORE_DIALECT_V2, STORE_OP_WAIT);
	store_put_u64(&b, 5);
	for (i = 0; i < 5; i++)
		put_str(&b, "0123456789abcdef");
	store_parser_init(&p, &lim, STORE_DIALECT_V2);
	assert_int_equal(store_parse(&p, b.p, b.len, &r), -EMSGSIZE);
	assert_non_null(strstr(p.err, "buffer limit"));
	store_buf_free(&b);
}

/* A MULTI_SET larger than max_msg_len is legal (upstream limits only its
 * fields): it comes out pair by pair, each piece within the limit, from a
 * buffer that holds only the current piece, fed a byte at a time. */
static void test_multi_set_comes_out_pair_by_pair(void **state)
{
	struct store_limits lim = {
		.max_key_len = 16, .max_value_len = 64, .max_multi_keys = 8, .max_msg_len = 100};
	struct store_parser p;
	struct store_req r;
	struct store_buf b;
	uint8_t win[128];
	size_t have = 0, fed = 0;
	int i, pieces = 0, rc;
	char key[16], val[65];

	store_buf_init(&b);
	store_put_op(&b, STORE_DIALECT_V2, STORE_OP_MULTI_SET);
	store_put_u64(&b, 4);
	for (i = 0; i < 4; i++) {
		snprintf(key, sizeof(key), "/k%d", i);
		memset(val, 'a' + i, 64);
		val[64] = 0;
		put_str(&b, key);
		put_str(&b, val);
	}
	assert_true(b.len > 3 * lim.max_msg_len); /* once refused whole */
	store_put_op(&b, STORE_DIALECT_V2, STORE_OP_PING);
	store_put_u32(&b, 7);
	store_parser_init(&p, &lim, STORE_DIALECT_V2);
	while (fed < b.len) {
		win[have++] = b.p[fed++];
		assert_true(have <= sizeof(win));
		while ((rc = store_parse(&p, win, have, &r)) == 1) {
			const uint8_t *pos = r.list, *it;
			size_t il;

			if (r.op == STORE_OP_PING) {
				assert_int_equal(pieces, 4);
				assert_int_equal((uint32_t)r.num, 7);
			} else {
				assert_int_equal(r.op, STORE_OP_MULTI_SET);
				assert_int_equal(r.count, 1);
				assert_int_equal(r.more, pieces < 3);
				snprintf(key, sizeof(key), "/k%d", pieces);
				memset(val, 'a' + pieces, 64);
				store_list_next(&pos, &it, &il);
				assert_field(it, il, key);
				store_list_next(&pos, &it, &il);
				assert_field(it, il, val);
				assert_ptr_equal(pos, r.list + r.list_len);
				pieces++;
			}
			memmove(win, win + r.len, have - r.len);
			have -= r.len;
		}
		assert_int_equal(rc, 0);
	}
	assert_int_equal(have, 0);
	assert_int_equal(pieces, 4);

	/* An empty MULTI_SET is one piece with no pair. */
	b.len = 0;
	store_put_op(&b, STORE_DIALECT_V2, STORE_OP_MULTI_SET);
	store_put_u64(&b, 0);
	store_parser_init(&p, &lim, STORE_DIALECT_V2);
	assert_int_equal(store_parse(&p, b.p, b.len, &r), 1);
	assert_int_equal(r.count, 0);
	assert_false(r.more);
	assert_int_equal(r.len, 9);
	store_buf_free(&b);
}

/* xorshift: a deterministic stream of garbage. */
static uint64_t rng(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void test_garbage_never_crashes(void **state)
{
	uint8_t buf[512];
	uint64_t seed = 0x9E3779B97F4A7C15ull;
	int iter, ok = 0, more = 0, bad = 0;

	for (iter = 0; iter < 20000; iter++) {
		struct store_parser p;
		struct store_req r;
		size_t len = rng(&seed) % sizeof(buf), i, off = 0;
		int rc;

		for (i = 0; i < len; i++) {
			uint64_t x = rng(&seed);

			/* Mostly small bytes, so lengths are often plausible. */
			buf[i] = (uint8_t)(x % 4 == 0 ? x >> 8 : (x >> 8) % 4);
		}
		parser_for(&p, iter % 3 == 0
				       ? STORE_DIALECT_NONE
				       : (iter % 3 == 1 ? STORE_DIALECT_V1 : STORE_DIALECT_V2));
		while ((rc = store_parse(&p, buf + off, len - off, &r)) == 1) {
			assert_true(r.len > 0 && r.len <= len - off);
			off += r.len;
			ok++;
		}
		if (rc == 0)
			more++;
		else
			bad++;
	}
	/* The stream exercised every outcome. */
	assert_true(ok > 0 && more > 0 && bad > 0);
}

static void test_reply_lengths(void **state)
{
	struct store_buf b;
	size_t cut;

	assert_int_equal(store_reply_len(STORE_REPLY_U8, 0, (const uint8_t *)"\0", 1, 10), 1);
	assert_int_equal(store_reply_len(STORE_REPLY_U8, 0, NULL, 0, 10), 0);
	assert_int_equal(store_reply_len(STORE_REPLY_U32, 0, (const uint8_t *)"abc", 3, 10), 0);
	assert_int_equal(store_reply_len(STORE_REPLY_I64, 0, (const uint8_t *)"12345678", 8, 10),
			 8);

	store_buf_init(&b);
	put_str(&b, "hello");
	put_str(&b, "");
	put_str(&b, "xy");
	for (cut = 0; cut < 13; cut++)
		assert_int_equal(store_reply_len(STORE_REPLY_BYTES, 0, b.p, cut, 10), 0);
	assert_int_equal(store_reply_len(STORE_REPLY_BYTES, 0, b.p, b.len, 10), 13);
	assert_int_equal(store_reply_len(STORE_REPLY_BYTES, 0, b.p, b.len, 4), -EPROTO);
	assert_int_equal(store_reply_len(STORE_REPLY_BYTES_N, 3, b.p, b.len, 10), (long)b.len);
	assert_int_equal(store_reply_len(STORE_REPLY_BYTES_N, 3, b.p, b.len - 1, 10), 0);

	b.len = 0;
	store_put_i64(&b, 0);
	assert_int_equal(store_reply_len(STORE_REPLY_QPOP, 0, b.p, b.len, 10), 8);
	b.len = 0;
	store_put_i64(&b, 2);
	put_str(&b, "item");
	assert_int_equal(store_reply_len(STORE_REPLY_QPOP, 0, b.p, 8, 10), 0);
	assert_int_equal(store_reply_len(STORE_REPLY_QPOP, 0, b.p, b.len, 10), 20);

	/* LIST_KEYS: i64 n, then n strings (n from the reply itself). */
	b.len = 0;
	store_put_i64(&b, 0);
	assert_int_equal(store_reply_len(STORE_REPLY_LIST, 0, b.p, b.len, 10), 8);
	b.len = 0;
	store_put_i64(&b, 2);
	put_str(&b, "/a");
	put_str(&b, "/bc");
	for (cut = 0; cut < b.len; cut++)
		assert_int_equal(store_reply_len(STORE_REPLY_LIST, 0, b.p, cut, 10), 0);
	assert_int_equal(store_reply_len(STORE_REPLY_LIST, 0, b.p, b.len, 10), (long)b.len);
	assert_int_equal(store_reply_len(STORE_REPLY_LIST, 0, b.p, b.len, 2), -EPROTO);
	b.len = 0;
	store_put_i64(&b, -1);
	assert_int_equal(store_reply_len(STORE_REPLY_LIST, 0, b.p, b.len, 10), -EPROTO);
	store_buf_free(&b);
}

static void test_captured_torch_bytes(void **state)
{
	/* set("k1", b"v1") from Debian's torch 1.13 client. */
	static const uint8_t cap[] = {0x00, 0x03, 0, 0, 0, 0, 0, 0, 0, 0x2f, 0x6b,
				      0x31, 0x02, 0, 0, 0, 0, 0, 0, 0, 0x76, 0x31};
	struct store_parser p;
	struct store_req r;

	parser_for(&p, STORE_DIALECT_NONE);
	assert_int_equal(store_parse(&p, cap, sizeof(cap), &r), 1);
	assert_int_equal(p.dialect, STORE_DIALECT_V1);
	assert_int_equal(r.op, STORE_OP_SET);
	assert_field(r.key, r.key_len, "/k1");
	assert_field(r.val, r.val_len, "v1");

	/* list_keys() and barrier("solo", 1) from Debian's torch 2.14 client
	 * (after its VALIDATE and PING), and its CANCEL_WAIT on a timeout. */
	static const uint8_t v2[] = {0x11, 0x12, 5,    0, 0, 0, 0, 0, 0, 0, 0x2f, 0x73,
				     0x6f, 0x6c, 0x6f, 1, 0, 0, 0, 0, 0, 0, 0,	  0x0c};
	size_t off = 0;

	parser_for(&p, STORE_DIALECT_V2);
	assert_int_equal(store_parse(&p, v2, sizeof(v2), &r), 1);
	assert_int_equal(r.op, STORE_OP_LIST_KEYS);
	assert_int_equal(r.len, 1);
	off += r.len;
	assert_int_equal(store_parse(&p, v2 + off, sizeof(v2) - off, &r), 1);
	assert_int_equal(r.op, STORE_OP_BARRIER);
	assert_field(r.key, r.key_len, "/solo");
	assert_int_equal(r.num, 1);
	off += r.len;
	assert_int_equal(store_parse(&p, v2 + off, sizeof(v2) - off, &r), 1);
	assert_int_equal(r.op, STORE_OP_CANCEL_WAIT);
	assert_int_equal(off + r.len, sizeof(v2));
}

/* The clients' value and key-list encoders refuse what a server with the
 * default limits would, writing nothing, and write what it accepts. */
static void test_client_encoders_keep_the_default_limits(void **state)
{
	static char big[STORE_MAX_KEY + 1];
	const char *keys[] = {"a", "bb", big};
	struct store_buf b;
	size_t n;

	memset(big, 'k', STORE_MAX_KEY); /* with its "/": one byte too many */
	store_buf_init(&b);
	assert_int_equal(store_put_user_value(&b, "v", STORE_MAX_VALUE + 1), -EMSGSIZE);
	assert_int_equal(store_put_user_value(&b, NULL, 1), -EINVAL);
	assert_int_equal(store_put_user_keys(&b, NULL, keys, STORE_MAX_MULTI_KEYS + 1), -E2BIG);
	assert_int_equal(b.len, 0);
	assert_int_equal(store_put_user_value(&b, NULL, 0), 0);
	assert_int_equal(b.len, 8);
	b.len = 0;
	assert_int_equal(store_put_user_keys(&b, "p", keys, 2), 0);
	assert_int_equal(store_get_u64(b.p), 2);
	n = 8 + 8 + 4 + 8 + 5; /* count, "/p/a", "/p/bb" */
	assert_int_equal(b.len, n);
	assert_memory_equal(b.p + 16, "/p/a", 4);
	assert_memory_equal(b.p + n - 5, "/p/bb", 5);
	assert_int_equal(store_put_user_keys(&b, NULL, keys, 3), -ENAMETOOLONG);
	store_buf_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_op_round_trips),
		cmocka_unit_test(test_every_truncation_needs_more),
		cmocka_unit_test(test_pipelined_messages),
		cmocka_unit_test(test_dialect_chosen_by_first_bytes),
		cmocka_unit_test(test_unknown_opcodes_rejected),
		cmocka_unit_test(test_oversize_lengths_rejected),
		cmocka_unit_test(test_multi_set_comes_out_pair_by_pair),
		cmocka_unit_test(test_garbage_never_crashes),
		cmocka_unit_test(test_reply_lengths),
		cmocka_unit_test(test_captured_torch_bytes),
		cmocka_unit_test(test_client_encoders_keep_the_default_limits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
