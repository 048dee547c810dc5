/* libFuzzer target for the store's per-connection parser, fed the way the
 * server feeds it: the input is a connection's byte stream, delivered in
 * chunks whose sizes come from the input's first bytes, parsed resumably from
 * a buffer that moves; every request parsed is applied to a key table (so
 * the table, its waiters and queues are fuzzed too). Invariants are checked
 * with __builtin_trap so the fuzzer reports them. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "store_kv.h"
#include "store_proto.h"

#define MAX_WAITERS 64

struct owner {
	struct store_waiter *w[MAX_WAITERS];
	int n;
	struct store_watch *watch[MAX_WAITERS];
	int nwatch;
};

static void woken(struct store_waiter *w, void *arg)
{
	struct owner *o = w->owner;
	int i;

	for (i = 0; i < o->n; i++) {
		if (o->w[i] == w) {
			o->w[i] = o->w[--o->n];
			return;
		}
	}
	__builtin_trap(); /* woken twice, or never parked */
}

static void apply(struct store_kv *kv, struct owner *o, const struct store_req *r)
{
	const uint8_t *cur;
	size_t len, i;
	int64_t n;
	uint8_t *v;
	struct store_waiter *w;
	struct store_watch *wt;

	switch (r->op) {
	case STORE_OP_SET:
		store_kv_set(kv, r->key, r->key_len, r->val, r->val_len);
		break;
	case STORE_OP_COMPARE_SET:
		store_kv_compare_set(kv, r->key, r->key_len, r->val, r->val_len, r->val2,
				     r->val2_len, &cur, &len);
		break;
	case STORE_OP_GET:
		store_kv_get(kv, r->key, r->key_len, &len);
		break;
	case STORE_OP_ADD:
		store_kv_add(kv, r->key, r->key_len, r->num, &n);
		break;
	case STORE_OP_CHECK:
		store_kv_check(kv, r->list, r->count);
		break;
	case STORE_OP_WAIT:
		if (o->n < MAX_WAITERS && store_kv_wait(kv, r->list, r->count, o, &w) == 0)
			o->w[o->n++] = w;
		break;
	case STORE_OP_DELETE:
		store_kv_delete(kv, r->key, r->key_len);
		break;
	case STORE_OP_APPEND:
		store_kv_append(kv, r->key, r->key_len, r->val, r->val_len);
		break;
	case STORE_OP_MULTI_SET: {
		const uint8_t *pos = r->list, *k, *val;
		size_t kl, vl;

		for (i = 0; i < r->count; i++) {
			store_list_next(&pos, &k, &kl);
			store_list_next(&pos, &val, &vl);
			store_kv_set(kv, k, kl, val, vl);
		}
		CHECK(pos == r->list + r->list_len);
		break;
	}
	case STORE_OP_CANCEL_WAIT:
		while (o->n > 0)
			store_kv_waiter_cancel(kv, o->w[--o->n]);
		break;
	case STORE_OP_QUEUE_PUSH:
		store_kv_queue_push(kv, r->key, r->key_len, r->val, r->val_len);
		break;
	case STORE_OP_QUEUE_POP:
		if (store_kv_queue_pop(kv, r->key, r->key_len, &n, &v, &len) == 0 && n > 0)
			free(v);
		break;
	case STORE_OP_BARRIER:
		if (o->n < MAX_WAITERS &&
		    store_kv_barrier(kv, r->key, r->key_len, r->num, o, &n, &w) == 0)
			o->w[o->n++] = w;
		break;
	case STORE_OP_LIST_KEYS: {
		struct store_buf b;

		store_buf_init(&b);
		if (store_kv_list_keys(kv, &b, 1 << 20, &len) == 0)
			CHECK(b.len == len);
		store_buf_free(&b);
		break;
	}
	case STORE_OP_WATCH_KEY:
		if (o->nwatch < MAX_WAITERS && store_kv_watch(kv, r->key, r->key_len, o, &wt) == 0)
			o->watch[o->nwatch++] = wt;
		break;
	default:
		break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct store_limits lim = {.max_key_len = 256,
				   .max_value_len = 4096,
				   .max_multi_keys = 64,
				   .max_msg_len = 16384};
	struct store_kv_events ev = {.woken = woken};
	struct store_parser p;
	struct store_kv *kv;
	struct owner o = {0};
	uint8_t *buf = NULL;
	size_t have = 0, fed = 0, step;
	unsigned chunk;
	int rc = 0;

	if (size < 1)
		return 0;
	chunk = data[0];
	data++;
	size--;
	if (store_kv_new(&ev, &kv) < 0)
		return 0;
	store_kv_limit_value(kv, lim.max_value_len);
	store_parser_init(&p, &lim, STORE_DIALECT_NONE);
	while (fed < size && rc >= 0) {
		struct store_req r;
		uint8_t *nb;

		/* Chunk sizes 1..256 from the first byte, varied per round. */
		step = 1 + ((chunk + fed * 7) % 256);
		if (step > size - fed)
			step = size - fed;
		/* A fresh buffer each time, so pointers from an earlier round
		 * would be stale (ASan catches any use of them). */
		nb = malloc(have + step);
		if (nb == NULL)
			break;
		if (have)
			memcpy(nb, buf, have);
		memcpy(nb + have, data + fed, step);
		free(buf);
		buf = nb;
		have += step;
		fed += step;
		while ((rc = store_parse(&p, buf, have, &r)) == 1) {
			CHECK(r.len > 0 && r.len <= have);
			CHECK(r.key_len <= lim.max_key_len && r.val_len <= lim.max_value_len);
			CHECK(r.count <= lim.max_multi_keys);
			apply(kv, &o, &r);
			memmove(buf, buf + r.len, have - r.len);
			have -= r.len;
		}
		if (rc == 0)
			CHECK(p.need > have && p.need <= lim.max_msg_len);
	}
	/* The connection closes: its waiters and watches go. */
	while (o.n > 0)
		store_kv_waiter_cancel(kv, o.w[--o.n]);
	while (o.nwatch > 0)
		store_kv_unwatch(kv, o.watch[--o.nwatch]);
	store_kv_free(kv);
	free(buf);
	return 0;
}
