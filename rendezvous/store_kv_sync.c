/* store_kv_sync: PyTorch 2.x's newest table operations, BARRIER and
 * LIST_KEYS (see store_kv.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store_kv.h"
#include "store_kv_int.h"
#include "store_proto.h"

int store_kv_clear(struct store_kv *kv, const char *keep)
{
	size_t keeplen = keep ? strlen(keep) : 0, i;

	for (i = 0; i < kv->nbuckets; i++) {
		struct store_entry *e = kv->buckets[i], *n;

		for (; e; e = n) {
			uint8_t *key, *v;
			size_t klen = e->key_len, vlen;
			int64_t qlen;

			n = e->hnext;
			if (keep && klen >= keeplen && memcmp(e->key, keep, keeplen) == 0)
				continue;
			/* A copy: the entry is freed once it holds nothing. */
			key = malloc(klen ? klen : 1);
			if (key == NULL)
				return -ENOMEM;
			memcpy(key, e->key, klen);
			while (store_kv_queue_pop(kv, key, klen, &qlen, &v, &vlen) == 0 && qlen > 0)
				free(v);
			store_kv_delete(kv, key, klen);
			free(key);
		}
	}
	return 0;
}

int store_kv_barrier(struct store_kv *kv, const uint8_t *key, size_t klen, int64_t world,
		     void *owner, int64_t *count, struct store_waiter **out)
{
	struct store_entry *e;
	struct store_waiter *w;
	struct store_wlink *l;
	int rc = store_kv_add(kv, key, klen, 1, count);

	if (rc < 0)
		return rc;
	e = store_kv_lookup(kv, key, klen, NULL); /* present: ADD just wrote it */
	if (*count >= world) {
		/* The arrival that completes it releases every parked caller,
		 * whatever world size each gave (as PyTorch's server does). */
		while ((l = e->bhead) != NULL) {
			w = l->w;
			store_kv_link_remove(l);
			w->remaining = 0;
			store_kv_waiter_done(kv, w);
		}
		return 1;
	}
	w = calloc(1, sizeof(*w));
	l = calloc(1, sizeof(*l));
	if (w == NULL || l == NULL) {
		free(w);
		free(l);
		return -ENOMEM;
	}
	w->owner = owner;
	w->links = l;
	w->nlinks = w->nlive = w->remaining = 1;
	l->e = e;
	l->w = w;
	l->barrier = true;
	l->prev = e->btail;
	if (e->btail)
		e->btail->next = l;
	else
		e->bhead = l;
	e->btail = l;
	l->linked = true;
	*out = w;
	return 0;
}

int store_kv_list_keys(const struct store_kv *kv, struct store_buf *out, size_t max,
		       size_t *bytes_out)
{
	size_t i, bytes = 8;
	const struct store_entry *e;

	/* Sized first: a reply over max is refused before a byte is copied. */
	for (i = 0; i < kv->nbuckets; i++)
		for (e = kv->buckets[i]; e; e = e->hnext)
			if (e->present)
				bytes += 8 + e->key_len;
	*bytes_out = bytes;
	if (bytes > max)
		return -E2BIG;
	if (store_buf_reserve(out, bytes) == NULL)
		return -ENOMEM;
	store_put_i64(out, kv->npresent);
	for (i = 0; i < kv->nbuckets; i++)
		for (e = kv->buckets[i]; e; e = e->hnext)
			if (e->present)
				store_put_bytes(out, e->key, e->key_len);
	return out->err;
}
