/* store_client_ops: the blocking client's operations (see store_client.h),
 * each one request and its reply within the operation's deadline. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store_client_int.h"
#include "util.h"

static int recv_u8(struct store_client *c, uint8_t *v, int64_t deadline)
{
	return store_client_recv(c, v, 1, deadline);
}

static int recv_i64(struct store_client *c, int64_t *v, int64_t deadline)
{
	return store_client_recv(c, v, 8, deadline);
}

/* ---- requests ---------------------------------------------------------------------- */

/* Encode m into the client's one request buffer and send it. */
static int request(struct store_client *c, const struct store_msg *m, int64_t deadline)
{
	int rc;

	if (c->broken)
		return -ENOTCONN;
	c->req.len = 0;
	c->req.err = 0;
	rc = store_encode(&c->req, STORE_DIALECT_V2, c->prefix, m);
	return rc ? rc : store_client_fail(c, store_client_send(c, c->req.p, c->req.len, deadline));
}

static int64_t op_deadline(struct store_client *c)
{
	return store_client_deadline(c->op_timeout_ms);
}

/* SET, APPEND and QUEUE_PUSH: a key and a value, no reply. */
static int key_value_op(struct store_client *c, enum store_op op, const char *key, const void *val,
			size_t len)
{
	struct store_msg m = {.op = op, .key = key, .val = val, .val_len = len};

	return request(c, &m, op_deadline(c));
}

int store_client_set(struct store_client *c, const char *key, const void *val, size_t len)
{
	return key_value_op(c, STORE_OP_SET, key, val, len);
}

/* WAIT with cancel on timeout. 0 when the keys exist, -ETIMEDOUT when the
 * server confirmed the cancel (the client stays usable). */
static int await_stop(struct store_client *c, int64_t deadline);

static int do_wait(struct store_client *c, const char *const *keys, size_t n, int64_t deadline)
{
	struct store_msg m = {.op = STORE_OP_WAIT, .keys = keys, .n = n};
	int rc = request(c, &m, deadline);

	return rc < 0 ? rc : await_stop(c, deadline);
}

/* STOP_WAITING for the WAIT or BARRIER just sent, with cancel on timeout. */
static int await_stop(struct store_client *c, int64_t deadline)
{
	struct store_msg cancel = {.op = STORE_OP_CANCEL_WAIT};
	uint8_t r;
	int rc = recv_u8(c, &r, deadline);

	if (rc == 0)
		return r == STORE_WAIT_STOP ? 0 : store_client_fail(c, -EPROTO);
	if (rc != -ETIMEDOUT)
		return store_client_fail(c, rc);
	/* Cancel; a STOP_WAITING already in flight may come first, and then
	 * the keys are there after all. */
	deadline = store_client_deadline(c->op_timeout_ms > 0 ? c->op_timeout_ms : 10000);
	rc = request(c, &cancel, deadline);
	if (rc == 0)
		rc = recv_u8(c, &r, deadline);
	if (rc == 0 && r == STORE_WAIT_STOP) {
		rc = recv_u8(c, &r, deadline);
		if (rc == 0 && r == STORE_WAIT_CANCELED)
			return 0;
	} else if (rc == 0 && r == STORE_WAIT_CANCELED) {
		return -ETIMEDOUT;
	}
	return store_client_fail(c, rc < 0 ? rc : -EPROTO);
}

int store_client_wait(struct store_client *c, const char *const *keys, size_t n, int64_t timeout_ms)
{
	return do_wait(c, keys, n,
		       store_client_deadline(timeout_ms > 0 ? timeout_ms : c->op_timeout_ms));
}

static int get_now(struct store_client *c, const char *key, void **val, size_t *len,
		   int64_t deadline)
{
	struct store_msg m = {.op = STORE_OP_GET, .key = key};
	int rc = request(c, &m, deadline);

	if (rc == 0)
		rc = store_client_fail(c, store_client_recv_bytes(c, val, len, deadline));
	return rc;
}

int store_client_get(struct store_client *c, const char *key, void **val, size_t *len)
{
	int64_t deadline = op_deadline(c);
	int rc = do_wait(c, &key, 1, deadline);

	return rc ? rc : get_now(c, key, val, len, deadline);
}

int store_client_try_get(struct store_client *c, const char *key, void **val, size_t *len)
{
	int64_t deadline = op_deadline(c);
	int rc = store_client_check(c, &key, 1);

	if (rc < 0)
		return rc;
	if (rc == 0)
		return -ENOENT;
	return get_now(c, key, val, len, deadline);
}

/* A request answered by one int64. */
static int simple_i64(struct store_client *c, const struct store_msg *m, int64_t *out)
{
	int64_t deadline = op_deadline(c);
	int rc = request(c, m, deadline);

	if (rc == 0)
		rc = store_client_fail(c, recv_i64(c, out, deadline));
	return rc;
}

int store_client_add(struct store_client *c, const char *key, int64_t delta, int64_t *result)
{
	struct store_msg m = {.op = STORE_OP_ADD, .key = key, .num = delta};
	int64_t r;
	int rc = simple_i64(c, &m, &r);
	if (rc == 0 && result)
		*result = r;
	return rc;
}

int store_client_compare_set(struct store_client *c, const char *key, const void *expected,
			     size_t elen, const void *desired, size_t dlen, void **cur,
			     size_t *curlen)
{
	struct store_msg m = {
		.op = STORE_OP_COMPARE_SET, .key = key, .val = expected, .val_len = elen};
	int64_t deadline = op_deadline(c);
	int rc;

	m.val2 = desired;
	m.val2_len = dlen;
	rc = request(c, &m, deadline);

	if (rc == 0)
		rc = store_client_fail(c, store_client_recv_bytes(c, cur, curlen, deadline));
	return rc;
}

int store_client_check(struct store_client *c, const char *const *keys, size_t n)
{
	struct store_msg m = {.op = STORE_OP_CHECK, .keys = keys, .n = n};
	int64_t deadline = op_deadline(c);
	uint8_t r;
	int rc = request(c, &m, deadline);

	if (rc == 0)
		rc = store_client_fail(c, recv_u8(c, &r, deadline));
	if (rc < 0)
		return rc;
	if (r != STORE_CHECK_READY && r != STORE_CHECK_NOT_READY)
		return store_client_fail(c, -EPROTO);
	return r == STORE_CHECK_READY;
}

int store_client_delete(struct store_client *c, const char *key)
{
	struct store_msg m = {.op = STORE_OP_DELETE, .key = key};
	int64_t r = 0;
	int rc = simple_i64(c, &m, &r);

	return rc < 0 ? rc : r == 1;
}

int store_client_num_keys(struct store_client *c, int64_t *n)
{
	struct store_msg m = {.op = STORE_OP_NUMKEYS};

	return simple_i64(c, &m, n);
}

int store_client_append(struct store_client *c, const char *key, const void *val, size_t len)
{
	return key_value_op(c, STORE_OP_APPEND, key, val, len);
}

int store_client_multi_get(struct store_client *c, const char *const *keys, size_t n, void **vals,
			   size_t *lens)
{
	struct store_msg m = {.op = STORE_OP_MULTI_GET, .keys = keys, .n = n};
	int64_t deadline = op_deadline(c);
	size_t i, j;
	int rc = n ? do_wait(c, keys, n, deadline) : 0;

	if (rc == 0)
		rc = request(c, &m, deadline);
	for (i = 0; rc == 0 && i < n; i++) {
		rc = store_client_fail(c, store_client_recv_bytes(c, &vals[i], &lens[i], deadline));
		if (rc < 0) {
			for (j = 0; j < i; j++) {
				free(vals[j]);
				vals[j] = NULL;
			}
		}
	}
	return rc;
}

int store_client_multi_set(struct store_client *c, const char *const *keys, const void *const *vals,
			   const size_t *lens, size_t n)
{
	struct store_msg m = {
		.op = STORE_OP_MULTI_SET, .keys = keys, .vals = vals, .lens = lens, .n = n};

	return request(c, &m, op_deadline(c));
}

int store_client_queue_push(struct store_client *c, const char *key, const void *val, size_t len)
{
	return key_value_op(c, STORE_OP_QUEUE_PUSH, key, val, len);
}

int store_client_queue_pop(struct store_client *c, const char *key, void **val, size_t *len)
{
	struct store_msg pop = {.op = STORE_OP_QUEUE_POP, .key = key};
	int64_t deadline = op_deadline(c), n, pause = 1;
	int rc;

	/* Wait for an item, then pop. Another client may take it first; and a
	 * key that also holds a plain value satisfies WAIT at once: then retry
	 * with a growing pause (at most 100 ms) until the deadline. */
	for (;;) {
		rc = do_wait(c, &key, 1, deadline);
		if (rc == 0)
			rc = request(c, &pop, deadline);
		if (rc == 0)
			rc = store_client_fail(c, recv_i64(c, &n, deadline));
		if (rc < 0)
			return rc;
		if (n > 0)
			return store_client_fail(c, store_client_recv_bytes(c, val, len, deadline));
		if (deadline >= 0 && util_now_ms() + pause >= deadline)
			return -ETIMEDOUT;
		util_sleep_ms(pause);
		pause = pause * 2 > 100 ? 100 : pause * 2;
	}
}

int store_client_queue_len(struct store_client *c, const char *key, int64_t *n)
{
	struct store_msg m = {.op = STORE_OP_QUEUE_LEN, .key = key};

	return simple_i64(c, &m, n);
}

int store_client_ping(struct store_client *c)
{
	struct store_msg m = {.op = STORE_OP_PING, .num = ++c->nonce};
	int64_t deadline = op_deadline(c);
	uint32_t echo = 0;
	int rc = request(c, &m, deadline);

	if (rc == 0)
		rc = store_client_fail(c, store_client_recv(c, &echo, 4, deadline));
	if (rc == 0 && echo != c->nonce)
		rc = store_client_fail(c, -EPROTO);
	return rc;
}

int store_client_on_close_set(struct store_client *c, const char *key, const void *val, size_t len)
{
	/* NULL or "" clears the registration: store_encode sends the empty key. */
	struct store_msg m = {.op = STORE_OP_ON_CLOSE_SET, .key = key, .val = val, .val_len = len};
	int64_t deadline = op_deadline(c);
	uint8_t ack;
	int rc = request(c, &m, deadline);

	if (rc == 0)
		rc = store_client_fail(c, recv_u8(c, &ack, deadline));
	return rc;
}

int store_client_barrier(struct store_client *c, const char *key, int64_t world_size,
			 int64_t timeout_ms)
{
	struct store_msg m = {.op = STORE_OP_BARRIER, .key = key, .num = world_size};
	int64_t deadline = store_client_deadline(timeout_ms > 0 ? timeout_ms : c->op_timeout_ms);
	int rc = request(c, &m, deadline);

	return rc < 0 ? rc : await_stop(c, deadline);
}

void store_client_keys_free(char **keys, size_t n)
{
	size_t i;

	if (keys == NULL)
		return;
	for (i = 0; i < n; i++)
		free(keys[i]);
	free(keys);
}

/* The wire key's user part, as the Python TCPStore and PrefixStore see it:
 * after "/" (and "prefix/"); NULL for a key outside it. */
static const char *user_part(const struct store_client *c, const char *k, size_t len, size_t *ul)
{
	size_t pl = c->prefix ? strlen(c->prefix) : 0;

	if (len < 1 || k[0] != '/')
		return NULL;
	k++;
	len--;
	if (pl) {
		if (len < pl + 1 || memcmp(k, c->prefix, pl) != 0 || k[pl] != '/')
			return NULL;
		k += pl + 1;
		len -= pl + 1;
	}
	*ul = len;
	return k;
}

int store_client_list_keys(struct store_client *c, char ***keys, size_t *n)
{
	struct store_msg m = {.op = STORE_OP_LIST_KEYS};
	int64_t deadline = op_deadline(c), count;
	char **out = NULL;
	size_t got = 0;
	int rc;

	*keys = NULL;
	*n = 0;
	rc = request(c, &m, deadline);
	if (rc == 0)
		rc = store_client_fail(c, recv_i64(c, &count, deadline));
	if (rc < 0)
		return rc;
	/* The server's table bounds it; a count no table can hold is garbage. */
	if (count < 0 || (uint64_t)count > SIZE_MAX / sizeof(char *) / 16)
		return store_client_fail(c, -EPROTO);
	out = calloc((size_t)count ? (size_t)count : 1, sizeof(char *));
	if (out == NULL)
		return store_client_fail(c, -ENOMEM); /* the reply is still coming */
	for (int64_t i = 0; i < count; i++) {
		void *k;
		size_t kl, ul;
		const char *u;

		rc = store_client_fail(c, store_client_recv_bytes(c, &k, &kl, deadline));
		if (rc < 0)
			break;
		u = user_part(c, k, kl, &ul);
		if (u == NULL) {
			free(k);
			continue;
		}
		memmove(k, u, ul);
		((char *)k)[ul] = '\0';
		out[got++] = k;
	}
	if (rc < 0) {
		store_client_keys_free(out, got);
		return rc;
	}
	if (got == 0) {
		free(out);
		out = NULL;
	}
	*keys = out;
	*n = got;
	return 0;
}
