/* store_server_int: what store_server.c (listening, lifecycle), store_conn.c
 * (connections, buffers), its transports (store_transport.h) and store_exec.c
 * (requests against the key table) share. Not a public API. */
#ifndef DDP_STORE_SERVER_INT_H
#define DDP_STORE_SERVER_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "store_kv.h"
#include "store_proto.h"
#include "store_server.h"
#include "store_transport.h"

#define STORE_MAX_LISTENERS 8
#define STORE_READ_CHUNK    (64 * 1024)

struct store_conn {
	uv_tcp_t tcp;
	struct store_server *s;
	struct store_conn *prev, *next; /* every open connection */
	struct store_conn *dirty_next;	/* has replies to flush */
	struct store_parser parser;
	uint8_t *in; /* unparsed bytes (a partial message) */
	size_t in_len, in_cap;
	struct store_buf out; /* replies not yet handed to the transport */
	size_t out_inflight;  /* bytes in uv_write requests / the ring's SEND */
	bool dirty, closing, reading, paused, doomed, counted;
	/* io_uring transport (store_ring.c): entries in flight that name this
	 * connection (it is closed only at 0), the armed multishot receive, the
	 * SEND in flight and the buffer it sends from. */
	unsigned rops;
	bool recv_armed, sending;
	struct store_buf snd;
	size_t snd_off;
	struct store_waiter *waiters; /* parked WAITs */
	struct store_watch *watches;  /* 1.x WATCH_KEY registrations */
	uint8_t *oc_key, *oc_val;     /* ON_CLOSE_SET registration */
	size_t oc_klen, oc_vlen;
	bool oc_set;
	char peer[64]; /* "" until store_conn_peer looks it up */
};

struct store_server {
	uv_loop_t *loop;
	struct store_server_opts o;
	struct store_limits lim;
	uv_tcp_t *listeners[STORE_MAX_LISTENERS]; /* malloc'd, freed when closed */
	int nlisteners;
	int port;
	struct store_kv *kv;
	size_t kv_max_appended; /* the longest value APPENDs may grow */
	struct store_conn *conns;
	unsigned nconns;
	struct store_conn *dirty;
	uv_check_t flush; /* after each poll: hand every dirty reply to libuv */
	/* Active while replies are queued: replies queued outside the poll phase
	 * (a write callback deferred to the pending phase resuming a paused
	 * connection) must not wait for an event that never comes, so poll may
	 * not block until they are flushed. */
	uv_idle_t unblock;
	uint8_t *rbuf; /* shared read buffer; every read is consumed at once */
	const struct store_transport_ops *io; /* libuv streams unless the ring */
	struct store_ring *ring;	      /* store_ring.c's state, or NULL */
	bool ring_tried;		      /* store_ring_open was called (once at most) */
	bool closing;
	unsigned open_handles;
	void (*done)(void *arg);
	void *done_arg;
	uint64_t nofile; /* soft RLIMIT_NOFILE, refreshed near the limit */
	uint64_t last_limit_log_ms;
	uint64_t refused_since_log;
};

void store_srv_log(struct store_server *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Close c; reason (may be NULL) goes to the log. Runs its ON_CLOSE_SET
 * unless the server itself is shutting down. */
void store_conn_close(struct store_conn *c, const char *reason);
/* Queue c for the end-of-batch flush. */
void store_conn_mark_dirty(struct store_conn *c);
size_t store_conn_out_bytes(const struct store_conn *c);
const char *store_conn_peer(struct store_conn *c);

/* store_conn.c: start reading c; the close callback of a connection; the
 * after-poll flush of every dirty connection; bytes received for c (parsed
 * and executed; what is not a whole message is copied); resume a paused c;
 * keep the next poll from blocking until the check phase has run. */
int store_conn_start_reading(struct store_conn *c);
void store_conn_on_closed(uv_handle_t *h);
void store_server_flush(uv_check_t *h);
void store_conn_input(struct store_conn *c, const uint8_t *data, size_t n);
void store_conn_resume(struct store_conn *c);
void store_server_wake(struct store_server *s);
/* For a transport that reads into buffers it is given (libuv streams):
 * where the next read of c may land (*len bytes; NULL: out of memory), and
 * n bytes read there. */
uint8_t *store_conn_read_buf(struct store_conn *c, size_t *len);
void store_conn_read_done(struct store_conn *c, const uint8_t *buf, size_t n);
/* Some of c's replies went: a paused c goes on once below half its limit. */
void store_conn_written(struct store_conn *c);
/* store_server.c: free the server once it is closing and its last handle
 * has closed. */
void store_server_maybe_free(struct store_server *s);

/* Execute one parsed request on c (store_exec.c). May close c. */
void store_exec(struct store_conn *c, const struct store_req *r);
/* Table callbacks: a parked waiter completed / a watched key changed. */
void store_exec_woken(struct store_waiter *w, void *arg);
void store_exec_watch(struct store_watch *w, int type, const uint8_t *key, size_t klen,
		      const uint8_t *old, size_t oldlen, const uint8_t *nv, size_t nvlen,
		      void *arg);
/* Drop c's waiters, watches; perform its ON_CLOSE_SET when run_on_close. */
void store_exec_conn_gone(struct store_conn *c, bool run_on_close);

#endif
