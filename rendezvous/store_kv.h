/* store_kv: the key table behind the store server, with PyTorch TCPStore
 * semantics: values are bytes, ADD keeps decimal text, COMPARE_SET's three
 * cases, FIFO queues per key, and waiters parked on missing keys that are
 * answered (through the woken callback) by the write that creates the last of
 * their keys. No I/O here: the server owns connections and replies.
 *
 * Keys and values are copied in. Functions return 0 (or a documented
 * non-negative value) or a negative errno. Not thread-safe (one loop). */
#ifndef DDP_STORE_KV_H
#define DDP_STORE_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct store_kv;
struct store_entry;
struct store_wlink;

/* A parked WAIT. owner/oprev/onext belong to the owner (a connection keeps
 * its waiters in a list); the rest is the table's. */
struct store_waiter {
	void *owner;
	struct store_waiter *oprev, *onext;
	size_t remaining;     /* keys still missing */
	size_t nlinks, nlive; /* links, and those still parked on a key */
	struct store_wlink *links;
};

/* A 1.x WATCH_KEY registration. owner/onext belong to the owner. */
struct store_watch {
	void *owner;
	struct store_watch *onext;
	struct store_entry *e;
	struct store_watch *prev, *next;
};

struct store_kv_events {
	/* w has all its keys. It is already unlinked from the table and is
	 * freed when this returns: reply and drop it from the owner's list. */
	void (*woken)(struct store_waiter *w, void *arg);
	/* A watched key changed (type: STORE_WATCH_*; old/new empty when absent). */
	void (*watch)(struct store_watch *w, int type, const uint8_t *key, size_t klen,
		      const uint8_t *old, size_t oldlen, const uint8_t *nv, size_t nvlen,
		      void *arg);
	void *arg;
};

int store_kv_new(const struct store_kv_events *ev, struct store_kv **out);
/* Frees every key, queue, waiter and watch (no callbacks; owners must not
 * touch their waiters or watches afterwards). */
void store_kv_free(struct store_kv *kv);

/* Value of key, or NULL if absent. Valid until the next write. */
const uint8_t *store_kv_get(struct store_kv *kv, const uint8_t *key, size_t klen, size_t *vlen);
int store_kv_set(struct store_kv *kv, const uint8_t *key, size_t klen, const uint8_t *val,
		 size_t vlen);
/* A counter's value as ADD reads it, by std::stoll's rules (PyTorch's server):
 * leading white space, a sign, at least one digit; the rest is ignored.
 * -EINVAL without a digit, -ERANGE beyond int64. */
int store_kv_parse_counter(const uint8_t *s, size_t n, int64_t *out);
/* -EINVAL if the current value is not a decimal integer, -ERANGE if it is
 * beyond int64 (store_kv_parse_counter). The sum wraps around past int64,
 * as PyTorch's servers' does. */
int store_kv_add(struct store_kv *kv, const uint8_t *key, size_t klen, int64_t delta,
		 int64_t *result);
/* PyTorch's compare_set; *cur points at the reply (valid until the next write). */
int store_kv_compare_set(struct store_kv *kv, const uint8_t *key, size_t klen, const uint8_t *exp,
			 size_t elen, const uint8_t *des, size_t dlen, const uint8_t **cur,
			 size_t *curlen);
/* 1 if deleted, 0 if absent. Waiters are not affected. */
int store_kv_delete(struct store_kv *kv, const uint8_t *key, size_t klen);
/* -EFBIG (nothing changed) if the value would grow past the limit that
 * store_kv_limit_value set (none by default). The limit is on the whole
 * value: the length of one APPEND's own bytes is the parser's business. */
int store_kv_append(struct store_kv *kv, const uint8_t *key, size_t klen, const uint8_t *val,
		    size_t vlen);
void store_kv_limit_value(struct store_kv *kv, size_t max);
int64_t store_kv_num_keys(const struct store_kv *kv);
/* Bytes of every value now stored (queues not counted). */
size_t store_kv_value_bytes(const struct store_kv *kv);
/* Drop every value and queue whose key does not start with keep (NULL: keep
 * nothing); watches see the deletions, parked waiters stay parked. 0 or
 * -ENOMEM. */
int store_kv_clear(struct store_kv *kv, const char *keep);

/* Keys as a parsed list (store_list_next). A key counts as present when it
 * has a value or a non-empty queue (as in PyTorch's libuv server). */
bool store_kv_check(struct store_kv *kv, const uint8_t *list, uint64_t count);
/* 1: all present now. 0: parked, *out is the waiter (owner set by caller). */
int store_kv_wait(struct store_kv *kv, const uint8_t *list, uint64_t count, void *owner,
		  struct store_waiter **out);
/* Unlink and free a parked waiter (connection closed, CANCEL_WAIT). */
void store_kv_waiter_cancel(struct store_kv *kv, struct store_waiter *w);

/* Push wakes one parked waiter of the key (the first whose keys are all present). */
int store_kv_queue_push(struct store_kv *kv, const uint8_t *key, size_t klen, const uint8_t *val,
			size_t vlen);
/* *qlen: length before the pop; when > 0, *val (malloc'd, caller frees). */
int store_kv_queue_pop(struct store_kv *kv, const uint8_t *key, size_t klen, int64_t *qlen,
		       uint8_t **val, size_t *vlen);
int64_t store_kv_queue_len(struct store_kv *kv, const uint8_t *key, size_t klen);

/* BARRIER: add 1 to the decimal counter at key (as ADD; its errors), *count
 * the result. 1: it reached world, and every caller parked on key has been
 * released (woken callback); 0: parked, *out is the waiter (cancel it like a
 * WAIT's). Only a BARRIER arrival releases: other writes of the key wake
 * WAIT waiters only. */
int store_kv_barrier(struct store_kv *kv, const uint8_t *key, size_t klen, int64_t world,
		     void *owner, int64_t *count, struct store_waiter **out);

/* LIST_KEYS' reply appended to out: i64 n, then the n keys that have a value
 * (queues are not keys here, as in PyTorch's server); *bytes its size.
 * -E2BIG (nothing written) when that is more than max. */
struct store_buf;
int store_kv_list_keys(const struct store_kv *kv, struct store_buf *out, size_t max, size_t *bytes);

int store_kv_watch(struct store_kv *kv, const uint8_t *key, size_t klen, void *owner,
		   struct store_watch **out);
void store_kv_unwatch(struct store_kv *kv, struct store_watch *w);

#endif
