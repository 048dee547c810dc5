/* store_async_int: what store_async.c (connection, I/O, the reply stream),
 * store_async_reply.c (delivering replies) and store_async_ops.c (building
 * requests) share. Not a public API. */
#ifndef DDP_STORE_ASYNC_INT_H
#define DDP_STORE_ASYNC_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "store_async.h"
#include "store_lookup.h"
#include "store_proto.h"

#define STORE_ASYNC_HANDSHAKE_MS 30000 /* bound when connect_timeout_ms <= 0 */

enum astate { AS_CONNECTING, AS_READY, AS_LOST, AS_CLOSING };
enum akind { K_DONE, K_INT, K_BYTES, K_MULTI };

struct aop {
	struct aop *next;
	enum store_op op;
	enum store_reply_kind reply;
	uint64_t n;
	struct store_buf req;
	enum akind kind;
	union {
		store_async_done_cb done;
		store_async_int_cb i;
		store_async_bytes_cb bytes;
		store_async_multi_cb multi;
	} cb;
	void *arg;
	int64_t timeout_ms; /* WAIT; <= 0: none */
	bool internal;	    /* the handshake's PING */
	bool cancel_sent, stop_seen;
	int phase, check; /* get: CHECK reply, then GET reply */
	uint32_t nonce;
	uint64_t seq; /* order of its write among operation writes */
};

struct wreq {
	uv_write_t req;
	struct store_async *a;
	uint8_t *data;
	bool op_write; /* an operation's request (counted), not CANCEL/handshake */
};

struct store_async {
	uv_loop_t *loop;
	char *host, *prefix;
	int port;
	enum astate state;
	int64_t deadline, backoff;
	int64_t attempt_ms; /* when the current address's attempt began */
	int last_err;
	struct store_lookup *lookup;	  /* the host's lookup under way, or NULL */
	struct store_lookup_result addrs; /* its answer: the addresses to try */
	int addr_i;			  /* the one being tried; addrs.n: none left */
	uv_tcp_t *tcp;			  /* current attempt or connection; malloc'd */
	bool tcp_up;	 /* connected: while connecting, the handshake's answer awaited */
	bool answerless; /* connecting failed while a connection awaited it */
	uv_timer_t retry_timer, deadline_timer, wait_timer;
	unsigned nclosing;
	struct aop *sendq, *sendq_tail, *replyq, *replyq_tail;
	struct aop *cur_wait;
	uint8_t *rbuf;
	size_t rlen, rcap;
	uint32_t nonce;
	uint64_t nsent, nwritten; /* operation writes issued / completed */
	struct store_async_callbacks cbs;
	void (*done)(void *arg);
	void *done_arg;
};

/* Queue a new operation like t (reply, kind, callback, arg and the fields
 * its op uses), its request m[0..nm) encoded under a's prefix, and send what
 * may go. It is the operation of its last message (GET: a CHECK, then the
 * GET). 0, or -ENOTCONN after loss or close, -ENOMEM, or store_encode's
 * error. */
int store_async_queue(struct store_async *a, const struct aop *t, const struct store_msg *m,
		      size_t nm);
/* Unlink and return the head of a queue (NULL when empty). */
struct aop *store_async_pop(struct aop **head, struct aop **tail);
void store_async_op_free(struct aop *op);
/* Call op's callback with a failure status (no value) and free it. */
void store_async_op_fail(struct aop *op, int status);
/* The head of replyq's reply, complete at p: call its callback (or finish
 * the handshake). False when the stream is out of step (protocol error). */
bool store_async_deliver(struct store_async *a, const uint8_t *p);

#endif
