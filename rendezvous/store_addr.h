/* store_addr: socket address and option helpers shared by the store's server
 * and clients (no libuv here: the blocking client does not need the loop). */
#ifndef DDP_STORE_ADDR_H
#define DDP_STORE_ADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct addrinfo;

/* How long a connection attempt waits for an answer before its silence is
 * the answer: a refusal comes far sooner, even from a loaded host across a
 * network. What an address said before such a silence no longer holds. */
#define STORE_ANSWER_MS 1000
/* How long an address that does not answer holds up the next one of the same
 * name (a dual-stack name's IPv6 and IPv4 addresses), so that one that drops
 * connections does not take the whole connect timeout. */
#define STORE_ADDR_TRY_MS 2000

/* Numeric text of sa: "1.2.3.4" / "::1", with ":port" ("[::1]:port") when
 * with_port. 0 or a negative errno. */
int store_addr_format(const struct sockaddr *sa, bool with_port, char *buf, size_t len);

/* Whether numeric address text (store_addr_format's) is a loopback one:
 * 127.0.0.0/8, ::1, or 127.x mapped into IPv6. */
bool store_addr_is_loopback(const char *addr);

/* getaddrinfo for TCP with a numeric port; passive for binding. Returns 0 or
 * -EHOSTUNREACH (name does not resolve; text via gai in *gai_err if not NULL). */
int store_addr_resolve(const char *host, int port, bool passive, struct addrinfo **out,
		       int *gai_err);
/* Why host did not resolve, for a message after store_addr_resolve (or a
 * caller of it) failed: getaddrinfo's code on a second look, 0 where it
 * resolves now (a lookup that failed only for a while). */
int store_addr_gai(const char *host, int port, bool passive);

/* TCP keepalive on fd: probe after idle_s idle seconds, then every
 * idle_s / 3 (at least 1 s), give up after 3 probes -- a peer whose host died
 * is noticed in about twice idle_s. 0 or a negative errno. */
int store_sock_keepalive(int fd, int idle_s);
/* Whether connected socket fd reached itself: a connection to a port of this
 * host where nothing listens can take that port as its own source (TCP's
 * simultaneous open), when the port is in the ephemeral range. Such a socket
 * is set to close with a reset, not TIME_WAIT, which would keep the store's
 * host from binding the port for a minute ("in use"). The caller closes it
 * and takes it for a refusal. */
bool store_sock_is_self(int fd);

#endif
