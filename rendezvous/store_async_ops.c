/* store_async_ops: the requests of the asynchronous client (see
 * store_async.h), each a message for store_encode and how its reply is
 * delivered; store_async.c sends them and matches their replies. */
#include <errno.h>
#include <string.h>

#include "store_async_int.h"

int store_async_set(struct store_async *a, const char *key, const void *val, size_t len,
		    store_async_done_cb cb, void *arg)
{
	struct store_msg m = {.op = STORE_OP_SET, .key = key, .val = val, .val_len = len};
	struct aop t = {.reply = STORE_REPLY_NONE, .kind = K_DONE, .cb.done = cb, .arg = arg};

	return store_async_queue(a, &t, &m, 1);
}

int store_async_get(struct store_async *a, const char *key, store_async_bytes_cb cb, void *arg)
{
	/* CHECK then GET in one write: one round trip, and an empty value
	 * is told apart from a missing key. */
	struct store_msg m[] = {{.op = STORE_OP_CHECK, .keys = &key, .n = 1},
				{.op = STORE_OP_GET, .key = key}};
	struct aop t = {.reply = STORE_REPLY_U8, .kind = K_BYTES, .cb.bytes = cb, .arg = arg};

	return store_async_queue(a, &t, m, 2);
}

int store_async_add(struct store_async *a, const char *key, int64_t delta, store_async_int_cb cb,
		    void *arg)
{
	struct store_msg m = {.op = STORE_OP_ADD, .key = key, .num = delta};
	struct aop t = {.reply = STORE_REPLY_I64, .kind = K_INT, .cb.i = cb, .arg = arg};

	return store_async_queue(a, &t, &m, 1);
}

int store_async_compare_set(struct store_async *a, const char *key, const void *expected,
			    size_t elen, const void *desired, size_t dlen, store_async_bytes_cb cb,
			    void *arg)
{
	struct store_msg m = {
		.op = STORE_OP_COMPARE_SET, .key = key, .val = expected, .val_len = elen};
	struct aop t = {.reply = STORE_REPLY_BYTES,
			.kind = K_BYTES,
			.check = STORE_CHECK_READY,
			.cb.bytes = cb,
			.arg = arg};

	m.val2 = desired;
	m.val2_len = dlen;
	return store_async_queue(a, &t, &m, 1);
}

int store_async_check(struct store_async *a, const char *const *keys, size_t n,
		      store_async_int_cb cb, void *arg)
{
	struct store_msg m = {.op = STORE_OP_CHECK, .keys = keys, .n = n};
	struct aop t = {.reply = STORE_REPLY_U8, .kind = K_INT, .cb.i = cb, .arg = arg};

	return store_async_queue(a, &t, &m, 1);
}

int store_async_multi_get(struct store_async *a, const char *const *keys, size_t n,
			  store_async_multi_cb cb, void *arg)
{
	struct store_msg m = {.op = STORE_OP_MULTI_GET, .keys = keys, .n = n};
	struct aop t = {
		.reply = STORE_REPLY_BYTES_N, .kind = K_MULTI, .n = n, .cb.multi = cb, .arg = arg};

	if (n == 0)
		return -EINVAL; /* no reply would ever come to complete it */
	return store_async_queue(a, &t, &m, 1);
}

int store_async_multi_set(struct store_async *a, const char *const *keys, const void *const *vals,
			  const size_t *lens, size_t n, store_async_done_cb cb, void *arg)
{
	struct store_msg m = {
		.op = STORE_OP_MULTI_SET, .keys = keys, .vals = vals, .lens = lens, .n = n};
	struct aop t = {.reply = STORE_REPLY_NONE, .kind = K_DONE, .cb.done = cb, .arg = arg};

	return store_async_queue(a, &t, &m, 1);
}

int store_async_delete(struct store_async *a, const char *key, store_async_int_cb cb, void *arg)
{
	struct store_msg m = {.op = STORE_OP_DELETE, .key = key};
	struct aop t = {.reply = STORE_REPLY_I64, .kind = K_INT, .cb.i = cb, .arg = arg};

	return store_async_queue(a, &t, &m, 1);
}

int store_async_num_keys(struct store_async *a, store_async_int_cb cb, void *arg)
{
	struct store_msg m = {.op = STORE_OP_NUMKEYS};
	struct aop t = {.reply = STORE_REPLY_I64, .kind = K_INT, .cb.i = cb, .arg = arg};

	return store_async_queue(a, &t, &m, 1);
}

int store_async_on_close_set(struct store_async *a, const char *key, const void *val, size_t len,
			     store_async_done_cb cb, void *arg)
{
	/* NULL or "" clears the registration: store_encode sends the empty key. */
	struct store_msg m = {.op = STORE_OP_ON_CLOSE_SET, .key = key, .val = val, .val_len = len};
	struct aop t = {.reply = STORE_REPLY_U8, .kind = K_DONE, .cb.done = cb, .arg = arg};

	return store_async_queue(a, &t, &m, 1);
}

/* WAIT and BARRIER: one STOP_WAITING reply, the wait cancelled after
 * timeout_ms (<= 0: never). */
static int queue_wait(struct store_async *a, const struct store_msg *m, int64_t timeout_ms,
		      store_async_done_cb cb, void *arg)
{
	struct aop t = {.reply = STORE_REPLY_U8,
			.kind = K_DONE,
			.timeout_ms = timeout_ms,
			.cb.done = cb,
			.arg = arg};

	return store_async_queue(a, &t, m, 1);
}

int store_async_wait(struct store_async *a, const char *const *keys, size_t n, int64_t timeout_ms,
		     store_async_done_cb cb, void *arg)
{
	struct store_msg m = {.op = STORE_OP_WAIT, .keys = keys, .n = n};

	return queue_wait(a, &m, timeout_ms, cb, arg);
}

int store_async_ping(struct store_async *a, store_async_done_cb cb, void *arg)
{
	struct store_msg m = {.op = STORE_OP_PING, .num = a->nonce + 1};
	struct aop t = {.reply = STORE_REPLY_U32,
			.kind = K_DONE,
			.nonce = a->nonce + 1,
			.cb.done = cb,
			.arg = arg};
	int rc = store_async_queue(a, &t, &m, 1);

	if (rc == 0)
		a->nonce++;
	return rc;
}

int store_async_barrier(struct store_async *a, const char *key, int64_t world_size,
			int64_t timeout_ms, store_async_done_cb cb, void *arg)
{
	struct store_msg m = {.op = STORE_OP_BARRIER, .key = key, .num = world_size};

	return queue_wait(a, &m, timeout_ms, cb, arg);
}

int store_async_list_keys(struct store_async *a, store_async_multi_cb cb, void *arg)
{
	struct store_msg m = {.op = STORE_OP_LIST_KEYS};
	struct aop t = {.reply = STORE_REPLY_LIST, .kind = K_MULTI, .cb.multi = cb, .arg = arg};

	return store_async_queue(a, &t, &m, 1);
}
