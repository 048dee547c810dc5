/* store_kv_int: the key table's internals, shared by store_kv.c (keys,
 * values, waiters, queues, watches) and store_kv_sync.c (BARRIER and
 * LIST_KEYS). Not a public API. */
#ifndef DDP_STORE_KV_INT_H
#define DDP_STORE_KV_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store_kv.h"

struct store_wlink {
	struct store_entry *e;
	struct store_wlink *prev, *next;
	struct store_waiter *w;
	bool linked;
	bool barrier; /* on the entry's barrier list, not its key waiters */
};

struct qitem {
	struct qitem *next;
	size_t len;
	uint8_t data[];
};

struct store_entry {
	struct store_entry *hnext; /* hash chain */
	uint64_t hash;
	uint8_t *val;
	size_t val_len;
	bool present;
	struct store_wlink *whead, *wtail; /* parked waiters, FIFO */
	struct store_wlink *bhead, *btail; /* parked BARRIER callers */
	struct qitem *qhead, *qtail;
	int64_t qlen;
	struct store_watch *watches;
	size_t key_len;
	uint8_t key[];
};

struct store_kv {
	struct store_entry **buckets;
	size_t nbuckets; /* power of two */
	size_t nentries;
	int64_t npresent;
	size_t value_bytes; /* of every value (not queues): bounds one reply */
	uint64_t seed;
	size_t max_value; /* APPEND may not grow a value past it */
	struct store_kv_events ev;
};

/* The entry of key (a placeholder for waiters included), or NULL. */
struct store_entry *store_kv_lookup(struct store_kv *kv, const uint8_t *key, size_t klen,
				    uint64_t *hash_out);
/* Take l off its entry's list (no-op if it is not on one). */
void store_kv_link_remove(struct store_wlink *l);
/* w is complete: unlink it everywhere, tell its owner (woken), free it. */
void store_kv_waiter_done(struct store_kv *kv, struct store_waiter *w);

#endif
