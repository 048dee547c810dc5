/* store_proto: the TCPStore wire codec's opcodes, request parser, reply
 * lengths and error texts (see store_proto.h; store_proto_enc.c encodes). */
#include "store_proto.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "store_proto_int.h"

const uint8_t store_shapes[STORE_OP_COUNT_][4] = {
	[STORE_OP_VALIDATE] = {F_U32},
	[STORE_OP_SET] = {F_KEY, F_VAL},
	[STORE_OP_COMPARE_SET] = {F_KEY, F_VAL, F_VAL2},
	[STORE_OP_GET] = {F_KEY},
	[STORE_OP_ADD] = {F_KEY, F_I64},
	[STORE_OP_CHECK] = {F_KEYLIST},
	[STORE_OP_WAIT] = {F_KEYLIST},
	[STORE_OP_NUMKEYS] = {F_END},
	[STORE_OP_DELETE] = {F_KEY},
	[STORE_OP_APPEND] = {F_KEY, F_VAL},
	[STORE_OP_MULTI_GET] = {F_KEYLIST},
	[STORE_OP_MULTI_SET] = {F_KVLIST},
	[STORE_OP_CANCEL_WAIT] = {F_END},
	[STORE_OP_PING] = {F_U32},
	[STORE_OP_QUEUE_PUSH] = {F_KEY, F_VAL},
	[STORE_OP_QUEUE_POP] = {F_KEY},
	[STORE_OP_QUEUE_LEN] = {F_KEY},
	[STORE_OP_WATCH_KEY] = {F_KEY},
	[STORE_OP_ON_CLOSE_SET] = {F_KEY, F_VAL},
	[STORE_OP_LIST_KEYS] = {F_END},
	[STORE_OP_BARRIER] = {F_KEY, F_I64},
};

static const char *const op_names[STORE_OP_COUNT_] = {
	[STORE_OP_VALIDATE] = "VALIDATE",
	[STORE_OP_SET] = "SET",
	[STORE_OP_COMPARE_SET] = "COMPARE_SET",
	[STORE_OP_GET] = "GET",
	[STORE_OP_ADD] = "ADD",
	[STORE_OP_CHECK] = "CHECK",
	[STORE_OP_WAIT] = "WAIT",
	[STORE_OP_NUMKEYS] = "GETNUMKEYS",
	[STORE_OP_DELETE] = "DELETE_KEY",
	[STORE_OP_APPEND] = "APPEND",
	[STORE_OP_MULTI_GET] = "MULTI_GET",
	[STORE_OP_MULTI_SET] = "MULTI_SET",
	[STORE_OP_CANCEL_WAIT] = "CANCEL_WAIT",
	[STORE_OP_PING] = "PING",
	[STORE_OP_QUEUE_PUSH] = "QUEUE_PUSH",
	[STORE_OP_QUEUE_POP] = "QUEUE_POP",
	[STORE_OP_QUEUE_LEN] = "QUEUE_LEN",
	[STORE_OP_WATCH_KEY] = "WATCH_KEY",
	[STORE_OP_ON_CLOSE_SET] = "ON_CLOSE_SET",
	[STORE_OP_LIST_KEYS] = "LIST_KEYS",
	[STORE_OP_BARRIER] = "BARRIER",
};

static const int8_t v1_ops[] = {
	[STORE_V1_SET] = STORE_OP_SET,
	[STORE_V1_COMPARE_SET] = STORE_OP_COMPARE_SET,
	[STORE_V1_GET] = STORE_OP_GET,
	[STORE_V1_ADD] = STORE_OP_ADD,
	[STORE_V1_CHECK] = STORE_OP_CHECK,
	[STORE_V1_WAIT] = STORE_OP_WAIT,
	[STORE_V1_GETNUMKEYS] = STORE_OP_NUMKEYS,
	[STORE_V1_WATCH_KEY] = STORE_OP_WATCH_KEY,
	[STORE_V1_DELETE_KEY] = STORE_OP_DELETE,
};

static const int8_t v2_ops[] = {
	[STORE_V2_VALIDATE] = STORE_OP_VALIDATE,
	[STORE_V2_SET] = STORE_OP_SET,
	[STORE_V2_COMPARE_SET] = STORE_OP_COMPARE_SET,
	[STORE_V2_GET] = STORE_OP_GET,
	[STORE_V2_ADD] = STORE_OP_ADD,
	[STORE_V2_CHECK] = STORE_OP_CHECK,
	[STORE_V2_WAIT] = STORE_OP_WAIT,
	[STORE_V2_GETNUMKEYS] = STORE_OP_NUMKEYS,
	[STORE_V2_DELETE_KEY] = STORE_OP_DELETE,
	[STORE_V2_APPEND] = STORE_OP_APPEND,
	[STORE_V2_MULTI_GET] = STORE_OP_MULTI_GET,
	[STORE_V2_MULTI_SET] = STORE_OP_MULTI_SET,
	[STORE_V2_CANCEL_WAIT] = STORE_OP_CANCEL_WAIT,
	[STORE_V2_PING] = STORE_OP_PING,
	[STORE_V2_QUEUE_PUSH] = STORE_OP_QUEUE_PUSH,
	[STORE_V2_QUEUE_POP] = STORE_OP_QUEUE_POP,
	[STORE_V2_QUEUE_LEN] = STORE_OP_QUEUE_LEN,
	[STORE_V2_LIST_KEYS] = STORE_OP_LIST_KEYS,
	[STORE_V2_BARRIER] = STORE_OP_BARRIER,
};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

static int wire_to_op(enum store_dialect d, uint8_t code)
{
	if (d == STORE_DIALECT_V1)
		return code < NELEM(v1_ops) ? v1_ops[code] : -1;
	if (code == STORE_V2_ON_CLOSE_SET)
		return STORE_OP_ON_CLOSE_SET;
	return code < NELEM(v2_ops) ? v2_ops[code] : -1;
}

int store_opcode(enum store_dialect d, enum store_op op)
{
	unsigned i;

	if (d == STORE_DIALECT_V1) {
		for (i = 0; i < NELEM(v1_ops); i++)
			if (v1_ops[i] == (int)op)
				return (int)i;
		return -1;
	}
	if (op == STORE_OP_ON_CLOSE_SET)
		return STORE_V2_ON_CLOSE_SET;
	for (i = 0; i < NELEM(v2_ops); i++)
		if (v2_ops[i] == (int)op)
			return (int)i;
	return -1;
}

const char *store_op_name(enum store_op op)
{
	return (unsigned)op < STORE_OP_COUNT_ ? op_names[op] : "?";
}

void store_limits_default(struct store_limits *l)
{
	l->max_key_len = STORE_MAX_KEY;
	l->max_value_len = STORE_MAX_VALUE;
	l->max_multi_keys = STORE_MAX_MULTI_KEYS;
	l->max_msg_len = STORE_MAX_MSG;
}

void store_parser_init(struct store_parser *p, const struct store_limits *lim, enum store_dialect d)
{
	memset(p, 0, sizeof(*p));
	p->dialect = d;
	if (lim)
		p->lim = *lim;
	else
		store_limits_default(&p->lim);
	p->op = -1;
}

static void reset_msg(struct store_parser *p)
{
	p->op = -1;
	p->field = 0;
	p->in_list = false;
	p->off = 0;
	p->left = 0;
	p->num = 0;
	p->count = 0;
	p->key_off = p->key_len = p->val_off = p->val_len = p->val2_off = p->val2_len = 0;
	p->list_off = 0;
}

/* Bytes up to `end` must be present; also bounds the whole message. */
static int need(struct store_parser *p, size_t end, size_t len)
{
	if (end > p->lim.max_msg_len) {
		snprintf(p->err, sizeof(p->err),
			 "%s message of %zu+ bytes over the %zu-byte buffer limit",
			 store_op_name(p->op), end, p->lim.max_msg_len);
		return -EMSGSIZE;
	}
	if (end > len) {
		p->need = end;
		return 0;
	}
	return 1;
}

/* A u64-length-prefixed item at p->off no longer than max: 1 when all of it is
 * present (*start and *n set, p->off moved past it), 0 need more, <0 error. */
static int item(struct store_parser *p, const uint8_t *buf, size_t len, size_t max,
		const char *what, size_t *start, size_t *n)
{
	uint64_t l;
	int rc = need(p, p->off + 8, len);

	if (rc <= 0)
		return rc;
	l = store_get_u64(buf + p->off);
	if (l > max) {
		snprintf(p->err, sizeof(p->err), "%s %s length %" PRIu64 " over the limit %zu",
			 store_op_name(p->op), what, l, max);
		return -EMSGSIZE;
	}
	rc = need(p, p->off + 8 + (size_t)l, len);
	if (rc <= 0)
		return rc;
	*start = p->off + 8;
	*n = (size_t)l;
	p->off += 8 + (size_t)l;
	return 1;
}

/* The u64 count of a list at p->off, checked against the limit. */
static int list_count(struct store_parser *p, const uint8_t *buf, size_t len)
{
	int rc = need(p, p->off + 8, len);

	if (rc <= 0)
		return rc;
	p->count = store_get_u64(buf + p->off);
	if (p->count > p->lim.max_multi_keys) {
		snprintf(p->err, sizeof(p->err), "%s of %" PRIu64 " keys over the limit %zu",
			 store_op_name(p->op), p->count, p->lim.max_multi_keys);
		return -EMSGSIZE;
	}
	p->off += 8;
	p->list_off = p->off;
	p->in_list = true;
	return 1;
}

static int list(struct store_parser *p, const uint8_t *buf, size_t len)
{
	size_t s, n;
	int rc;

	if (!p->in_list) {
		rc = list_count(p, buf, len);
		if (rc <= 0)
			return rc;
		p->left = p->count;
	}
	while (p->left > 0) {
		rc = item(p, buf, len, p->lim.max_key_len, "key", &s, &n);
		if (rc <= 0)
			return rc;
		p->left--;
	}
	p->in_list = false;
	return 1;
}

/* The next piece of a MULTI_SET: its count (with the opcode) and first pair,
 * or a further pair. 1 with *req filled; the parser then stays inside the
 * message unless it was the last pair (req->more false). */
static int pairs(struct store_parser *p, const uint8_t *buf, size_t len, struct store_req *req)
{
	size_t s, n;
	int rc;

	if (!p->in_list) {
		rc = list_count(p, buf, len);
		if (rc <= 0)
			return rc;
		p->left = 2 * p->count; /* items: a key, then its value */
	}
	while (p->left > 0) {
		/* Odd counts left mean a value comes next. */
		bool is_val = p->left & 1;

		rc = item(p, buf, len, is_val ? p->lim.max_value_len : p->lim.max_key_len,
			  is_val ? "value" : "key", &s, &n);
		if (rc <= 0)
			return rc;
		if (--p->left % 2 == 0)
			break; /* a whole pair */
	}
	memset(req, 0, sizeof(*req));
	req->op = STORE_OP_MULTI_SET;
	req->len = p->off;
	req->count = p->count ? 1 : 0;
	req->list = buf + p->list_off;
	req->list_len = p->off - p->list_off;
	req->more = p->left > 0;
	if (req->more) {
		/* The caller consumes this piece; the next starts at offset 0. */
		p->off = 0;
		p->list_off = 0;
	} else {
		reset_msg(p);
	}
	return 1;
}

/* Choose the dialect from the first bytes: 00 CE F7 85 3C is the 2.x VALIDATE;
 * anything else is a 1.x message. Returns 1 when a VALIDATE was consumed, 0
 * when the dialect is chosen (or more bytes are needed: p->need set). */
static int detect(struct store_parser *p, const uint8_t *buf, size_t len, bool *more)
{
	uint8_t magic[4];
	size_t i;
	uint32_t m = STORE_V2_MAGIC;

	*more = false;
	memcpy(magic, &m, 4);
	if (buf[0] != 0) {
		p->dialect = STORE_DIALECT_V1;
		return 0;
	}
	for (i = 1; i < len && i < 5; i++) {
		if (buf[i] != magic[i - 1]) {
			p->dialect = STORE_DIALECT_V1;
			return 0;
		}
	}
	if (len < 5) {
		p->need = 5;
		*more = true;
		return 0;
	}
	p->dialect = STORE_DIALECT_V2;
	return 1;
}

int store_parse(struct store_parser *p, const uint8_t *buf, size_t len, struct store_req *req)
{
	int rc;

	if (p->op < 0) {
		int op;

		if (len < 1) {
			p->need = 1;
			return 0;
		}
		if (p->dialect == STORE_DIALECT_NONE) {
			bool more;

			if (detect(p, buf, len, &more)) {
				memset(req, 0, sizeof(*req));
				req->op = STORE_OP_VALIDATE;
				req->len = 5;
				req->num = STORE_V2_MAGIC;
				return 1;
			}
			if (more)
				return 0;
		}
		op = wire_to_op(p->dialect, buf[0]);
		if (op < 0 || op == STORE_OP_VALIDATE) {
			snprintf(p->err, sizeof(p->err), "%s opcode 0x%02x in the %s dialect",
				 op < 0 ? "unknown" : "repeated VALIDATE", buf[0],
				 p->dialect == STORE_DIALECT_V1 ? "1.x" : "2.x");
			return -EPROTO;
		}
		reset_msg(p);
		p->op = op;
		p->off = 1;
	}
	for (;;) {
		switch (store_shapes[p->op][p->field]) {
		case F_END:
			memset(req, 0, sizeof(*req));
			req->op = (enum store_op)p->op;
			req->len = p->off;
			req->key = buf + p->key_off;
			req->key_len = p->key_len;
			req->val = buf + p->val_off;
			req->val_len = p->val_len;
			req->val2 = buf + p->val2_off;
			req->val2_len = p->val2_len;
			req->num = p->num;
			req->count = p->count;
			req->list = buf + p->list_off;
			req->list_len = p->list_off ? p->off - p->list_off : 0;
			reset_msg(p);
			return 1;
		case F_U32:
			rc = need(p, p->off + 4, len);
			if (rc <= 0)
				return rc;
			p->num = store_get_u32(buf + p->off);
			p->off += 4;
			break;
		case F_I64:
			rc = need(p, p->off + 8, len);
			if (rc <= 0)
				return rc;
			p->num = (int64_t)store_get_u64(buf + p->off);
			p->off += 8;
			break;
		case F_KEY:
			rc = item(p, buf, len, p->lim.max_key_len, "key", &p->key_off, &p->key_len);
			if (rc <= 0)
				return rc;
			break;
		case F_VAL:
			rc = item(p, buf, len, p->lim.max_value_len, "value", &p->val_off,
				  &p->val_len);
			if (rc <= 0)
				return rc;
			break;
		case F_VAL2:
			rc = item(p, buf, len, p->lim.max_value_len, "value", &p->val2_off,
				  &p->val2_len);
			if (rc <= 0)
				return rc;
			break;
		case F_KEYLIST:
			rc = list(p, buf, len);
			if (rc <= 0)
				return rc;
			break;
		case F_KVLIST:
			return pairs(p, buf, len, req);
		default:
			return -EPROTO;
		}
		p->field++;
	}
}

void store_list_next(const uint8_t **pos, const uint8_t **item_out, size_t *len)
{
	uint64_t l = store_get_u64(*pos);

	*item_out = *pos + 8;
	*len = (size_t)l;
	*pos += 8 + (size_t)l;
}

/* ---- replies ------------------------------------------------------------------ */

/* Length of a bytes field at off, or 0 if incomplete, -EPROTO if too long. */
static long bytes_end(const uint8_t *buf, size_t len, size_t off, size_t max)
{
	uint64_t l;

	if (len < off + 8)
		return 0;
	l = store_get_u64(buf + off);
	if (l > max)
		return -EPROTO;
	if (len - off - 8 < l)
		return 0;
	return (long)(off + 8 + l);
}

long store_reply_len(enum store_reply_kind k, uint64_t n, const uint8_t *buf, size_t len,
		     size_t max_value)
{
	size_t off = 0;
	uint64_t i;
	long e;

	switch (k) {
	case STORE_REPLY_NONE:
		return 0;
	case STORE_REPLY_U8:
		return len >= 1 ? 1 : 0;
	case STORE_REPLY_U32:
		return len >= 4 ? 4 : 0;
	case STORE_REPLY_I64:
		return len >= 8 ? 8 : 0;
	case STORE_REPLY_BYTES:
		return bytes_end(buf, len, 0, max_value);
	case STORE_REPLY_BYTES_N:
		for (i = 0; i < n; i++) {
			e = bytes_end(buf, len, off, max_value);
			if (e <= 0)
				return e;
			off = (size_t)e;
		}
		/* n == 0: an empty reply is complete but has no bytes. */
		return (long)off;
	case STORE_REPLY_LIST:
		if (len < 8)
			return 0;
		if ((int64_t)store_get_u64(buf) < 0)
			return -EPROTO;
		n = store_get_u64(buf);
		for (i = 0, off = 8; i < n; i++) {
			e = bytes_end(buf, len, off, max_value);
			if (e <= 0)
				return e;
			off = (size_t)e;
		}
		return (long)off;
	case STORE_REPLY_QPOP:
		if (len < 8)
			return 0;
		if ((int64_t)store_get_u64(buf) <= 0)
			return 8;
		return bytes_end(buf, len, 8, max_value);
	}
	return -EPROTO;
}

const char *store_strerror(int err)
{
	switch (err) {
	case 0:
		return "success";
	case -ETIMEDOUT:
		return "timed out";
	case -ECONNREFUSED:
		return "connection refused (nothing listens at that address)";
	case -ECONNRESET:
		return "connection closed by the server";
	case -EPIPE:
		return "connection closed by the server (broken pipe)";
	case -EPROTO:
		return "protocol error (unexpected reply from the server)";
	case -ENAMETOOLONG:
		return "key too long";
	case -EMSGSIZE:
		return "value too long";
	case -E2BIG:
		return "too many keys";
	case -ENOENT:
		return "key not found";
	case -ENOTCONN:
		return "client unusable after an earlier error";
	case -ECANCELED:
		return "operation cancelled";
	case -EHOSTUNREACH:
		return "host not found or unreachable";
	case -ENOMEM:
		return "out of memory";
	case -EINVAL:
		return "invalid argument";
	default:
		return err < 0 ? strerror(-err) : "unknown error";
	}
}
