/* store_proto_enc: the encoding half of the wire codec (see store_proto.h):
 * the output buffer and its field writers, which the server's replies use
 * too, and store_encode, the one request encoder of both clients and the
 * benchmarks, which writes a request by the same shape table the parser
 * reads it by. */
#include "store_proto.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store_proto_int.h"

/* ---- output buffer ---------------------------------------------------------- */

void store_buf_init(struct store_buf *b)
{
	memset(b, 0, sizeof(*b));
}

void store_buf_free(struct store_buf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

int store_grow(uint8_t **p, size_t *cap, size_t need, size_t first)
{
	size_t c = *cap ? *cap : first;
	uint8_t *np;

	if (need <= *cap)
		return 0;
	if (need > SIZE_MAX / 2)
		return -ENOMEM;
	while (c < need)
		c *= 2;
	np = realloc(*p, c);
	if (np == NULL)
		return -ENOMEM;
	*p = np;
	*cap = c;
	return 0;
}

uint8_t *store_buf_reserve(struct store_buf *b, size_t n)
{
	if (b->err)
		return NULL;
	/* The common case, room enough, costs no call. */
	if (n > SIZE_MAX / 2 - b->len ||
	    (b->len + n > b->cap && store_grow(&b->p, &b->cap, b->len + n, 64) < 0)) {
		b->err = -ENOMEM;
		return NULL;
	}
	return b->p + b->len;
}

void store_buf_put(struct store_buf *b, const void *data, size_t n)
{
	uint8_t *d = store_buf_reserve(b, n);

	if (d == NULL)
		return;
	if (n)
		memcpy(d, data, n);
	b->len += n;
}

void store_put_u8(struct store_buf *b, uint8_t v)
{
	store_buf_put(b, &v, 1);
}

void store_put_u32(struct store_buf *b, uint32_t v)
{
	store_buf_put(b, &v, 4);
}

void store_put_i64(struct store_buf *b, int64_t v)
{
	store_buf_put(b, &v, 8);
}

void store_put_u64(struct store_buf *b, uint64_t v)
{
	store_buf_put(b, &v, 8);
}

void store_put_bytes(struct store_buf *b, const void *data, size_t n)
{
	store_put_u64(b, n);
	store_buf_put(b, data, n);
}

void store_put_op(struct store_buf *b, enum store_dialect d, enum store_op op)
{
	int code = store_opcode(d, op);

	if (code < 0) {
		b->err = b->err ? b->err : -EINVAL;
		return;
	}
	store_put_u8(b, (uint8_t)code);
}

int store_put_user_key(struct store_buf *b, const char *prefix, const char *key, size_t max)
{
	size_t kl, pl = prefix && *prefix ? strlen(prefix) + 1 : 0;

	if (key == NULL)
		return -EINVAL;
	kl = strlen(key);
	if (1 + pl + kl > max)
		return -ENAMETOOLONG;
	store_put_u64(b, 1 + pl + kl);
	store_buf_put(b, "/", 1);
	if (pl) {
		store_buf_put(b, prefix, pl - 1);
		store_buf_put(b, "/", 1);
	}
	store_buf_put(b, key, kl);
	return 0;
}

int store_put_user_value(struct store_buf *b, const void *val, size_t len)
{
	if (len > STORE_MAX_VALUE)
		return -EMSGSIZE;
	if (len && val == NULL)
		return -EINVAL;
	store_put_bytes(b, val, len);
	return 0;
}

int store_put_user_keys(struct store_buf *b, const char *prefix, const char *const *keys, size_t n)
{
	size_t i;
	int rc = 0;

	if (n > STORE_MAX_MULTI_KEYS)
		return -E2BIG;
	store_put_u64(b, n);
	for (i = 0; i < n && rc == 0; i++)
		rc = store_put_user_key(b, prefix, keys[i], STORE_MAX_KEY);
	return rc;
}

/* ---- requests ------------------------------------------------------------------ */

/* MULTI_SET's pairs: the count, then each key and its value. */
static int put_pairs(struct store_buf *b, const char *prefix, const struct store_msg *m)
{
	size_t i;
	int rc = 0;

	if (m->n > STORE_MAX_MULTI_KEYS)
		return -E2BIG;
	store_put_u64(b, m->n);
	for (i = 0; i < m->n && rc == 0; i++) {
		rc = store_put_user_key(b, prefix, m->keys[i], STORE_MAX_KEY);
		if (rc == 0)
			rc = store_put_user_value(b, m->vals[i], m->lens[i]);
	}
	return rc;
}

static int put_field(struct store_buf *b, const char *prefix, const struct store_msg *m,
		     enum store_field f)
{
	switch (f) {
	case F_U32:
		store_put_u32(b, m->op == STORE_OP_VALIDATE ? STORE_V2_MAGIC : (uint32_t)m->num);
		return 0;
	case F_I64:
		store_put_i64(b, m->num);
		return 0;
	case F_KEY:
		/* ON_CLOSE_SET's empty wire key clears the registration. */
		if (m->op == STORE_OP_ON_CLOSE_SET && (m->key == NULL || *m->key == '\0')) {
			store_put_u64(b, 0);
			return 0;
		}
		return store_put_user_key(b, prefix, m->key, STORE_MAX_KEY);
	case F_VAL:
		return store_put_user_value(b, m->val, m->val_len);
	case F_VAL2:
		return store_put_user_value(b, m->val2, m->val2_len);
	case F_KEYLIST:
		return store_put_user_keys(b, prefix, m->keys, m->n);
	case F_KVLIST:
		return put_pairs(b, prefix, m);
	case F_END:
		break;
	}
	return -EINVAL;
}

int store_encode(struct store_buf *b, enum store_dialect d, const char *prefix,
		 const struct store_msg *m)
{
	size_t start = b->len;
	int code = (unsigned)m->op < STORE_OP_COUNT_ ? store_opcode(d, m->op) : -1;
	int rc = b->err ? b->err : (code < 0 ? -EINVAL : 0);
	unsigned i;

	if (rc < 0)
		return rc;
	store_put_u8(b, (uint8_t)code);
	for (i = 0; rc == 0 && store_shapes[m->op][i] != F_END; i++)
		rc = put_field(b, prefix, m, (enum store_field)store_shapes[m->op][i]);
	if (rc == 0)
		rc = b->err;
	if (rc < 0 && b->len > start)
		b->len = start; /* nothing of a refused request stays */
	return rc;
}
