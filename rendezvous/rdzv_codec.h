/* rdzv_codec: a JSON object described by a table of fields, and one encoder
 * and one decoder that walk the table (rdzv_msg.c's messages are tables).
 *
 * A field names its JSON key, its C type, where it lies in the struct
 * (offsetof) and its bounds; the encoder writes the keys in table order, the
 * decoder checks every field (present unless optional, the right JSON type,
 * within bounds, a string that fits its buffer) and fails the whole value
 * with -EINVAL on the first that does not. */
#ifndef DDP_RDZV_CODEC_H
#define DDP_RDZV_CODEC_H

#include <stddef.h>
#include <stdint.h>

#define RDZV_MSG_MAX (64 * 1024) /* no value of ours is longer */

enum rdzv_ftype {
	RDZV_F_INT,	 /* int, a JSON number in [min, max] */
	RDZV_F_I64,	 /* int64_t, a JSON number in [min, max] */
	RDZV_F_BOOL,	 /* bool, true or false */
	RDZV_F_STR,	 /* char[size], a JSON string shorter than size */
	RDZV_F_INT_PAIR, /* two ints at off and off2, the string "A:B", each in [min, max] */
};

enum {
	RDZV_F_OPTIONAL = 1, /* a string: omitted when empty, "" when absent */
};

struct rdzv_field {
	const char *key;
	enum rdzv_ftype type;
	size_t off, off2; /* off2: the pair's second int */
	size_t size;	  /* strings: the buffer's size */
	int64_t min, max;
	unsigned flags;
};

/* The value: the fields' object itself, or {"<wrap>": {fields}} when wrap is
 * set. */
struct rdzv_msgdef {
	const char *wrap;
	const struct rdzv_field *fields;
	size_t nfields;
};

#define RDZV_MEMBER_SIZE(T, m) sizeof(((T *)0)->m)
#define RDZV_INT(T, m, lo, hi)                                      \
	{                                                           \
#m, RDZV_F_INT, offsetof(T, m), 0, 0, (lo), (hi), 0 \
	}
#define RDZV_I64(T, m, lo, hi)                                      \
	{                                                           \
#m, RDZV_F_I64, offsetof(T, m), 0, 0, (lo), (hi), 0 \
	}
#define RDZV_BOOL(T, m)                                        \
	{                                                      \
#m, RDZV_F_BOOL, offsetof(T, m), 0, 0, 0, 1, 0 \
	}
#define RDZV_STR(T, m, fl)                                                            \
	{                                                                             \
#m, RDZV_F_STR, offsetof(T, m), 0, RDZV_MEMBER_SIZE(T, m), 0, 0, (fl) \
	}
#define RDZV_INT_PAIR(key, T, a, b, lo, hi)                                            \
	{                                                                              \
		key, RDZV_F_INT_PAIR, offsetof(T, a), offsetof(T, b), 0, (lo), (hi), 0 \
	}
#define RDZV_MSGDEF(wrap, table)                                    \
	{                                                           \
		(wrap), (table), sizeof(table) / sizeof((table)[0]) \
	}

/* src as the value d describes: malloc'd text, NULL on ENOMEM. */
char *rdzv_codec_encode(const struct rdzv_msgdef *d, const void *src);
/* The bytes v[0..len) as read from the store into dst: 0, or -EINVAL for
 * anything but the value d describes (dst may then be partly written). */
int rdzv_codec_decode(const struct rdzv_msgdef *d, const void *v, size_t len, void *dst);

#endif
