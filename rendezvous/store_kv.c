/* store_kv: key table, queues, parked waiters and watches (see store_kv.h). */
#include "store_kv.h"
#include "store_kv_int.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "store_proto.h"

/* A seeded 64-bit hash (xor-multiply over 8-byte words), so that a client
 * cannot pick keys that collide on purpose. */
static uint64_t hash_key(uint64_t seed, const uint8_t *k, size_t n)
{
	uint64_t h = seed ^ (n * 0x9E3779B97F4A7C15ull);
	uint64_t w;

	while (n >= 8) {
		memcpy(&w, k, 8);
		h = (h ^ w) * 0xFF51AFD7ED558CCDull;
		h ^= h >> 32;
		k += 8;
		n -= 8;
	}
	w = 0;
	memcpy(&w, k, n);
	h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
	h ^= h >> 29;
	h *= 0x9E3779B97F4A7C15ull;
	h ^= h >> 32;
	return h;
}

int store_kv_new(const struct store_kv_events *ev, struct store_kv **out)
{
	struct store_kv *kv = calloc(1, sizeof(*kv));
	struct timespec ts;

	if (kv == NULL)
		return -ENOMEM;
	kv->nbuckets = 1024;
	kv->buckets = calloc(kv->nbuckets, sizeof(*kv->buckets));
	if (kv->buckets == NULL) {
		free(kv);
		return -ENOMEM;
	}
	clock_gettime(CLOCK_MONOTONIC, &ts);
	kv->seed = hash_key((uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32), (const uint8_t *)&ts,
			    sizeof(ts));
	if (ev)
		kv->ev = *ev;
	kv->max_value = SIZE_MAX;
	*out = kv;
	return 0;
}

static void entry_free(struct store_entry *e)
{
	struct qitem *q, *qn;

	for (q = e->qhead; q; q = qn) {
		qn = q->next;
		free(q);
	}
	free(e->val);
	free(e);
}

void store_kv_free(struct store_kv *kv)
{
	size_t i;

	if (kv == NULL)
		return;
	for (i = 0; i < kv->nbuckets; i++) {
		struct store_entry *e, *n;

		for (e = kv->buckets[i]; e; e = n) {
			struct store_wlink *l;
			struct store_watch *w, *wn;

			n = e->hnext;
			/* Waiters span several entries: unlink here, free the
			 * waiter once its last link is gone. */
			while ((l = e->whead) != NULL || (l = e->bhead) != NULL) {
				struct store_waiter *wt = l->w;

				store_kv_link_remove(l);
				if (wt->nlive == 0) {
					free(wt->links);
					free(wt);
				}
			}
			for (w = e->watches; w; w = wn) {
				wn = w->next;
				free(w);
			}
			entry_free(e);
		}
	}
	free(kv->buckets);
	free(kv);
}

struct store_entry *store_kv_lookup(struct store_kv *kv, const uint8_t *key, size_t klen,
				    uint64_t *hash_out)
{
	uint64_t h = hash_key(kv->seed, key, klen);
	struct store_entry *e;

	if (hash_out)
		*hash_out = h;
	for (e = kv->buckets[h & (kv->nbuckets - 1)]; e; e = e->hnext)
		if (e->hash == h && e->key_len == klen && memcmp(e->key, key, klen) == 0)
			return e;
	return NULL;
}

static void grow(struct store_kv *kv)
{
	size_t n = kv->nbuckets * 2, i;
	struct store_entry **b = calloc(n, sizeof(*b));

	if (b == NULL)
		return; /* keep the longer chains; still correct */
	for (i = 0; i < kv->nbuckets; i++) {
		struct store_entry *e, *next;

		for (e = kv->buckets[i]; e; e = next) {
			next = e->hnext;
			e->hnext = b[e->hash & (n - 1)];
			b[e->hash & (n - 1)] = e;
		}
	}
	free(kv->buckets);
	kv->buckets = b;
	kv->nbuckets = n;
}

static struct store_entry *lookup_or_create(struct store_kv *kv, const uint8_t *key, size_t klen)
{
	uint64_t h;
	struct store_entry *e = store_kv_lookup(kv, key, klen, &h);

	if (e)
		return e;
	e = calloc(1, sizeof(*e) + klen);
	if (e == NULL)
		return NULL;
	e->hash = h;
	e->key_len = klen;
	if (klen)
		memcpy(e->key, key, klen);
	e->hnext = kv->buckets[h & (kv->nbuckets - 1)];
	kv->buckets[h & (kv->nbuckets - 1)] = e;
	kv->nentries++;
	if (kv->nentries > kv->nbuckets)
		grow(kv);
	return e;
}

/* Drop an entry that holds nothing any more. */
static void maybe_drop(struct store_kv *kv, struct store_entry *e)
{
	struct store_entry **pp;

	if (e->present || e->whead || e->bhead || e->qhead || e->watches)
		return;
	for (pp = &kv->buckets[e->hash & (kv->nbuckets - 1)]; *pp; pp = &(*pp)->hnext) {
		if (*pp == e) {
			*pp = e->hnext;
			break;
		}
	}
	kv->nentries--;
	entry_free(e);
}

void store_kv_link_remove(struct store_wlink *l)
{
	struct store_entry *e = l->e;

	struct store_wlink **head = l->barrier ? &e->bhead : &e->whead;
	struct store_wlink **tail = l->barrier ? &e->btail : &e->wtail;

	if (!l->linked)
		return;
	if (l->prev)
		l->prev->next = l->next;
	else
		*head = l->next;
	if (l->next)
		l->next->prev = l->prev;
	else
		*tail = l->prev;
	l->prev = l->next = NULL;
	l->linked = false;
	l->w->nlive--;
}

static void waiter_unlink_all(struct store_kv *kv, struct store_waiter *w)
{
	size_t i;

	for (i = 0; i < w->nlinks; i++) {
		struct store_entry *e = w->links[i].e;

		if (w->links[i].linked) {
			store_kv_link_remove(&w->links[i]);
			maybe_drop(kv, e);
		}
	}
}

void store_kv_waiter_done(struct store_kv *kv, struct store_waiter *w)
{
	waiter_unlink_all(kv, w);
	if (kv->ev.woken)
		kv->ev.woken(w, kv->ev.arg);
	free(w->links);
	free(w);
}

/* The key e became present: fire its links (all of them, or only until one
 * waiter completes when only_one). Entries of other keys may be dropped by a
 * completing waiter; e itself stays until maybe_drop below. */
static void fire(struct store_kv *kv, struct store_entry *e, bool only_one)
{
	struct store_wlink *l;

	/* e cannot be dropped meanwhile: it is present or has a queue item. */
	while ((l = e->whead) != NULL) {
		struct store_waiter *w = l->w;

		store_kv_link_remove(l);
		if (--w->remaining == 0) {
			store_kv_waiter_done(kv, w);
			if (only_one)
				break;
		}
	}
}

static void notify_watch(struct store_kv *kv, struct store_entry *e, int type, const uint8_t *old,
			 size_t oldlen)
{
	struct store_watch *w;

	if (kv->ev.watch == NULL)
		return;
	for (w = e->watches; w; w = w->next)
		kv->ev.watch(w, type, e->key, e->key_len, old, oldlen,
			     type == STORE_WATCH_DELETED ? NULL : e->val,
			     type == STORE_WATCH_DELETED ? 0 : e->val_len, kv->ev.arg);
}

/* Replace e's value with buf (ownership taken) and tell waiters/watchers. */
static void put_value(struct store_kv *kv, struct store_entry *e, uint8_t *buf, size_t len)
{
	uint8_t *old = e->val;
	size_t oldlen = e->val_len;
	bool created = !e->present;

	e->val = buf;
	e->val_len = len;
	kv->value_bytes += len - oldlen;
	if (created) {
		e->present = true;
		kv->npresent++;
	}
	if (e->watches)
		notify_watch(kv, e, created ? STORE_WATCH_CREATED : STORE_WATCH_UPDATED, old,
			     oldlen);
	free(old);
	fire(kv, e, false);
}

static uint8_t *dup_bytes(const uint8_t *p, size_t n)
{
	/* malloc(0) may return NULL: always allocate at least one byte. */
	uint8_t *d = malloc(n ? n : 1);

	if (d && n)
		memcpy(d, p, n);
	return d;
}

const uint8_t *store_kv_get(struct store_kv *kv, const uint8_t *key, size_t klen, size_t *vlen)
{
	struct store_entry *e = store_kv_lookup(kv, key, klen, NULL);

	if (e == NULL || !e->present)
		return NULL;
	*vlen = e->val_len;
	return e->val ? e->val : (const uint8_t *)"";
}

int store_kv_set(struct store_kv *kv, const uint8_t *key, size_t klen, const uint8_t *val,
		 size_t vlen)
{
	struct store_entry *e = lookup_or_create(kv, key, klen);
	uint8_t *d;

	if (e == NULL)
		return -ENOMEM;
	d = dup_bytes(val, vlen);
	if (d == NULL) {
		maybe_drop(kv, e);
		return -ENOMEM;
	}
	put_value(kv, e, d, vlen);
	return 0;
}

int store_kv_parse_counter(const uint8_t *s, size_t n, int64_t *out)
{
	size_t i = 0;
	bool neg = false, any = false;
	uint64_t v = 0, lim;

	while (i < n && isspace(s[i]))
		i++;
	if (i < n && (s[i] == '+' || s[i] == '-'))
		neg = s[i++] == '-';
	lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
	for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
		any = true;
		if (v > (lim - (uint64_t)(s[i] - '0')) / 10)
			return -ERANGE;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	if (!any)
		return -EINVAL;
	*out = neg ? (int64_t)(0 - v) : (int64_t)v;
	return 0;
}

int store_kv_add(struct store_kv *kv, const uint8_t *key, size_t klen, int64_t delta,
		 int64_t *result)
{
	struct store_entry *e = lookup_or_create(kv, key, klen);
	int64_t cur = 0, sum;
	char text[24];
	int n, rc;
	uint8_t *d;

	if (e == NULL)
		return -ENOMEM;
	if (e->present) {
		rc = store_kv_parse_counter(e->val, e->val_len, &cur);
		if (rc < 0)
			return rc;
	}
	/* PyTorch's servers compute stoll(old) + delta and store what comes
	 * out: past int64 it wraps (two's complement), and so must ours, with
	 * no undefined behaviour on the way. */
	sum = (int64_t)((uint64_t)cur + (uint64_t)delta);
	n = snprintf(text, sizeof(text), "%" PRId64, sum);
	d = dup_bytes((const uint8_t *)text, (size_t)n);
	if (d == NULL) {
		maybe_drop(kv, e);
		return -ENOMEM;
	}
	put_value(kv, e, d, (size_t)n);
	*result = sum;
	return 0;
}

int store_kv_compare_set(struct store_kv *kv, const uint8_t *key, size_t klen, const uint8_t *exp,
			 size_t elen, const uint8_t *des, size_t dlen, const uint8_t **cur,
			 size_t *curlen)
{
	struct store_entry *e = store_kv_lookup(kv, key, klen, NULL);
	uint8_t *d;

	if (e == NULL || !e->present) {
		if (elen != 0) {
			/* Missing key, non-empty expected: PyTorch answers with
			 * expected and stores nothing. */
			*cur = exp;
			*curlen = elen;
			return 0;
		}
		*cur = des;
		*curlen = dlen;
		return store_kv_set(kv, key, klen, des, dlen);
	}
	if (e->val_len == elen && (elen == 0 || memcmp(e->val, exp, elen) == 0)) {
		d = dup_bytes(des, dlen);
		if (d == NULL)
			return -ENOMEM;
		put_value(kv, e, d, dlen);
	}
	*cur = e->val;
	*curlen = e->val_len;
	return 0;
}

int store_kv_delete(struct store_kv *kv, const uint8_t *key, size_t klen)
{
	struct store_entry *e = store_kv_lookup(kv, key, klen, NULL);

	if (e == NULL || !e->present)
		return 0;
	if (e->watches)
		notify_watch(kv, e, STORE_WATCH_DELETED, e->val, e->val_len);
	free(e->val);
	kv->value_bytes -= e->val_len;
	e->val = NULL;
	e->val_len = 0;
	e->present = false;
	kv->npresent--;
	maybe_drop(kv, e);
	return 1;
}

int store_kv_append(struct store_kv *kv, const uint8_t *key, size_t klen, const uint8_t *val,
		    size_t vlen)
{
	struct store_entry *e = lookup_or_create(kv, key, klen);
	uint8_t *d;

	if (e == NULL)
		return -ENOMEM;
	if (!e->present)
		return store_kv_set(kv, key, klen, val, vlen);
	if (vlen > kv->max_value || e->val_len > kv->max_value - vlen)
		return -EFBIG;
	if (e->watches == NULL) {
		/* In place: a value grown by many appends is not copied whole
		 * each time (realloc moves large blocks by remapping). Present,
		 * so no waiter is parked on it and nobody watches the old bytes. */
		d = realloc(e->val, e->val_len + vlen ? e->val_len + vlen : 1);
		if (d == NULL)
			return -ENOMEM;
		if (vlen)
			memcpy(d + e->val_len, val, vlen);
		e->val = d;
		e->val_len += vlen;
		kv->value_bytes += vlen;
		return 0;
	}
	d = malloc(e->val_len + vlen ? e->val_len + vlen : 1);
	if (d == NULL)
		return -ENOMEM;
	if (e->val_len)
		memcpy(d, e->val, e->val_len);
	if (vlen)
		memcpy(d + e->val_len, val, vlen);
	put_value(kv, e, d, e->val_len + vlen);
	return 0;
}

void store_kv_limit_value(struct store_kv *kv, size_t max)
{
	kv->max_value = max;
}

int64_t store_kv_num_keys(const struct store_kv *kv)
{
	return kv->npresent;
}

size_t store_kv_value_bytes(const struct store_kv *kv)
{
	return kv->value_bytes;
}

static bool entry_ready(const struct store_entry *e)
{
	return e && (e->present || e->qhead);
}

bool store_kv_check(struct store_kv *kv, const uint8_t *list, uint64_t count)
{
	const uint8_t *pos = list, *k;
	size_t kl;
	uint64_t i;

	for (i = 0; i < count; i++) {
		store_list_next(&pos, &k, &kl);
		if (!entry_ready(store_kv_lookup(kv, k, kl, NULL)))
			return false;
	}
	return true;
}

int store_kv_wait(struct store_kv *kv, const uint8_t *list, uint64_t count, void *owner,
		  struct store_waiter **out)
{
	const uint8_t *pos = list, *k;
	size_t kl, n = 0, i;
	uint64_t j;
	struct store_waiter *w;

	for (j = 0; j < count; j++) {
		store_list_next(&pos, &k, &kl);
		if (!entry_ready(store_kv_lookup(kv, k, kl, NULL)))
			n++;
	}
	if (n == 0)
		return 1;
	w = calloc(1, sizeof(*w));
	if (w == NULL)
		return -ENOMEM;
	w->links = calloc(n, sizeof(*w->links));
	if (w->links == NULL) {
		free(w);
		return -ENOMEM;
	}
	w->owner = owner;
	pos = list;
	for (j = 0, i = 0; j < count && i < n; j++) {
		struct store_entry *e;
		struct store_wlink *l;

		store_list_next(&pos, &k, &kl);
		e = store_kv_lookup(kv, k, kl, NULL);
		if (entry_ready(e))
			continue;
		if (e == NULL)
			e = lookup_or_create(kv, k, kl);
		if (e == NULL) {
			w->nlinks = i;
			waiter_unlink_all(kv, w);
			free(w->links);
			free(w);
			return -ENOMEM;
		}
		l = &w->links[i++];
		l->e = e;
		l->w = w;
		l->prev = e->wtail;
		if (e->wtail)
			e->wtail->next = l;
		else
			e->whead = l;
		e->wtail = l;
		l->linked = true;
		w->nlive++;
	}
	w->nlinks = i;
	w->remaining = i;
	*out = w;
	return 0;
}

void store_kv_waiter_cancel(struct store_kv *kv, struct store_waiter *w)
{
	waiter_unlink_all(kv, w);
	free(w->links);
	free(w);
}

int store_kv_queue_push(struct store_kv *kv, const uint8_t *key, size_t klen, const uint8_t *val,
			size_t vlen)
{
	struct store_entry *e = lookup_or_create(kv, key, klen);
	struct qitem *q;

	if (e == NULL)
		return -ENOMEM;
	q = malloc(sizeof(*q) + vlen);
	if (q == NULL) {
		maybe_drop(kv, e);
		return -ENOMEM;
	}
	q->next = NULL;
	q->len = vlen;
	if (vlen)
		memcpy(q->data, val, vlen);
	if (e->qtail)
		e->qtail->next = q;
	else
		e->qhead = q;
	e->qtail = q;
	e->qlen++;
	fire(kv, e, true);
	return 0;
}

int store_kv_queue_pop(struct store_kv *kv, const uint8_t *key, size_t klen, int64_t *qlen,
		       uint8_t **val, size_t *vlen)
{
	struct store_entry *e = store_kv_lookup(kv, key, klen, NULL);
	struct qitem *q;
	uint8_t *d;

	*qlen = e ? e->qlen : 0;
	if (e == NULL || e->qhead == NULL)
		return 0;
	q = e->qhead;
	d = dup_bytes(q->data, q->len);
	if (d == NULL)
		return -ENOMEM;
	e->qhead = q->next;
	if (e->qhead == NULL)
		e->qtail = NULL;
	e->qlen--;
	*val = d;
	*vlen = q->len;
	free(q);
	maybe_drop(kv, e);
	return 0;
}

int64_t store_kv_queue_len(struct store_kv *kv, const uint8_t *key, size_t klen)
{
	struct store_entry *e = store_kv_lookup(kv, key, klen, NULL);

	return e ? e->qlen : 0;
}

int store_kv_watch(struct store_kv *kv, const uint8_t *key, size_t klen, void *owner,
		   struct store_watch **out)
{
	struct store_entry *e = lookup_or_create(kv, key, klen);
	struct store_watch *w;

	if (e == NULL)
		return -ENOMEM;
	w = calloc(1, sizeof(*w));
	if (w == NULL) {
		maybe_drop(kv, e);
		return -ENOMEM;
	}
	w->owner = owner;
	w->e = e;
	w->next = e->watches;
	if (e->watches)
		e->watches->prev = w;
	e->watches = w;
	*out = w;
	return 0;
}

void store_kv_unwatch(struct store_kv *kv, struct store_watch *w)
{
	struct store_entry *e = w->e;

	if (w->prev)
		w->prev->next = w->next;
	else
		e->watches = w->next;
	if (w->next)
		w->next->prev = w->prev;
	free(w);
	maybe_drop(kv, e);
}
