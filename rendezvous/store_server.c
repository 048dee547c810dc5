/* store_server: listening, connections, bounded buffers and the parse loop.
 *
 * Every read lands in one shared 64 KiB buffer and is parsed in place; only
 * the tail of a partial message is copied into the connection (so an idle
 * connection costs no buffer, and a client stalled mid-message holds only its
 * own bytes). Replies accumulate per connection during a loop iteration and
 * are written once, after the poll phase (a uv_check handle). A connection
 * whose unsent replies pass max_conn_buffer is not read (and its buffered
 * requests not executed) until they drain; one that passes twice that
 * through pushes it did not ask for (watch events) is closed. */
#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "store_addr.h"
#include "store_server_int.h"

struct wreq {
	uv_write_t req;
	struct store_conn *c;
	uint8_t *data;
	size_t len;
};

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

size_t store_conn_out_bytes(const struct store_conn *c)
{
	return c->out.len + c->out_inflight;
}

void store_conn_mark_dirty(struct store_conn *c)
{
	if (c->dirty || c->closing)
		return;
	c->dirty = true;
	c->dirty_next = c->s->dirty;
	c->s->dirty = c;
}

static void maybe_all_closed(struct store_server *s)
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

static void on_conn_closed(uv_handle_t *h)
{
	struct store_conn *c = h->data;
	struct store_server *s = c->s;

	if (c->prev)
		c->prev->next = c->next;
	else if (s->conns == c)
		s->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	if (c->counted)
		s->nconns--;
	if (c->dirty) {
		struct store_conn **pp;

		for (pp = &s->dirty; *pp; pp = &(*pp)->dirty_next)
			if (*pp == c) {
				*pp = c->dirty_next;
				break;
			}
	}
	free(c->in);
	store_buf_free(&c->out);
	free(c);
	s->open_handles--;
	maybe_all_closed(s);
}

void store_conn_close(struct store_conn *c, const char *reason)
{
	if (c->closing)
		return;
	if (reason)
		store_srv_log(c->s, "closing connection from %s: %s", c->peer, reason);
	/* Before marking closing, so that the on-close SET can wake others. */
	store_exec_conn_gone(c, !c->s->closing);
	c->closing = true;
	uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

/* ---- writing -------------------------------------------------------------------- */

static void on_write(uv_write_t *req, int status);

static void conn_flush(struct store_conn *c)
{
	struct wreq *w;
	uv_buf_t b;
	int n;

	if (c->out.len == 0)
		return;
	b = uv_buf_init((char *)c->out.p, (unsigned)c->out.len);
	n = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
	if (n == (int)c->out.len) {
		c->out.len = 0;
		return;
	}
	if (n < 0 && n != UV_EAGAIN) {
		store_conn_close(c, NULL);
		return;
	}
	if (n < 0)
		n = 0;
	/* The rest travels with its own request; the buffer goes with it. */
	w = malloc(sizeof(*w));
	if (w == NULL) {
		store_conn_close(c, "out of memory");
		return;
	}
	w->c = c;
	w->data = c->out.p;
	w->len = c->out.len - (size_t)n;
	b = uv_buf_init((char *)c->out.p + n, (unsigned)w->len);
	store_buf_init(&c->out);
	if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_write) < 0) {
		free(w->data);
		free(w);
		store_conn_close(c, NULL);
		return;
	}
	c->out_inflight += w->len;
}

static void conn_resume(struct store_conn *c);

static void on_write(uv_write_t *req, int status)
{
	struct wreq *w = (struct wreq *)req;
	struct store_conn *c = w->c;

	c->out_inflight -= w->len;
	free(w->data);
	free(w);
	if (c->closing)
		return;
	if (status < 0) {
		store_conn_close(c, NULL);
		return;
	}
	if (c->paused && store_conn_out_bytes(c) <= c->s->o.max_conn_buffer / 2)
		conn_resume(c);
}

static void on_flush(uv_check_t *h)
{
	struct store_server *s = h->data;

	while (s->dirty) {
		struct store_conn *c = s->dirty;

		s->dirty = c->dirty_next;
		c->dirty = false;
		if (c->closing)
			continue;
		if (c->doomed) {
			store_conn_close(c, "not reading its replies (buffer limit)");
			continue;
		}
		conn_flush(c);
		/* Written at once: a paused connection may go on. */
		if (!c->closing && c->paused && store_conn_out_bytes(c) <= s->o.max_conn_buffer / 2)
			conn_resume(c);
	}
}

/* ---- reading -------------------------------------------------------------------- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	struct store_conn *c = h->data;
	size_t want;

	/* A large message in progress reads straight into its own buffer. */
	if (c->in_len > 0 && c->parser.need > c->in_len + STORE_READ_CHUNK) {
		want = c->parser.need + STORE_READ_CHUNK;
		if (want > c->in_cap) {
			uint8_t *n = realloc(c->in, want);

			if (n == NULL) {
				*buf = uv_buf_init(NULL, 0); /* read_cb gets UV_ENOBUFS */
				return;
			}
			c->in = n;
			c->in_cap = want;
		}
		*buf = uv_buf_init((char *)c->in + c->in_len, (unsigned)(c->in_cap - c->in_len));
		return;
	}
	*buf = uv_buf_init((char *)c->s->rbuf, STORE_READ_CHUNK);
}

static int keep_tail(struct store_conn *c, const uint8_t *p, size_t n)
{
	if (p == c->in) {
		c->in_len = n;
		return 0;
	}
	if (p > c->in && p < c->in + c->in_cap) {
		memmove(c->in, p, n);
		c->in_len = n;
		return 0;
	}
	if (n > c->in_cap) {
		size_t cap = n < 4096 ? 4096 : n;
		uint8_t *nb = malloc(cap);

		if (nb == NULL)
			return -ENOMEM;
		free(c->in);
		c->in = nb;
		c->in_cap = cap;
	}
	memmove(c->in, p, n);
	c->in_len = n;
	return 0;
}

/* Execute every complete message in p[0..n); keep the rest in c->in. */
static void process(struct store_conn *c, const uint8_t *p, size_t n)
{
	struct store_req r;
	size_t pos = 0;
	int rc;

	while (pos < n && !c->closing) {
		if (store_conn_out_bytes(c) > c->s->o.max_conn_buffer) {
			c->paused = true;
			if (c->reading) {
				uv_read_stop((uv_stream_t *)&c->tcp);
				c->reading = false;
			}
			break;
		}
		rc = store_parse(&c->parser, p + pos, n - pos, &r);
		if (rc == 0)
			break;
		if (rc < 0) {
			store_conn_close(c, c->parser.err);
			return;
		}
		store_exec(c, &r);
		pos += r.len;
	}
	if (c->closing)
		return;
	if (keep_tail(c, p + pos, n - pos) < 0) {
		store_conn_close(c, "out of memory");
		return;
	}
	/* Give back a large buffer once its message is done. */
	if (c->in_len == 0 && c->in_cap > STORE_READ_CHUNK) {
		free(c->in);
		c->in = NULL;
		c->in_cap = 0;
	}
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
	struct store_conn *c = st->data;
	struct store_server *s = c->s;

	if (nread < 0) {
		store_conn_close(c, nread == UV_EOF || nread == UV_ECONNRESET
					    ? NULL
					    : (nread == UV_ENOBUFS ? "out of memory"
								   : uv_strerror((int)nread)));
		return;
	}
	if (nread == 0 || c->closing)
		return;
	if ((uint8_t *)buf->base != s->rbuf) {
		c->in_len += (size_t)nread; /* read in place */
		process(c, c->in, c->in_len);
		return;
	}
	if (c->in_len == 0) {
		process(c, s->rbuf, (size_t)nread);
		return;
	}
	if (c->in_len + (size_t)nread > c->in_cap) {
		size_t cap = c->in_cap ? c->in_cap : 4096;
		uint8_t *nb;

		while (cap < c->in_len + (size_t)nread)
			cap *= 2;
		nb = realloc(c->in, cap);
		if (nb == NULL) {
			store_conn_close(c, "out of memory");
			return;
		}
		c->in = nb;
		c->in_cap = cap;
	}
	memcpy(c->in + c->in_len, s->rbuf, (size_t)nread);
	c->in_len += (size_t)nread;
	process(c, c->in, c->in_len);
}

static void conn_resume(struct store_conn *c)
{
	c->paused = false;
	if (c->in_len > 0)
		process(c, c->in, c->in_len);
	if (!c->closing && !c->paused && !c->reading) {
		if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0) {
			store_conn_close(c, NULL);
			return;
		}
		c->reading = true;
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

static void on_connection(uv_stream_t *ls, int status)
{
	struct store_server *s = ls->data;
	struct store_conn *c;
	struct sockaddr_storage ss;
	int len = sizeof(ss);
	char why[128];

	if (status < 0) {
		snprintf(why, sizeof(why), "accept failed: %s%s", uv_strerror(status),
			 status == UV_EMFILE || status == UV_ENFILE
				 ? " (raise the open-files limit: ulimit -n)"
				 : "");
		log_refusal(s, why);
		return;
	}
	c = calloc(1, sizeof(*c));
	if (c == NULL)
		return;
	c->s = s;
	snprintf(c->peer, sizeof(c->peer), "?");
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
		uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
		return;
	}
	if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) == 0)
		store_addr_format((struct sockaddr *)&ss, true, c->peer, sizeof(c->peer));
	if (s->nconns >= s->o.max_conns) {
		snprintf(why, sizeof(why), "connection limit (%u) reached", s->o.max_conns);
		log_refusal(s, why);
		c->closing = true;
		uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
		return;
	}
	c->counted = true;
	s->nconns++;
	uv_tcp_nodelay(&c->tcp, 1);
	if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0) {
		store_conn_close(c, NULL);
		return;
	}
	c->reading = true;
}

/* ---- lifecycle ------------------------------------------------------------------- */

static void on_handle_closed(uv_handle_t *h)
{
	struct store_server *s = h->data;

	s->open_handles--;
	maybe_all_closed(s);
}

static void on_listener_closed(uv_handle_t *h)
{
	struct store_server *s = h->data;

	free(h);
	s->open_handles--;
	maybe_all_closed(s);
}

static void close_listeners(struct store_server *s)
{
	int i;

	for (i = 0; i < s->nlisteners; i++)
		uv_close((uv_handle_t *)s->listeners[i], on_listener_closed);
	s->nlisteners = 0;
}

/* Bind and listen on every address of host (all interfaces when NULL/""/"*"),
 * all on one port. Returns the port or a negative errno. */
static int listen_all(struct store_server *s, const char *host, int port)
{
	struct addrinfo *ai = NULL, *a;
	int rc, bound = 0, first_err = 0;
	bool any = host == NULL || *host == '\0' || strcmp(host, "*") == 0;

	rc = store_addr_resolve(any ? NULL : host, port, true, &ai, NULL);
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
		/* Later addresses take the port the first one got (sin_port
		 * and sin6_port share their offset). */
		if (bound)
			((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)port);
		uv_tcp_init(s->loop, t);
		t->data = s;
		s->open_handles++;
		s->listeners[s->nlisteners++] = t;
		rc = uv_tcp_bind(t, (struct sockaddr *)&ss,
				 a->ai_family == AF_INET6 ? UV_TCP_IPV6ONLY : 0);
		if (rc == 0)
			rc = uv_listen((uv_stream_t *)t, s->o.backlog, on_connection);
		if (rc == 0 && !bound) {
			rc = uv_tcp_getsockname(t, (struct sockaddr *)&ss, &len);
			if (rc == 0)
				port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
		}
		if (rc < 0) {
			s->nlisteners--;
			uv_close((uv_handle_t *)t, on_listener_closed);
			if (first_err == 0)
				first_err = rc;
			/* An address family this host lacks is not an error;
			 * the port being taken on a further address is. */
			if (rc == UV_EADDRINUSE && bound)
				break;
			continue;
		}
		bound++;
	}
	freeaddrinfo(ai);
	if (rc == UV_EADDRINUSE && bound)
		return rc;
	return bound ? port : (first_err ? first_err : -EADDRNOTAVAIL);
}

int store_server_start(uv_loop_t *loop, const struct store_server_opts *o, const char *host,
		       int port, struct store_server **out)
{
	struct store_server *s;
	struct store_kv_events ev;
	int rc, attempt;

	if (port < 0 || port > 65535)
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (s == NULL)
		return -ENOMEM;
	s->loop = loop;
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
	}
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
	uv_check_init(loop, &s->flush);
	s->flush.data = s;
	uv_check_start(&s->flush, on_flush);
	uv_unref((uv_handle_t *)&s->flush);
	s->open_handles++;
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
		return rc; /* freed from the loop once the handles are closed */
	}
	s->port = rc;
	*out = s;
	return 0;
}

int store_server_port(const struct store_server *s)
{
	return s->port;
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
	uv_close((uv_handle_t *)&s->flush, on_handle_closed);
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
