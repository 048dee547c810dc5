/* store_server: the ddp store's TCP server on a libuv loop, speaking both
 * PyTorch TCPStore dialects (1.x and 2.x, chosen per connection). Embeddable:
 * the ddprun agent runs it inside its own loop; `ddpstore serve` runs it alone.
 * Errors are negative errno values (see store_strerror in store_proto.h).
 * The process must ignore SIGPIPE (libuv writes to sockets with write()). */
#ifndef DDP_STORE_SERVER_H
#define DDP_STORE_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct store_server_opts {
	size_t max_key_len;	/* default STORE_MAX_KEY (store_proto.h) */
	size_t max_value_len;	/* default STORE_MAX_VALUE */
	size_t max_multi_keys;	/* keys per multi-key op, default STORE_MAX_MULTI_KEYS */
	size_t max_conn_buffer; /* bytes buffered per connection (in + out) */
	unsigned max_conns;	/* concurrent connections; 0: 16384 */
	int backlog;		/* listen backlog */
	const char *log_prefix; /* "ddpstore" / "ddprun"; NULL: no logging */
	int keepalive_s;	/* TCP keepalive idle time, so a dead peer host
				 * closes (and runs its ON_CLOSE_SET) in about
				 * twice this; 0: 15 s; < 0: off */
	/* Called from the loop after a counted connection has closed (not during
	 * store_server_close), so an embedder can wait for its peers to leave
	 * before closing the server (store_server_num_conns). May be NULL. */
	void (*conn_closed)(void *arg);
	void *conn_closed_arg;
	int io; /* STORE_IO_*: how connections are served */
};

/* STORE_IO_AUTO: io_uring where the kernel allows it (Linux 6.0+, not
 * disabled or filtered), else libuv streams; STORE_IO_URING: io_uring or
 * store_server_start fails; STORE_IO_UV: libuv streams only. */
enum { STORE_IO_AUTO = 0, STORE_IO_URING = 1, STORE_IO_UV = 2 };

/* *io from a DDP_STORE_IO value (auto, uring, uv; NULL or empty: auto).
 * -EINVAL for any other. */
int store_server_io_parse(const char *v, int *io);

void store_server_opts_init(struct store_server_opts *o);

struct store_server;

/* Bind host:port (IPv4/IPv6 literal or name, every address it resolves to;
 * several separated by commas, none empty (else -EINVAL); NULL, "" or "*":
 * all interfaces, IPv4 and IPv6; port 0 picks a free port, the same on every
 * address) and start serving on loop. *out is owned by the caller until
 * store_server_close's callback has run. On failure there is nothing to
 * free, but handles may still be closing: run the loop before
 * uv_loop_close(). */
int store_server_start(uv_loop_t *loop, const struct store_server_opts *o, const char *host,
		       int port, struct store_server **out);
/* 0 if host is one or more names or literals separated by commas, none of
 * them empty; else -EINVAL (a list such as "127.0.0.1,,::1", which
 * store_server_start refuses, or "", which it takes for all interfaces:
 * for a command line that must not read an empty value so). */
int store_server_host_check(const char *host);
/* The bound port (useful after port 0). */
int store_server_port(const struct store_server *s);
/* The numeric text of the first address bound ("127.0.0.1", "::1"): what a
 * host name given to store_server_start came to. 0 or a negative errno. */
int store_server_addr(const struct store_server *s, char *buf, size_t len);
/* Stop accepting, close every connection (parked waiters are dropped), free the
 * server, then call done(arg) (may be NULL) from the loop. */
void store_server_close(struct store_server *s, void (*done)(void *arg), void *arg);

/* In auto, the io_uring is set up when the first connection is accepted;
 * this sets it up now (a standalone server, to say which it uses). 0, or
 * with STORE_IO_URING the negative errno of its absence. */
int store_server_io_prepare(struct store_server *s);
/* How connections are served: "io_uring" or "libuv" (streams). */
const char *store_server_io(const struct store_server *s);

/* Forget every key and queue not under keep (NULL: all): a fresh key space
 * for a new attempt's workers. 0 or -ENOMEM. */
int store_server_clear(struct store_server *s, const char *keep);

/* Connections now open (refused ones not counted). */
unsigned store_server_num_conns(const struct store_server *s);

/* Raise the soft RLIMIT_NOFILE to the hard limit (each connection is one
 * descriptor). *limit gets the resulting soft limit. 0 or a negative errno. */
int store_server_raise_nofile(uint64_t *limit);

#endif
