/* store_async: a non-blocking store client on a libuv loop (2.x dialect), for
 * an agent that hosts the store server in the same loop and so cannot block.
 *
 * One handle = one connection. store_async_connect returns at once and keeps
 * trying (with backoff) until the deadline; operations may be queued before
 * the connection is up. Operations run in submission order; each callback is
 * called exactly once, from the loop, if and only if the submitting function
 * returned 0. A wait holds the operations queued behind it until it ends (the
 * protocol matches replies by order): use a second handle for a long wait
 * alongside other traffic.
 *
 * A callback may be NULL (fire and forget: the operation still runs in
 * order). Status values: 0, or -ETIMEDOUT, -ENOENT (get of a missing key),
 * -ECANCELED (store_async_close), the connection's loss reason (-ECONNRESET,
 * -EPROTO, ...), or the connect error. Byte buffers passed to callbacks are
 * valid only during the callback. Keys are laid out as torch's TCPStore does
 * (see store_client.h), so async, blocking and PyTorch clients share keys. */
#ifndef DDP_STORE_ASYNC_H
#define DDP_STORE_ASYNC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct store_async;

typedef void (*store_async_done_cb)(int status, void *arg);
typedef void (*store_async_int_cb)(int status, int64_t value, void *arg);
typedef void (*store_async_bytes_cb)(int status, const void *val, size_t len, void *arg);
typedef void (*store_async_multi_cb)(int status, size_t n, const void *const *vals,
				     const size_t *lens, void *arg);

struct store_async_callbacks {
	/* The connection is up (0), or connecting failed for good (then every
	 * queued operation has failed with the same status). May be NULL. */
	void (*on_connect)(struct store_async *a, int status, void *arg);
	/* An established connection was lost; every pending operation has
	 * failed with reason first. The handle only accepts close now. */
	void (*on_lost)(struct store_async *a, int reason, void *arg);
	void *arg;
};

/* Start connecting to host:port (IPv4/IPv6 literal or name). Keeps retrying
 * with backoff until connect_timeout_ms (<= 0: one attempt). *out is valid
 * until store_async_close's done callback. */
int store_async_connect(uv_loop_t *loop, const char *host, int port, int64_t connect_timeout_ms,
			const struct store_async_callbacks *cbs, struct store_async **out);
/* Cancel every pending operation (-ECANCELED), close, free, then done(arg)
 * (may be NULL) -- all from the loop's close callbacks. */
void store_async_close(struct store_async *a, void (*done)(void *arg), void *arg);
/* The numeric address (no brackets, no port) of this end / the server's
 * end of the connection, once connected: 0, -ENOTCONN, or -ENAMETOOLONG
 * when len is too small. The local address is the one the server's peers reach this
 * host by (when they share its network). */
int store_async_local_addr(const struct store_async *a, char *buf, size_t len);
/* While connecting, or once that failed: something accepted the connection
 * but gave no answer to the handshake (no store, or not one: another
 * program on the port). */
bool store_async_unanswered(const struct store_async *a);
int store_async_peer_addr(const struct store_async *a, char *buf, size_t len);
/* Key prefix like PrefixStore (NULL or "" removes it); applies to later ops. */
int store_async_set_prefix(struct store_async *a, const char *prefix);

/* Completes once the request is written (SET has no reply). */
int store_async_set(struct store_async *a, const char *key, const void *val, size_t len,
		    store_async_done_cb cb, void *arg);
/* Does not wait: a missing key completes with -ENOENT. */
int store_async_get(struct store_async *a, const char *key, store_async_bytes_cb cb, void *arg);
int store_async_add(struct store_async *a, const char *key, int64_t delta, store_async_int_cb cb,
		    void *arg);
/* PyTorch's compare_set; the callback gets the value after the operation. */
int store_async_compare_set(struct store_async *a, const char *key, const void *expected,
			    size_t elen, const void *desired, size_t dlen, store_async_bytes_cb cb,
			    void *arg);
/* value 1 if every key exists, else 0. */
int store_async_check(struct store_async *a, const char *const *keys, size_t n,
		      store_async_int_cb cb, void *arg);
/* Does not wait: missing keys come back empty. n >= 1. */
int store_async_multi_get(struct store_async *a, const char *const *keys, size_t n,
			  store_async_multi_cb cb, void *arg);
int store_async_multi_set(struct store_async *a, const char *const *keys, const void *const *vals,
			  const size_t *lens, size_t n, store_async_done_cb cb, void *arg);
/* value 1 if deleted, 0 if absent. */
int store_async_delete(struct store_async *a, const char *key, store_async_int_cb cb, void *arg);
int store_async_num_keys(struct store_async *a, store_async_int_cb cb, void *arg);
/* The ddp ON_CLOSE_SET extension (store_proto.h): a create-if-absent set
 * when this connection closes; key NULL/"" clears. Completes once the server
 * has it in force. */
int store_async_on_close_set(struct store_async *a, const char *key, const void *val, size_t len,
			     store_async_done_cb cb, void *arg);
/* Completes with 0 once every key exists, or -ETIMEDOUT after timeout_ms
 * (<= 0: no limit), the server-side wait then cancelled (a STOP_WAITING that
 * races with the cancel counts as success). */
int store_async_wait(struct store_async *a, const char *const *keys, size_t n, int64_t timeout_ms,
		     store_async_done_cb cb, void *arg);
int store_async_ping(struct store_async *a, store_async_done_cb cb, void *arg);
/* PyTorch 2.x's Store::barrier: count this arrival at key; completes with 0
 * once world_size have arrived, or -ETIMEDOUT after timeout_ms (<= 0: no
 * limit), cancelled like a wait (the arrival stays counted). Holds the
 * operations behind it, as a wait does. */
int store_async_barrier(struct store_async *a, const char *key, int64_t world_size,
			int64_t timeout_ms, store_async_done_cb cb, void *arg);
/* The keys that have a value, as TCPStore.list_keys gives them (no leading
 * "/", the prefix removed, keys outside it left out): the callback's vals
 * are the n keys (not NUL-terminated), in no particular order. */
int store_async_list_keys(struct store_async *a, store_async_multi_cb cb, void *arg);

#endif
