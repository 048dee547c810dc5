/* store_proto: the wire codec of PyTorch's c10d TCPStore, both dialects.
 *
 * No framing: a message is a 1-byte opcode followed by fields in host byte
 * order (little-endian): strings/bytes are u64 length + bytes, integers are
 * int64, key lists are u64 count + that many strings.
 *
 *   1.x dialect (PyTorch 1.13, no handshake): SET=0 COMPARE_SET=1 GET=2 ADD=3
 *       CHECK=4 WAIT=5 GETNUMKEYS=6 WATCH_KEY=7 DELETE_KEY=8.
 *   2.x dialect: the first message is VALIDATE = 00 + u32 0x3C85F7CE; then
 *       SET=1 COMPARE_SET=2 GET=3 ADD=4 CHECK=5 WAIT=6 GETNUMKEYS=7
 *       DELETE_KEY=8 APPEND=9 MULTI_GET=10 MULTI_SET=11 CANCEL_WAIT=12
 *       PING=13 QUEUE_PUSH=14 QUEUE_POP=15 QUEUE_LEN=16 LIST_KEYS=17
 *       BARRIER=18.
 *   The first bytes of a connection choose its dialect (store_parse does it).
 *
 * ddp extension (2.x dialect only, outside PyTorch's opcode range):
 *   ON_CLOSE_SET = 0x80, key, value. Registers, for this connection, a
 *   create-if-absent SET of key to value that the server performs when the
 *   connection closes (EOF, reset, protocol error; not when the server itself
 *   shuts down): a key that has a value by then keeps it, like
 *   compare_set(key, "", value). A later ON_CLOSE_SET replaces the
 *   registration; an empty key clears it. The server replies one byte (0) once
 *   the registration is in force. The write wakes waiters like any SET. Use:
 *   an agent registers "<round>/end" so that every agent parked in WAIT on
 *   that key learns of its death at once, while a round that already ended
 *   keeps the first reason it was given.
 *
 * The parser is incremental and bounded: it never allocates, checks every
 * length against the limits before trusting it, resumes where it stopped when
 * more bytes arrive, and tells "need more bytes" (0) from "protocol error"
 * (negative errno, with a reason in p->err). Requests are written by one
 * encoder, store_encode, from the same table of field shapes the parser reads
 * by (store_proto_int.h); store_proto.c parses, store_proto_enc.c encodes. */
#ifndef DDP_STORE_PROTO_H
#define DDP_STORE_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define STORE_V2_MAGIC 0x3C85F7CEu

enum store_dialect {
	STORE_DIALECT_NONE = 0, /* not chosen yet: decided by the first bytes */
	STORE_DIALECT_V1,	/* PyTorch 1.x */
	STORE_DIALECT_V2,	/* PyTorch 2.x (VALIDATE handshake) */
};

/* Wire opcodes. */
enum {
	STORE_V1_SET = 0,
	STORE_V1_COMPARE_SET = 1,
	STORE_V1_GET = 2,
	STORE_V1_ADD = 3,
	STORE_V1_CHECK = 4,
	STORE_V1_WAIT = 5,
	STORE_V1_GETNUMKEYS = 6,
	STORE_V1_WATCH_KEY = 7,
	STORE_V1_DELETE_KEY = 8,
};
enum {
	STORE_V2_VALIDATE = 0,
	STORE_V2_SET = 1,
	STORE_V2_COMPARE_SET = 2,
	STORE_V2_GET = 3,
	STORE_V2_ADD = 4,
	STORE_V2_CHECK = 5,
	STORE_V2_WAIT = 6,
	STORE_V2_GETNUMKEYS = 7,
	STORE_V2_DELETE_KEY = 8,
	STORE_V2_APPEND = 9,
	STORE_V2_MULTI_GET = 10,
	STORE_V2_MULTI_SET = 11,
	STORE_V2_CANCEL_WAIT = 12,
	STORE_V2_PING = 13,
	STORE_V2_QUEUE_PUSH = 14,
	STORE_V2_QUEUE_POP = 15,
	STORE_V2_QUEUE_LEN = 16,
	STORE_V2_LIST_KEYS = 17,
	STORE_V2_BARRIER = 18,
	STORE_V2_ON_CLOSE_SET = 0x80, /* ddp extension, see above */
};

/* Reply bytes. */
enum { STORE_CHECK_READY = 0, STORE_CHECK_NOT_READY = 1 };
enum { STORE_WAIT_STOP = 0, STORE_WAIT_CANCELED = 1 };
enum {
	STORE_WATCH_UPDATED = 0,
	STORE_WATCH_CREATED = 1,
	STORE_WATCH_DELETED = 2,
	STORE_WATCH_REGISTERED = 3,
};

/* Operations, independent of the dialect. */
enum store_op {
	STORE_OP_VALIDATE,
	STORE_OP_SET,
	STORE_OP_COMPARE_SET,
	STORE_OP_GET,
	STORE_OP_ADD,
	STORE_OP_CHECK,
	STORE_OP_WAIT,
	STORE_OP_NUMKEYS,
	STORE_OP_DELETE,
	STORE_OP_APPEND,
	STORE_OP_MULTI_GET,
	STORE_OP_MULTI_SET,
	STORE_OP_CANCEL_WAIT,
	STORE_OP_PING,
	STORE_OP_QUEUE_PUSH,
	STORE_OP_QUEUE_POP,
	STORE_OP_QUEUE_LEN,
	STORE_OP_WATCH_KEY,
	STORE_OP_ON_CLOSE_SET,
	STORE_OP_LIST_KEYS,
	STORE_OP_BARRIER,
	STORE_OP_COUNT_
};

/* Wire opcode of op in dialect d, or -1 if the dialect has no such op. */
int store_opcode(enum store_dialect d, enum store_op op);
const char *store_op_name(enum store_op op);

/* The server's default limits (ddpstore serve --max-*-len may change them);
 * the clients refuse beforehand what a server with these limits would. */
#define STORE_MAX_KEY	     (8 * 1024)
#define STORE_MAX_VALUE	     (8 * 1024 * 1024)
#define STORE_MAX_MULTI_KEYS (128 * 1024)
#define STORE_MAX_MSG	     (64 * 1024 * 1024)
/* The longest value a client takes in a reply: far above any server's
 * --max-value-len, so that it reads whatever a server holds, yet a bound on a
 * garbage length. */
#define STORE_MAX_REPLY ((size_t)1 << 30)
/* The longest value APPENDs may grow. PyTorch's libuv server limits each
 * APPEND's own bytes (8 MiB) and lets the value grow past that; ours does
 * the same with --max-value-len, but a value that grows without end would
 * take the server's memory, so it stops at what a client takes in a reply
 * (an APPEND past it closes its connection, the value unchanged). */
#define STORE_MAX_APPENDED STORE_MAX_REPLY

struct store_limits {
	size_t max_key_len;    /* default STORE_MAX_KEY */
	size_t max_value_len;  /* default STORE_MAX_VALUE */
	size_t max_multi_keys; /* default STORE_MAX_MULTI_KEYS */
	/* Bytes of one message held at once; default STORE_MAX_MSG. A MULTI_SET is
	 * parsed pair by pair (see store_parse), so only its largest pair
	 * counts; every other message counts whole (in practice: key lists). */
	size_t max_msg_len;
};
void store_limits_default(struct store_limits *l);

/* A parsed request. Pointers point into the buffer given to store_parse and
 * stay valid as long as it does. */
struct store_req {
	enum store_op op;
	size_t len; /* bytes of the whole message */
	const uint8_t *key;
	size_t key_len;
	const uint8_t *val; /* SET/APPEND/QUEUE_PUSH/ON_CLOSE_SET value, COMPARE_SET expected */
	size_t val_len;
	const uint8_t *val2; /* COMPARE_SET desired */
	size_t val2_len;
	int64_t num;	     /* ADD delta, PING nonce, VALIDATE magic, BARRIER world size */
	uint64_t count;	     /* CHECK/WAIT/MULTI_GET keys, MULTI_SET pairs (of this piece) */
	const uint8_t *list; /* the encoded items after the count (store_list_next) */
	size_t list_len;
	bool more; /* a MULTI_SET piece that is not the message's last */
};

struct store_parser {
	enum store_dialect dialect;
	struct store_limits lim;
	size_t need; /* after a 0 return: total bytes needed before trying again */
	char err[96];
	/* resumable state of the message being parsed */
	int op; /* enum store_op of the message being parsed; -1: none */
	unsigned field;
	bool in_list;
	size_t off;
	uint64_t left;
	int64_t num;
	uint64_t count;
	size_t key_off, key_len, val_off, val_len, val2_off, val2_len, list_off;
};

void store_parser_init(struct store_parser *p, const struct store_limits *lim,
		       enum store_dialect d);

/* Parse one message from buf[0..len), which starts at the message start. Pass
 * the same bytes again (more may be appended, the buffer may move) until it
 * completes. Returns 1 with *req filled (req->len bytes used; the parser is
 * ready for the next message), 0 when more bytes are needed (at least p->need
 * in total), -EPROTO for an unknown opcode or bad handshake, -EMSGSIZE for a
 * length over a limit (reason in p->err).
 *
 * A MULTI_SET comes out in pieces of one pair each (req->count 1; 0 for an
 * empty one), so that 20 values of 8 MiB need no 160 MiB buffer: after a
 * piece with req->more set, the next call's buf starts after that piece's
 * req->len bytes, as after a whole message. */
int store_parse(struct store_parser *p, const uint8_t *buf, size_t len, struct store_req *req);

/* Iterate the items of a parsed list: *pos starts at req->list; each call
 * returns the next string (or the key, then the value, of MULTI_SET). */
void store_list_next(const uint8_t **pos, const uint8_t **item, size_t *len);

/* A growable output buffer. Allocation failure is sticky in err (-ENOMEM);
 * callers check it once after encoding. */
struct store_buf {
	uint8_t *p;
	size_t len, cap;
	int err;
};
void store_buf_init(struct store_buf *b);
void store_buf_free(struct store_buf *b);
/* Grow the buffer *p of *cap bytes to hold need bytes (doubling, from first
 * when empty); 0, or -ENOMEM with both unchanged. Also for buffers that are
 * not a store_buf (the server's input). */
int store_grow(uint8_t **p, size_t *cap, size_t need, size_t first);
/* Make room for n more bytes; returns a pointer to them or NULL (-ENOMEM). */
uint8_t *store_buf_reserve(struct store_buf *b, size_t n);
void store_buf_put(struct store_buf *b, const void *data, size_t n);
void store_put_u8(struct store_buf *b, uint8_t v);
void store_put_u32(struct store_buf *b, uint32_t v);
void store_put_i64(struct store_buf *b, int64_t v);
void store_put_u64(struct store_buf *b, uint64_t v);
/* u64 length then the bytes (a string/bytes field). */
void store_put_bytes(struct store_buf *b, const void *data, size_t n);
/* The opcode of op in dialect d (must exist). */
void store_put_op(struct store_buf *b, enum store_dialect d, enum store_op op);
/* A client key as torch.distributed.TCPStore sends it: "/" + key, or with a
 * prefix p "/" + p + "/" + key (PrefixStore). -EINVAL for a NULL key,
 * -ENAMETOOLONG past max bytes (nothing written then). */
int store_put_user_key(struct store_buf *b, const char *prefix, const char *key, size_t max);
/* A client's value: -EMSGSIZE past STORE_MAX_VALUE, -EINVAL for NULL with a
 * length (nothing written then). */
int store_put_user_value(struct store_buf *b, const void *val, size_t len);
/* A client's key list: the count, then each key as store_put_user_key writes
 * it (at most STORE_MAX_KEY bytes); -E2BIG past STORE_MAX_MULTI_KEYS keys. */
int store_put_user_keys(struct store_buf *b, const char *prefix, const char *const *keys, size_t n);

/* A request, for store_encode: op and the fields its shape has (see the
 * opcode list above); the others are ignored. Keys are user keys, as
 * store_put_user_key writes them. */
struct store_msg {
	enum store_op op;
	const char *key;
	const void *val; /* SET/APPEND/QUEUE_PUSH/ON_CLOSE_SET value, COMPARE_SET expected */
	size_t val_len;
	const void *val2; /* COMPARE_SET desired */
	size_t val2_len;
	int64_t num;		 /* ADD delta, PING nonce, BARRIER world size */
	const char *const *keys; /* CHECK/WAIT/MULTI_GET keys, MULTI_SET's keys */
	const void *const *vals; /* MULTI_SET values, lens[i] bytes each */
	const size_t *lens;
	size_t n; /* keys (and vals) */
};

/* Append m in dialect d to b, its keys under prefix (NULL: none). VALIDATE
 * gets the magic; ON_CLOSE_SET's NULL or "" key is the empty wire key (it
 * clears). Returns 0, or with nothing appended: -EINVAL (op not in d, a NULL
 * key, a NULL value with a length), -ENAMETOOLONG, -EMSGSIZE, -E2BIG (the
 * client limits above), or b's sticky -ENOMEM. */
int store_encode(struct store_buf *b, enum store_dialect d, const char *prefix,
		 const struct store_msg *m);

static inline uint64_t store_get_u64(const uint8_t *p)
{
	uint64_t v;
	__builtin_memcpy(&v, p, sizeof(v));
	return v;
}
static inline uint32_t store_get_u32(const uint8_t *p)
{
	uint32_t v;
	__builtin_memcpy(&v, p, sizeof(v));
	return v;
}

/* Reply shapes, for clients reading replies incrementally. */
enum store_reply_kind {
	STORE_REPLY_NONE,    /* SET, APPEND, MULTI_SET, QUEUE_PUSH */
	STORE_REPLY_U8,	     /* CHECK, WAIT, BARRIER, CANCEL_WAIT, ON_CLOSE_SET */
	STORE_REPLY_U32,     /* PING */
	STORE_REPLY_I64,     /* ADD, GETNUMKEYS, DELETE_KEY, QUEUE_LEN */
	STORE_REPLY_BYTES,   /* GET, COMPARE_SET */
	STORE_REPLY_BYTES_N, /* MULTI_GET: n values */
	STORE_REPLY_QPOP,    /* QUEUE_POP: int64 count, then bytes if count > 0 */
	STORE_REPLY_LIST,    /* LIST_KEYS: int64 n, then n strings */
};

/* Is a complete reply of this kind at buf[0..len)? Returns its length (> 0),
 * 0 if more bytes are needed, -EPROTO if a length exceeds max_value. */
long store_reply_len(enum store_reply_kind k, uint64_t n, const uint8_t *buf, size_t len,
		     size_t max_value);

/* Text for an error any part of the store gives (client, async client or
 * server: 0 or a negative errno), e.g. -ETIMEDOUT "timed out". */
const char *store_strerror(int err);

#endif
