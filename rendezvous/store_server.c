/* store_server: listening (every address of a host, one port), accepting
 * within the connection and open-files limits, and the server's lifecycle.
 * Connections themselves live in store_conn.c, requests in store_exec.c. */
#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "store_addr.h"
#include "store_server_int.h"
#include "util.h"

void store_server_opts_init(struct store_server_opts *o)
{
	struct store_limits l;

	store_limits_default(&l);
	memset(o, 0, sizeof(*o));
	o->max_key_len = l.max_key_len;
	o->max_value_len = l.max_value_len;
	o->max_multi_keys = l.max_multi_keys;
	o->max_conn_buffer = l.max_msg_len;
	o->max_conns = 16384;
	o->backlog = 65535; /* the kernel caps it at net.core.somaxconn */
	o->keepalive_s = 15;
	o->log_prefix = NULL;
}

void store_srv_log(struct store_server *s, const char *fmt, ...)
{
	va_list ap;
	char line[512];

	if (s->o.log_prefix == NULL)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s: %s\n", s->o.log_prefix, line);
}

void store_server_maybe_free(struct store_server *s)
{
	if (!s->closing || s->open_handles > 0)
		return;
	store_kv_free(s->kv);
	free(s->rbuf);
	if (s->done) {
		void (*done)(void *) = s->done;
		void *arg = s->done_arg;

		free(s);
		done(arg);
	} else {
		free(s);
	}
}

/* ---- accepting ------------------------------------------------------------------ */

static void log_refusal(struct store_server *s, const char *why)
{
	uint64_t now = uv_now(s->loop);

	/* One line per second at most: a storm of refusals must not flood. */
	s->refused_since_log++;
	if (s->last_limit_log_ms != 0 && now - s->last_limit_log_ms < 1000)
		return;
	store_srv_log(s, "refusing %llu connection(s): %s",
		      (unsigned long long)s->refused_since_log, why);
	s->last_limit_log_ms = now ? now : 1;
	s->refused_since_log = 0;
}

/* Descriptors kept free near RLIMIT_NOFILE: at the limit libuv would
 * silently accept-and-close instead (its EMFILE trick), and the embedding
 * process needs a few for itself. */
#define FD_SPARE 8

static uint64_t nofile_now(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return UINT64_MAX;
	return (uint64_t)rl.rlim_cur;
}

/* Is the descriptor just accepted too close to the open-files limit? */
static bool near_nofile(struct store_server *s, struct store_conn *c)
{
	uv_os_fd_t fd;

	if (uv_fileno((uv_handle_t *)&c->tcp, &fd) < 0)
		return false;
	if ((uint64_t)fd + FD_SPARE < s->nofile)
		return false;
	s->nofile = nofile_now(); /* it may have been raised meanwhile */
	return (uint64_t)fd + FD_SPARE >= s->nofile;
}

static void on_connection(uv_stream_t *ls, int status)
{
	struct store_server *s = ls->data;
	struct store_conn *c;
	char why[128];

	if (status < 0) {
		snprintf(why, sizeof(why), "accept failed: %s%s", uv_strerror(status),
			 status == UV_EMFILE || status == UV_ENFILE
				 ? " (raise the open-files limit: ulimit -n)"
				 : "");
		log_refusal(s, why);
		return;
	}
	if (!s->ring_tried)
		store_server_io_prepare(s); /* auto: at the first connection (see start) */
	c = calloc(1, sizeof(*c));
	if (c == NULL)
		return;
	c->s = s;
	store_parser_init(&c->parser, &s->lim, STORE_DIALECT_NONE);
	store_buf_init(&c->out);
	uv_tcp_init(s->loop, &c->tcp);
	c->tcp.data = c;
	s->open_handles++;
	c->next = s->conns;
	if (s->conns)
		s->conns->prev = c;
	s->conns = c;
	if (uv_accept(ls, (uv_stream_t *)&c->tcp) < 0) {
		c->closing = true;
		uv_close((uv_handle_t *)&c->tcp, store_conn_on_closed);
		return;
	}
	if (s->nconns >= s->o.max_conns || near_nofile(s, c)) {
		if (s->nconns >= s->o.max_conns)
			snprintf(why, sizeof(why), "connection limit (%u) reached", s->o.max_conns);
		else
			snprintf(why, sizeof(why),
				 "open-files limit (RLIMIT_NOFILE %llu) reached with %u "
				 "connections; raise it (ulimit -n)",
				 (unsigned long long)s->nofile, s->nconns);
		log_refusal(s, why);
		c->closing = true;
		uv_close((uv_handle_t *)&c->tcp, store_conn_on_closed);
		return;
	}
	c->counted = true;
	s->nconns++;
#ifndef __linux__
	uv_tcp_nodelay(&c->tcp, 1); /* Linux: inherited from the listener */
	if (s->o.keepalive_s > 0)
		uv_tcp_keepalive(&c->tcp, 1, (unsigned)s->o.keepalive_s);
#endif
	if (store_conn_start_reading(c) < 0)
		store_conn_close(c, NULL);
}

/* ---- lifecycle ------------------------------------------------------------------- */

static void on_handle_closed(uv_handle_t *h)
{
	struct store_server *s = h->data;

	s->open_handles--;
	store_server_maybe_free(s);
}

static void on_listener_closed(uv_handle_t *h)
{
	struct store_server *s = h->data;

	free(h);
	s->open_handles--;
	store_server_maybe_free(s);
}

static void close_listeners(struct store_server *s)
{
	int i;

	for (i = 0; i < s->nlisteners; i++)
		uv_close((uv_handle_t *)s->listeners[i], on_listener_closed);
	s->nlisteners = 0;
}

/* Bind and listen on every address host resolves to (all interfaces when
 * NULL), all on one port: *port is fixed by the first address bound.
 * Returns 0, or a negative errno that ends the attempt. */
static int listen_host(struct store_server *s, const char *host, int *port, int *bound,
		       int *first_err)
{
	struct addrinfo *ai = NULL, *a;
	int rc;

	rc = store_addr_resolve(host, *port, true, &ai, NULL);
	if (rc < 0)
		return rc;
	for (a = ai; a && s->nlisteners < STORE_MAX_LISTENERS; a = a->ai_next) {
		struct sockaddr_storage ss;
		int len = sizeof(ss);
		uv_tcp_t *t;

		if (a->ai_family != AF_INET && a->ai_family != AF_INET6)
			continue;
		t = malloc(sizeof(*t));
		if (t == NULL) {
			rc = -ENOMEM;
			break;
		}
		memcpy(&ss, a->ai_addr, a->ai_addrlen);
		/* sin_port and sin6_port share their offset. */
		((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)*port);
		uv_tcp_init(s->loop, t);
		t->data = s;
		s->open_handles++;
		s->listeners[s->nlisteners++] = t;
		rc = uv_tcp_bind(t, (struct sockaddr *)&ss,
				 a->ai_family == AF_INET6 ? UV_TCP_IPV6ONLY : 0);
		/* Replies are small and latency-bound: no Nagle. Accepted
		 * sockets inherit it, and the keepalive settings, on Linux. */
		if (rc == 0)
			rc = uv_tcp_nodelay(t, 1);
		if (rc == 0 && s->o.keepalive_s > 0) {
			uv_os_fd_t fd;

			if (uv_fileno((uv_handle_t *)t, &fd) == 0)
				store_sock_keepalive(fd, s->o.keepalive_s);
		}
		if (rc == 0)
			rc = uv_listen((uv_stream_t *)t, s->o.backlog, on_connection);
		if (rc == 0 && *bound == 0) {
			rc = uv_tcp_getsockname(t, (struct sockaddr *)&ss, &len);
			if (rc == 0)
				*port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
		}
		if (rc < 0) {
			s->nlisteners--;
			uv_close((uv_handle_t *)t, on_listener_closed);
			if (*first_err == 0)
				*first_err = rc;
			/* An address family this host lacks is not an error;
			 * the port being taken on any address is. Were a taken
			 * first address skipped, two agents racing for one
			 * port could each keep one family (one IPv4, the other
			 * IPv6) and clients of 127.0.0.1 would find no store
			 * at all: a dynamic rendezvous hung so, silently. */
			if (rc == UV_EADDRINUSE)
				break;
			rc = 0;
			continue;
		}
		(*bound)++;
	}
	freeaddrinfo(ai);
	return rc;
}

int store_server_host_check(const char *host)
{
	size_t n = strlen(host);

	/* strtok_r passes over empty items: "127.0.0.1,,::1" would listen on
	 * both in silence, ",::1" on one, "" (read as a list) on every
	 * interface. */
	if (n == 0 || host[0] == ',' || host[n - 1] == ',' || strstr(host, ",,"))
		return -EINVAL;
	return 0;
}

/* host: NULL, "" or "*" for all interfaces, else one or more names or
 * literals separated by commas ("127.0.0.1,::1"). Returns the port or a
 * negative errno. */
static int listen_all(struct store_server *s, const char *host, int port)
{
	int rc = 0, bound = 0, first_err = 0;
	char *list, *part, *save = NULL;

	if (host == NULL || *host == '\0' || strcmp(host, "*") == 0) {
		rc = listen_host(s, NULL, &port, &bound, &first_err);
	} else {
		if (store_server_host_check(host) < 0)
			return -EINVAL;
		list = strdup(host);
		if (list == NULL)
			return -ENOMEM;
		for (part = strtok_r(list, ",", &save); part && rc == 0;
		     part = strtok_r(NULL, ",", &save))
			rc = listen_host(s, part, &port, &bound, &first_err);
		free(list);
	}
	if (rc < 0)
		return rc;
	return bound ? port : (first_err ? first_err : -EADDRNOTAVAIL);
}

int store_server_io_parse(const char *v, int *io)
{
	if (v == NULL || *v == '\0' || strcmp(v, "auto") == 0)
		*io = STORE_IO_AUTO;
	else if (strcmp(v, "uring") == 0)
		*io = STORE_IO_URING;
	else if (strcmp(v, "uv") == 0)
		*io = STORE_IO_UV;
	else
		return -EINVAL;
	return 0;
}

/* The connections' transport (see store_ring.c), tried once: in auto, a
 * kernel or a seccomp filter refusing io_uring only means libuv streams. */
int store_server_io_prepare(struct store_server *s)
{
	int rc;

	if (s->ring_tried || s->o.io == STORE_IO_UV)
		return 0;
	s->ring_tried = true;
#ifdef DDP_HAVE_URING
	rc = store_ring_open(s);
#else
	rc = -ENOSYS; /* built without liburing */
#endif
	return rc < 0 && s->o.io == STORE_IO_URING ? rc : 0;
}

const char *store_server_io(const struct store_server *s)
{
	return s->io->name;
}

int store_server_start(uv_loop_t *loop, const struct store_server_opts *o, const char *host,
		       int port, struct store_server **out)
{
	struct store_server *s;
	struct store_kv_events ev;
	int rc, attempt;

	if (port < 0 || port > UTIL_PORT_MAX ||
	    (o && (o->io < STORE_IO_AUTO || o->io > STORE_IO_UV)))
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (s == NULL)
		return -ENOMEM;
	s->loop = loop;
	s->io = &store_transport_uv;
	store_server_opts_init(&s->o);
	if (o) {
		s->o = *o;
		if (s->o.max_conns == 0)
			s->o.max_conns = 16384;
		if (s->o.max_key_len == 0 || s->o.max_value_len == 0 || s->o.max_multi_keys == 0 ||
		    s->o.max_conn_buffer == 0) {
			struct store_server_opts d;

			store_server_opts_init(&d);
			s->o.max_key_len = s->o.max_key_len ?: d.max_key_len;
			s->o.max_value_len = s->o.max_value_len ?: d.max_value_len;
			s->o.max_multi_keys = s->o.max_multi_keys ?: d.max_multi_keys;
			s->o.max_conn_buffer = s->o.max_conn_buffer ?: d.max_conn_buffer;
		}
		if (s->o.backlog <= 0)
			s->o.backlog = 65535;
		if (s->o.keepalive_s == 0)
			s->o.keepalive_s = 15;
	}
	s->nofile = nofile_now();
	s->lim.max_key_len = s->o.max_key_len;
	s->lim.max_value_len = s->o.max_value_len;
	s->lim.max_multi_keys = s->o.max_multi_keys;
	s->lim.max_msg_len = s->o.max_conn_buffer;
	s->rbuf = malloc(STORE_READ_CHUNK);
	ev.woken = store_exec_woken;
	ev.watch = store_exec_watch;
	ev.arg = s;
	rc = s->rbuf ? store_kv_new(&ev, &s->kv) : -ENOMEM;
	if (rc < 0) {
		free(s->rbuf);
		free(s);
		return rc;
	}
	/* Not max_value_len: that bounds each APPEND's own bytes (the
	 * parser), as in PyTorch's libuv server; values may grow past it. */
	s->kv_max_appended =
		s->o.max_value_len > STORE_MAX_APPENDED ? s->o.max_value_len : STORE_MAX_APPENDED;
	store_kv_limit_value(s->kv, s->kv_max_appended);
	uv_check_init(loop, &s->flush);
	s->flush.data = s;
	uv_check_start(&s->flush, store_server_flush);
	uv_unref((uv_handle_t *)&s->flush);
	uv_idle_init(loop, &s->unblock);
	s->unblock.data = s;
	uv_unref((uv_handle_t *)&s->unblock);
	s->open_handles += 2;
	/* Port 0 on several addresses: the port the first one got may be taken
	 * on another; try a few fresh ports. */
	for (attempt = 0;; attempt++) {
		rc = listen_all(s, host, port);
		if (!(rc == UV_EADDRINUSE && port == 0 && attempt < 8))
			break;
		close_listeners(s);
	}
	if (rc < 0) {
		s->closing = true;
		close_listeners(s);
		uv_close((uv_handle_t *)&s->flush, on_handle_closed);
		uv_close((uv_handle_t *)&s->unblock, on_handle_closed);
		return rc; /* freed from the loop once the handles are closed */
	}
	s->port = rc;
	/* In auto the ring waits for the first connection: a ddprun whose
	 * workers never use its store does not pay for one (half a
	 * millisecond of a 9 ms launch here). */
	rc = s->o.io == STORE_IO_URING ? store_server_io_prepare(s) : 0;
	if (rc < 0) {
		store_server_close(s, NULL, NULL);
		return rc;
	}
	*out = s;
	return 0;
}

int store_server_port(const struct store_server *s)
{
	return s->port;
}

int store_server_addr(const struct store_server *s, char *buf, size_t len)
{
	struct sockaddr_storage ss;
	int n = sizeof(ss), rc;

	if (s->nlisteners == 0)
		return -ENOTCONN;
	rc = uv_tcp_getsockname(s->listeners[0], (struct sockaddr *)&ss, &n);
	if (rc < 0)
		return rc;
	return store_addr_format((struct sockaddr *)&ss, false, buf, len);
}

void store_server_close(struct store_server *s, void (*done)(void *arg), void *arg)
{
	struct store_conn *c, *next;

	if (s->closing)
		return;
	s->closing = true;
	s->done = done;
	s->done_arg = arg;
	close_listeners(s);
	for (c = s->conns; c; c = next) {
		next = c->next;
		store_conn_close(c, NULL);
	}
	if (s->io->submit != NULL)
		s->io->submit(s); /* the cancels; the ring closes after the last */
	if (s->conns == NULL && s->io->shutdown != NULL)
		s->io->shutdown(s);
	uv_close((uv_handle_t *)&s->flush, on_handle_closed);
	uv_close((uv_handle_t *)&s->unblock, on_handle_closed);
}

int store_server_clear(struct store_server *s, const char *keep)
{
	return store_kv_clear(s->kv, keep);
}

unsigned store_server_num_conns(const struct store_server *s)
{
	return s->nconns;
}

int store_server_raise_nofile(uint64_t *limit)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return -errno;
	if (rl.rlim_cur < rl.rlim_max) {
		rlim_t want = rl.rlim_max;

		rl.rlim_cur = want;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			return -errno;
	}
	*limit = (uint64_t)rl.rlim_cur;
	return 0;
}
