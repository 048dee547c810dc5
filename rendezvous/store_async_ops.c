/* store_async_ops: the requests of the asynchronous client (see
 * store_async.h); store_async.c sends them and matches their replies. */
#include <errno.h>
#include <string.h>

#include "store_async_int.h"

int store_async_set(struct store_async *a, const char *key, const void *val, size_t len,
		    store_async_done_cb cb, void *arg)
{
	struct aop *o = store_async_op_new(a, STORE_OP_SET, STORE_REPLY_NONE, K_DONE, arg);
	int rc = o ? store_put_user_key(&o->req, a->prefix, key, STORE_MAX_KEY) : 0;

	if (o && rc == 0)
		rc = store_put_user_value(&o->req, val, len);
	if (o)
		o->cb.done = cb;
	return store_async_submit(a, o, rc);
}

int store_async_get(struct store_async *a, const char *key, store_async_bytes_cb cb, void *arg)
{
	struct aop *o = store_async_op_new(a, STORE_OP_GET, STORE_REPLY_U8, K_BYTES, arg);
	int rc = 0;

	/* CHECK then GET in one write: one round trip, and an empty value
	 * is told apart from a missing key. */
	if (o) {
		o->req.len = 0;
		store_put_op(&o->req, STORE_DIALECT_V2, STORE_OP_CHECK);
		store_put_u64(&o->req, 1);
		rc = store_put_user_key(&o->req, a->prefix, key, STORE_MAX_KEY);
		store_put_op(&o->req, STORE_DIALECT_V2, STORE_OP_GET);
		if (rc == 0)
			rc = store_put_user_key(&o->req, a->prefix, key, STORE_MAX_KEY);
		o->cb.bytes = cb;
	}
	return store_async_submit(a, o, rc);
}

int store_async_add(struct store_async *a, const char *key, int64_t delta, store_async_int_cb cb,
		    void *arg)
{
	struct aop *o = store_async_op_new(a, STORE_OP_ADD, STORE_REPLY_I64, K_INT, arg);
	int rc = o ? store_put_user_key(&o->req, a->prefix, key, STORE_MAX_KEY) : 0;

	if (o) {
		store_put_i64(&o->req, delta);
		o->cb.i = cb;
	}
	return store_async_submit(a, o, rc);
}

int store_async_compare_set(struct store_async *a, const char *key, const void *expected,
			    size_t elen, const void *desired, size_t dlen, store_async_bytes_cb cb,
			    void *arg)
{
	struct aop *o =
		store_async_op_new(a, STORE_OP_COMPARE_SET, STORE_REPLY_BYTES, K_BYTES, arg);
	int rc = o ? store_put_user_key(&o->req, a->prefix, key, STORE_MAX_KEY) : 0;

	if (o && rc == 0)
		rc = store_put_user_value(&o->req, expected, elen);
	if (o && rc == 0)
		rc = store_put_user_value(&o->req, desired, dlen);
	if (o) {
		o->check = STORE_CHECK_READY;
		o->cb.bytes = cb;
	}
	return store_async_submit(a, o, rc);
}

int store_async_check(struct store_async *a, const char *const *keys, size_t n,
		      store_async_int_cb cb, void *arg)
{
	struct aop *o = store_async_op_new(a, STORE_OP_CHECK, STORE_REPLY_U8, K_INT, arg);
	int rc = o ? store_put_user_keys(&o->req, a->prefix, keys, n) : 0;

	if (o)
		o->cb.i = cb;
	return store_async_submit(a, o, rc);
}

int store_async_multi_get(struct store_async *a, const char *const *keys, size_t n,
			  store_async_multi_cb cb, void *arg)
{
	struct aop *o;
	int rc;

	if (n == 0)
		return -EINVAL; /* no reply would ever come to complete it */
	o = store_async_op_new(a, STORE_OP_MULTI_GET, STORE_REPLY_BYTES_N, K_MULTI, arg);
	rc = o ? store_put_user_keys(&o->req, a->prefix, keys, n) : 0;

	if (o) {
		o->n = n;
		o->cb.multi = cb;
	}
	return store_async_submit(a, o, rc);
}

int store_async_multi_set(struct store_async *a, const char *const *keys, const void *const *vals,
			  const size_t *lens, size_t n, store_async_done_cb cb, void *arg)
{
	struct aop *o = store_async_op_new(a, STORE_OP_MULTI_SET, STORE_REPLY_NONE, K_DONE, arg);
	size_t i;
	int rc = n > STORE_MAX_MULTI_KEYS ? -E2BIG : 0;

	if (o && rc == 0) {
		store_put_u64(&o->req, n);
		for (i = 0; i < n && rc == 0; i++) {
			rc = store_put_user_key(&o->req, a->prefix, keys[i], STORE_MAX_KEY);
			if (rc == 0)
				rc = store_put_user_value(&o->req, vals[i], lens[i]);
		}
	}
	if (o)
		o->cb.done = cb;
	return store_async_submit(a, o, rc);
}

int store_async_delete(struct store_async *a, const char *key, store_async_int_cb cb, void *arg)
{
	struct aop *o = store_async_op_new(a, STORE_OP_DELETE, STORE_REPLY_I64, K_INT, arg);
	int rc = o ? store_put_user_key(&o->req, a->prefix, key, STORE_MAX_KEY) : 0;

	if (o)
		o->cb.i = cb;
	return store_async_submit(a, o, rc);
}

int store_async_num_keys(struct store_async *a, store_async_int_cb cb, void *arg)
{
	struct aop *o = store_async_op_new(a, STORE_OP_NUMKEYS, STORE_REPLY_I64, K_INT, arg);

	if (o)
		o->cb.i = cb;
	return store_async_submit(a, o, 0);
}

int store_async_on_close_set(struct store_async *a, const char *key, const void *val, size_t len,
			     store_async_done_cb cb, void *arg)
{
	struct aop *o = store_async_op_new(a, STORE_OP_ON_CLOSE_SET, STORE_REPLY_U8, K_DONE, arg);
	int rc = 0;

	if (o && (key == NULL || *key == '\0'))
		store_put_u64(&o->req, 0); /* clears */
	else if (o)
		rc = store_put_user_key(&o->req, a->prefix, key, STORE_MAX_KEY);
	if (o && rc == 0)
		rc = store_put_user_value(&o->req, val, len);
	if (o)
		o->cb.done = cb;
	return store_async_submit(a, o, rc);
}

int store_async_wait(struct store_async *a, const char *const *keys, size_t n, int64_t timeout_ms,
		     store_async_done_cb cb, void *arg)
{
	struct aop *o = store_async_op_new(a, STORE_OP_WAIT, STORE_REPLY_U8, K_DONE, arg);
	int rc = o ? store_put_user_keys(&o->req, a->prefix, keys, n) : 0;

	if (o) {
		o->timeout_ms = timeout_ms;
		o->cb.done = cb;
	}
	return store_async_submit(a, o, rc);
}

int store_async_ping(struct store_async *a, store_async_done_cb cb, void *arg)
{
	struct aop *o = store_async_op_new(a, STORE_OP_PING, STORE_REPLY_U32, K_DONE, arg);

	if (o) {
		o->nonce = ++a->nonce;
		store_put_u32(&o->req, o->nonce);
		o->cb.done = cb;
	}
	return store_async_submit(a, o, 0);
}

int store_async_barrier(struct store_async *a, const char *key, int64_t world_size,
			int64_t timeout_ms, store_async_done_cb cb, void *arg)
{
	struct aop *o = store_async_op_new(a, STORE_OP_BARRIER, STORE_REPLY_U8, K_DONE, arg);
	int rc = o ? store_put_user_key(&o->req, a->prefix, key, STORE_MAX_KEY) : 0;

	if (o) {
		store_put_i64(&o->req, world_size);
		o->timeout_ms = timeout_ms;
		o->cb.done = cb;
	}
	return store_async_submit(a, o, rc);
}

int store_async_list_keys(struct store_async *a, store_async_multi_cb cb, void *arg)
{
	struct aop *o = store_async_op_new(a, STORE_OP_LIST_KEYS, STORE_REPLY_LIST, K_MULTI, arg);

	if (o)
		o->cb.multi = cb;
	return store_async_submit(a, o, 0);
}
