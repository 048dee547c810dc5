/* store_transport: how the store server's connections move bytes, one ops
 * table per kind (as libuv has one file per handle type). store_conn.c keeps
 * buffering, parsing and back-pressure and calls these; store_conn_uv.c
 * (libuv streams, always there) and store_ring.c (io_uring, only where built
 * with liburing) implement them. Accepting is libuv's in both: c->tcp owns
 * the descriptor. Not a public API. */
#ifndef DDP_STORE_TRANSPORT_H
#define DDP_STORE_TRANSPORT_H

#include <stdbool.h>

struct store_conn;
struct store_server;

struct store_transport_ops {
	const char *name; /* store_server_io(): "libuv", "io_uring" */
	/* Deliver what arrives on c (store_conn_input / store_conn_read_*):
	 * 0 or a negative errno. stop_read: no more until start_read. */
	int (*start_read)(struct store_conn *c);
	void (*stop_read)(struct store_conn *c);
	/* Hand c->out (not empty) to the kernel; account it in
	 * c->out_inflight until sent; store_conn_sent() when some went. */
	void (*write)(struct store_conn *c);
	/* c->closing is set: uv_close c->tcp (store_conn_on_closed) once
	 * nothing in flight names c. */
	void (*close)(struct store_conn *c);
	/* Server-wide, NULL where writes go at once: submit hands every
	 * queued operation over after a flush pass (and handles what
	 * completed); idle says none is queued; shutdown frees the transport
	 * once the server is closing and has no connection left. */
	void (*submit)(struct store_server *s);
	bool (*idle)(const struct store_server *s);
	void (*shutdown)(struct store_server *s);
};

extern const struct store_transport_ops store_transport_uv;
#ifdef DDP_HAVE_URING
extern const struct store_transport_ops store_transport_ring;
/* Set up s's io_uring and make store_transport_ring s's transport: 0, or a
 * negative errno when this kernel/process cannot have it (s keeps libuv
 * streams). */
int store_ring_open(struct store_server *s);
#endif

#endif
