/* store_exec: one parsed request against the key table, and the replies
 * (formats identical in both dialects). Semantics follow PyTorch's libuv
 * server, except GET of a missing key in the 1.x dialect, which closes the
 * connection as PyTorch 1.13's server does (its clients WAIT before GET). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_server_int.h"

static void reply_u8(struct store_conn *c, uint8_t v)
{
	store_put_u8(&c->out, v);
	store_conn_mark_dirty(c);
}

static void reply_i64(struct store_conn *c, int64_t v)
{
	store_put_i64(&c->out, v);
	store_conn_mark_dirty(c);
}

static void reply_bytes(struct store_conn *c, const void *p, size_t n)
{
	store_put_bytes(&c->out, p, n);
	store_conn_mark_dirty(c);
}

static void waiter_add(struct store_conn *c, struct store_waiter *w)
{
	w->owner = c;
	w->oprev = NULL;
	w->onext = c->waiters;
	if (c->waiters)
		c->waiters->oprev = w;
	c->waiters = w;
}

static void waiter_del(struct store_conn *c, struct store_waiter *w)
{
	if (w->oprev)
		w->oprev->onext = w->onext;
	else
		c->waiters = w->onext;
	if (w->onext)
		w->onext->oprev = w->oprev;
}

static void cancel_waits(struct store_conn *c)
{
	while (c->waiters) {
		struct store_waiter *w = c->waiters;

		waiter_del(c, w);
		store_kv_waiter_cancel(c->s->kv, w);
	}
}

void store_exec_woken(struct store_waiter *w, void *arg)
{
	struct store_conn *c = w->owner;

	waiter_del(c, w);
	reply_u8(c, STORE_WAIT_STOP);
}

void store_exec_watch(struct store_watch *w, int type, const uint8_t *key, size_t klen,
		      const uint8_t *old, size_t oldlen, const uint8_t *nv, size_t nvlen, void *arg)
{
	struct store_conn *c = w->owner;

	if (c->closing || c->doomed)
		return;
	store_put_u8(&c->out, (uint8_t)type);
	store_put_bytes(&c->out, key, klen);
	store_put_bytes(&c->out, old, oldlen);
	store_put_bytes(&c->out, nv, nvlen);
	/* A watcher that never reads must not grow memory without bound; it
	 * cannot be closed from inside the table's callback: doom it, the
	 * flush closes it. */
	if (store_conn_out_bytes(c) > 2 * c->s->o.max_conn_buffer)
		c->doomed = true;
	store_conn_mark_dirty(c);
}

static void on_close_clear(struct store_conn *c)
{
	free(c->oc_key);
	free(c->oc_val);
	c->oc_key = c->oc_val = NULL;
	c->oc_klen = c->oc_vlen = 0;
	c->oc_set = false;
}

static int on_close_register(struct store_conn *c, const struct store_req *r)
{
	uint8_t *k, *v;

	if (r->key_len == 0) {
		on_close_clear(c);
		return 0;
	}
	k = malloc(r->key_len);
	v = malloc(r->val_len ? r->val_len : 1);
	if (k == NULL || v == NULL) {
		free(k);
		free(v);
		return -ENOMEM;
	}
	memcpy(k, r->key, r->key_len);
	if (r->val_len)
		memcpy(v, r->val, r->val_len);
	on_close_clear(c);
	c->oc_key = k;
	c->oc_klen = r->key_len;
	c->oc_val = v;
	c->oc_vlen = r->val_len;
	c->oc_set = true;
	return 0;
}

void store_exec_conn_gone(struct store_conn *c, bool run_on_close)
{
	struct store_kv *kv = c->s->kv;
	size_t vl;

	cancel_waits(c);
	while (c->watches) {
		struct store_watch *w = c->watches;

		c->watches = w->onext;
		store_kv_unwatch(kv, w);
	}
	/* Create-if-absent: a key that already has a value keeps it (the first
	 * reason given for the end of a round stays the root cause). */
	if (c->oc_set && run_on_close && store_kv_get(kv, c->oc_key, c->oc_klen, &vl) == NULL &&
	    store_kv_set(kv, c->oc_key, c->oc_klen, c->oc_val, c->oc_vlen) < 0)
		store_srv_log(c->s, "out of memory running the on-close set of %s",
			      store_conn_peer(c));
	on_close_clear(c);
}

/* PyTorch's servers cap no reply, and eight values of 8 MiB already pass
 * the 64 MiB buffer limit, which is there against a client that does not
 * read its replies. One reply of what the store holds is bounded by the
 * store itself, so a reply up to the buffer limit plus every value's bytes
 * is built. Only a request that names keys again and again asks for more (a
 * 2.5 KB MULTI_GET may ask for a terabyte): the connection is closed
 * instead, with one log line. Requests are executed only while at most the
 * limit is unsent, and the connection is not read until its replies drain,
 * so it holds at most the limit and one such reply. */
static bool reply_too_big(struct store_conn *c, const struct store_req *r, size_t bytes)
{
	size_t lim = c->s->o.max_conn_buffer;
	size_t cap = lim + store_kv_value_bytes(c->s->kv);
	char why[160];

	if (bytes <= cap)
		return false;
	snprintf(why, sizeof(why),
		 "%s reply of %zu bytes over the buffer limit %zu and all the store's values",
		 store_op_name(r->op), bytes, lim);
	store_conn_close(c, why);
	return true;
}

static void multi_get(struct store_conn *c, const struct store_req *r)
{
	const uint8_t *pos = r->list, *k, *v;
	size_t kl, vl, bytes = 0;
	uint64_t i;

	for (i = 0; i < r->count; i++) {
		store_list_next(&pos, &k, &kl);
		v = store_kv_get(c->s->kv, k, kl, &vl);
		/* No overflow: count is capped, and vl at STORE_MAX_APPENDED. */
		bytes += 8 + (v ? vl : 0);
	}
	if (reply_too_big(c, r, bytes))
		return;
	pos = r->list;
	for (i = 0; i < r->count; i++) {
		store_list_next(&pos, &k, &kl);
		v = store_kv_get(c->s->kv, k, kl, &vl);
		store_put_bytes(&c->out, v, v ? vl : 0);
	}
	store_conn_mark_dirty(c);
}

static int multi_set(struct store_conn *c, const struct store_req *r)
{
	const uint8_t *pos = r->list, *k, *v;
	size_t kl, vl;
	uint64_t i;
	int rc;

	for (i = 0; i < r->count; i++) {
		store_list_next(&pos, &k, &kl);
		store_list_next(&pos, &v, &vl);
		rc = store_kv_set(c->s->kv, k, kl, v, vl);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static int queue_pop(struct store_conn *c, const struct store_req *r)
{
	int64_t n;
	uint8_t *v = NULL;
	size_t vl = 0;
	int rc = store_kv_queue_pop(c->s->kv, r->key, r->key_len, &n, &v, &vl);

	if (rc < 0)
		return rc;
	store_put_i64(&c->out, n);
	if (n > 0)
		store_put_bytes(&c->out, v, vl);
	free(v);
	store_conn_mark_dirty(c);
	return 0;
}

static int barrier(struct store_conn *c, const struct store_req *r)
{
	struct store_waiter *w;
	int64_t n;
	int rc = store_kv_barrier(c->s->kv, r->key, r->key_len, r->num, c, &n, &w);

	if (rc == -EINVAL || rc == -ERANGE) {
		store_conn_close(c, rc == -EINVAL ? "BARRIER on a value that is not an integer"
						  : "BARRIER on a value beyond int64");
		return 0;
	}
	if (rc == 1)
		reply_u8(c, STORE_WAIT_STOP);
	else if (rc == 0)
		waiter_add(c, w); /* answered, or canceled by CANCEL_WAIT, as a WAIT */
	return rc > 0 ? 0 : rc;
}

static int list_keys(struct store_conn *c)
{
	size_t bytes;
	/* Every key once: bounded by the store itself, so not capped (see
	 * reply_too_big), as in PyTorch's servers. */
	int rc = store_kv_list_keys(c->s->kv, &c->out, SIZE_MAX, &bytes);

	store_conn_mark_dirty(c);
	return rc;
}

void store_exec(struct store_conn *c, const struct store_req *r)
{
	struct store_kv *kv = c->s->kv;
	const uint8_t *v;
	size_t vl;
	int64_t n;
	int rc = 0;
	struct store_waiter *w;
	struct store_watch *wt;

	switch (r->op) {
	case STORE_OP_VALIDATE:
		break;
	case STORE_OP_SET:
		rc = store_kv_set(kv, r->key, r->key_len, r->val, r->val_len);
		break;
	case STORE_OP_COMPARE_SET:
		rc = store_kv_compare_set(kv, r->key, r->key_len, r->val, r->val_len, r->val2,
					  r->val2_len, &v, &vl);
		if (rc == 0)
			reply_bytes(c, v, vl);
		break;
	case STORE_OP_GET:
		v = store_kv_get(kv, r->key, r->key_len, &vl);
		if (v == NULL && c->parser.dialect == STORE_DIALECT_V1) {
			store_conn_close(c, "GET of a missing key (1.x dialect: closing, as "
					    "PyTorch 1.13's server does)");
			return;
		}
		reply_bytes(c, v, v ? vl : 0);
		break;
	case STORE_OP_ADD:
		rc = store_kv_add(kv, r->key, r->key_len, r->num, &n);
		if (rc == -EINVAL || rc == -ERANGE) {
			store_conn_close(c, rc == -EINVAL ? "ADD to a value that is not an integer"
							  : "ADD to a value beyond int64");
			return;
		}
		if (rc == 0)
			reply_i64(c, n);
		break;
	case STORE_OP_CHECK:
		reply_u8(c, store_kv_check(kv, r->list, r->count) ? STORE_CHECK_READY
								  : STORE_CHECK_NOT_READY);
		break;
	case STORE_OP_WAIT:
		rc = store_kv_wait(kv, r->list, r->count, c, &w);
		if (rc == 1)
			reply_u8(c, STORE_WAIT_STOP);
		else if (rc == 0)
			waiter_add(c, w);
		rc = rc > 0 ? 0 : rc;
		break;
	case STORE_OP_NUMKEYS:
		reply_i64(c, store_kv_num_keys(kv));
		break;
	case STORE_OP_DELETE:
		reply_i64(c, store_kv_delete(kv, r->key, r->key_len));
		break;
	case STORE_OP_APPEND:
		rc = store_kv_append(kv, r->key, r->key_len, r->val, r->val_len);
		/* APPEND has no reply: refusing it can only close. */
		if (rc == -EFBIG) {
			char why[128];

			snprintf(why, sizeof(why),
				 "APPEND would grow the value past %zu bytes, the most "
				 "APPENDs may grow one",
				 c->s->kv_max_appended);
			store_conn_close(c, why);
			return;
		}
		break;
	case STORE_OP_MULTI_GET:
		multi_get(c, r);
		break;
	case STORE_OP_MULTI_SET:
		rc = multi_set(c, r);
		break;
	case STORE_OP_CANCEL_WAIT:
		cancel_waits(c);
		reply_u8(c, STORE_WAIT_CANCELED);
		break;
	case STORE_OP_PING:
		store_put_u32(&c->out, (uint32_t)r->num);
		store_conn_mark_dirty(c);
		break;
	case STORE_OP_QUEUE_PUSH:
		rc = store_kv_queue_push(kv, r->key, r->key_len, r->val, r->val_len);
		break;
	case STORE_OP_QUEUE_POP:
		rc = queue_pop(c, r);
		break;
	case STORE_OP_QUEUE_LEN:
		reply_i64(c, store_kv_queue_len(kv, r->key, r->key_len));
		break;
	case STORE_OP_WATCH_KEY:
		rc = store_kv_watch(kv, r->key, r->key_len, c, &wt);
		if (rc == 0) {
			wt->onext = c->watches;
			c->watches = wt;
			reply_u8(c, STORE_WATCH_REGISTERED);
		}
		break;
	case STORE_OP_BARRIER:
		rc = barrier(c, r);
		break;
	case STORE_OP_LIST_KEYS:
		rc = list_keys(c);
		break;
	case STORE_OP_ON_CLOSE_SET:
		rc = on_close_register(c, r);
		if (rc == 0)
			reply_u8(c, 0);
		break;
	default:
		store_conn_close(c, "unexpected request");
		return;
	}
	if (!c->closing && (rc < 0 || c->out.err))
		store_conn_close(c, "out of memory");
}
