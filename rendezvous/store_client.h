/* store_client: blocking client for the ddp store, speaking PyTorch's TCPStore
 * 2.x dialect (VALIDATE handshake first). Used by libddp workers, the ddpstore
 * CLI and tests. One client = one TCP connection; not thread-safe (use one per
 * thread).
 *
 * Errors: every function returns 0 (or a documented non-negative value) on
 * success and a negative errno on failure:
 *   -ETIMEDOUT     the operation or connect deadline passed
 *   -ECONNREFUSED  nothing listens (after retrying until the deadline)
 *   -ECONNRESET / -EPIPE  the server closed the connection
 *   -EPROTO        the server sent something that is not a valid reply
 *   -EINVAL / -ENAMETOOLONG / -EMSGSIZE  bad arguments (key/value too long)
 *   -ENOMEM
 * store_strerror() (store_proto.h) turns any of them into text. After
 * -ETIMEDOUT, -EPROTO or a connection error the client is unusable except for
 * store_client_close() (-ENOTCONN from then on) -- except a -ETIMEDOUT from
 * store_client_wait/_get/_multi_get/_queue_pop/_barrier, whose server-side
 * wait was cancelled: the client stays usable after it.
 *
 * Keys go on the wire as "/" + key, exactly as torch.distributed.TCPStore
 * sends them, so C clients and PyTorch's TCPStore share one key space on the
 * same server (with a prefix p: "/" + p + "/" + key, as PrefixStore(p, ...)). */
#ifndef DDP_STORE_CLIENT_H
#define DDP_STORE_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "store_proto.h"

struct store_client;

/* Connect to host:port (IPv4, IPv6 or a name), retrying with backoff until
 * connect_timeout_ms passes (the server may start later). The default operation
 * timeout is set to op_timeout_ms (<= 0: wait forever). *out is owned by the
 * caller and released with store_client_close(). Every address of the name
 * is tried in turn (one that does not answer for STORE_ADDR_TRY_MS, when
 * another follows, is left for it). On failure the answer the address gave
 * (-ECONNREFUSED, ...), unless an attempt waited STORE_ANSWER_MS for one since
 * and got none (-ETIMEDOUT): a last attempt cut short by the timeout says
 * nothing of the address (store_addr.h). */
int store_client_connect(const char *host, int port, int64_t connect_timeout_ms,
			 int64_t op_timeout_ms, struct store_client **out);
void store_client_close(struct store_client *c);

/* Default timeout for every later operation (<= 0: none). */
void store_client_set_timeout(struct store_client *c, int64_t op_timeout_ms);

/* Key prefix like PyTorch's PrefixStore: key k becomes prefix + "/" + k.
 * NULL or "" removes it. */
int store_client_set_prefix(struct store_client *c, const char *prefix);

/* Local address of the connection (numeric, no brackets), for MASTER_ADDR. */
int store_client_local_addr(const struct store_client *c, char *buf, size_t len);
/* The store's address as this connection reaches it (numeric, no brackets). */
int store_client_peer_addr(const struct store_client *c, char *buf, size_t len);

int store_client_set(struct store_client *c, const char *key, const void *val, size_t len);
/* Waits (up to the operation timeout) until key exists, then returns its value
 * in a malloc'd buffer (*val, NUL-terminated for convenience, *len excludes it). */
int store_client_get(struct store_client *c, const char *key, void **val, size_t *len);
/* Like store_client_get without waiting: -ENOENT if the key does not exist. */
int store_client_try_get(struct store_client *c, const char *key, void **val, size_t *len);
int store_client_add(struct store_client *c, const char *key, int64_t delta, int64_t *result);
/* PyTorch's compare_set: the current value after the operation in *cur (malloc'd). */
int store_client_compare_set(struct store_client *c, const char *key, const void *expected,
			     size_t elen, const void *desired, size_t dlen, void **cur,
			     size_t *curlen);
/* 1 if every key exists, 0 if not. */
int store_client_check(struct store_client *c, const char *const *keys, size_t n);
/* Wait until all keys exist; timeout_ms <= 0 uses the client's default.
 * On timeout the server-side wait is cancelled and -ETIMEDOUT returned. */
int store_client_wait(struct store_client *c, const char *const *keys, size_t n,
		      int64_t timeout_ms);
/* 1 if the key was deleted, 0 if it did not exist. */
int store_client_delete(struct store_client *c, const char *key);
int store_client_num_keys(struct store_client *c, int64_t *n);
int store_client_append(struct store_client *c, const char *key, const void *val, size_t len);
/* vals[i]/lens[i] malloc'd per key (the keys must exist: waits like store_client_get). */
int store_client_multi_get(struct store_client *c, const char *const *keys, size_t n, void **vals,
			   size_t *lens);
int store_client_multi_set(struct store_client *c, const char *const *keys, const void *const *vals,
			   const size_t *lens, size_t n);
int store_client_queue_push(struct store_client *c, const char *key, const void *val, size_t len);
/* Blocks until an item is available or the operation timeout passes (a key
 * that also holds a plain value makes this poll, every 100 ms at most). */
int store_client_queue_pop(struct store_client *c, const char *key, void **val, size_t *len);
int store_client_queue_len(struct store_client *c, const char *key, int64_t *n);
int store_client_ping(struct store_client *c);
/* PyTorch 2.x's Store::barrier: add 1 to the counter at key and return once
 * world_size callers have arrived (timeout_ms <= 0: the client's default).
 * On timeout the server-side wait is cancelled and -ETIMEDOUT returned (the
 * client stays usable; the arrival stays counted, as in PyTorch). */
int store_client_barrier(struct store_client *c, const char *key, int64_t world_size,
			 int64_t timeout_ms);
/* The keys that have a value (not queues), as TCPStore.list_keys gives them:
 * without the leading "/" (and the client's prefix; keys outside it are left
 * out), each malloc'd and NUL-terminated, in no particular order. *keys is
 * NULL when *n is 0; free with store_client_keys_free. */
int store_client_list_keys(struct store_client *c, char ***keys, size_t *n);
void store_client_keys_free(char **keys, size_t n);
/* ddp extension (see store_proto.h): when this connection closes for any
 * reason but a server shutdown, the server sets key to val unless key has a
 * value by then (create-if-absent). Replaces an
 * earlier registration; key NULL or "" clears it. Returns once in force. */
int store_client_on_close_set(struct store_client *c, const char *key, const void *val, size_t len);

#endif
