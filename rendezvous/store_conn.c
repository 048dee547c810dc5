/* store_conn: one client connection of the store server -- reading into
 * bounded buffers, the parse loop, batched replies, back-pressure and close.
 *
 * Every read lands in the server's shared 64 KiB buffer and is parsed in
 * place; only the tail of a partial message is copied into the connection (so
 * an idle connection costs no buffer, and a client stalled mid-message holds
 * only its own bytes). Replies accumulate per connection during a loop
 * iteration and are written once, after the poll phase (store_server_flush,
 * a uv_check handle). A connection whose unsent replies pass max_conn_buffer
 * is not read (and its buffered requests not executed) until they drain; one
 * that passes twice that through pushes it did not ask for (watch events) is
 * closed. A single reply may pass max_conn_buffer only as far as the data in
 * the store goes (store_exec refuses more before building it), and a
 * MULTI_SET comes from the parser pair by pair, so what a connection holds
 * stays near max_conn_buffer plus one reply of the store's data, whatever it
 * asks for.
 * The bytes themselves move through the server's transport (store_transport.h:
 * libuv streams or io_uring); nothing here knows which. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_addr.h"
#include "store_server_int.h"

size_t store_conn_out_bytes(const struct store_conn *c)
{
	return c->out.len + c->out_inflight;
}

static void unblock_noop(uv_idle_t *h)
{
	(void)h;
}

void store_server_wake(struct store_server *s)
{
	if (!s->closing)
		uv_idle_start(&s->unblock, unblock_noop);
}

void store_conn_mark_dirty(struct store_conn *c)
{
	if (c->dirty || c->closing)
		return;
	if (c->s->dirty == NULL)
		store_server_wake(c->s);
	c->dirty = true;
	c->dirty_next = c->s->dirty;
	c->s->dirty = c;
}

void store_conn_on_closed(uv_handle_t *h)
{
	struct store_conn *c = h->data;
	struct store_server *s = c->s;
	bool counted;

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
	counted = c->counted;
	free(c->in);
	store_buf_free(&c->out);
	store_buf_free(&c->snd);
	free(c);
	s->open_handles--;
	if (s->closing && s->conns == NULL && s->io->shutdown != NULL)
		s->io->shutdown(s);
	/* Before maybe_free: the callback may close the server, which then
	 * still has handles to close. */
	if (counted && !s->closing && s->o.conn_closed != NULL)
		s->o.conn_closed(s->o.conn_closed_arg);
	store_server_maybe_free(s);
}

/* The peer's address, looked up only when a log line needs it (a syscall per
 * connection otherwise, at every rendezvous). */
const char *store_conn_peer(struct store_conn *c)
{
	struct sockaddr_storage ss;
	int len = sizeof(ss);

	if (c->peer[0] == '\0' &&
	    (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) < 0 ||
	     store_addr_format((struct sockaddr *)&ss, true, c->peer, sizeof(c->peer)) < 0))
		snprintf(c->peer, sizeof(c->peer), "?");
	return c->peer;
}

void store_conn_close(struct store_conn *c, const char *reason)
{
	if (c->closing)
		return;
	if (reason && c->s->o.log_prefix)
		store_srv_log(c->s, "closing connection from %s: %s", store_conn_peer(c), reason);
	/* Before marking closing, so that the on-close SET can wake others. */
	store_exec_conn_gone(c, !c->s->closing);
	c->closing = true;
	c->s->io->close(c);
}

/* ---- writing -------------------------------------------------------------------- */

void store_conn_written(struct store_conn *c)
{
	if (c->paused && store_conn_out_bytes(c) <= c->s->o.max_conn_buffer / 2)
		store_conn_resume(c);
}

static void flush_dirty(struct store_server *s)
{
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
		if (c->out.len > 0)
			s->io->write(c);
		/* Written at once: a paused connection may go on. */
		if (!c->closing)
			store_conn_written(c);
	}
}

void store_server_flush(uv_check_t *h)
{
	struct store_server *s = h->data;
	int pass;

	flush_dirty(s);
	/* A batching transport (the ring): one system call hands over every
	 * write of the batch; what completes at once may free room for replies
	 * held back. A few passes, then the next iteration (the idle handle
	 * keeps poll from blocking). */
	for (pass = 0; s->io->submit != NULL && pass < 4; pass++) {
		s->io->submit(s);
		if (s->dirty == NULL)
			break;
		flush_dirty(s);
	}
	if (s->dirty == NULL && (s->io->idle == NULL || s->io->idle(s)))
		uv_idle_stop(&s->unblock);
}

/* ---- reading -------------------------------------------------------------------- */

uint8_t *store_conn_read_buf(struct store_conn *c, size_t *len)
{
	size_t want;

	/* A large message in progress reads straight into its own buffer. */
	if (c->in_len > 0 && c->parser.need > c->in_len + STORE_READ_CHUNK) {
		want = c->parser.need + STORE_READ_CHUNK;
		if (want > c->in_cap) {
			uint8_t *n = realloc(c->in, want);

			if (n == NULL)
				return NULL;
			c->in = n;
			c->in_cap = want;
		}
		*len = c->in_cap - c->in_len;
		return c->in + c->in_len;
	}
	*len = STORE_READ_CHUNK;
	return c->s->rbuf;
}

static int keep_tail(struct store_conn *c, const uint8_t *p, size_t n)
{
	if (n == 0 || p == c->in) {
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
				c->s->io->stop_read(c);
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

void store_conn_input(struct store_conn *c, const uint8_t *data, size_t n)
{
	if (n == 0 || c->closing)
		return;
	if (c->in_len == 0) {
		process(c, data, n);
		return;
	}
	if (c->in_len + n > c->in_cap && store_grow(&c->in, &c->in_cap, c->in_len + n, 4096) < 0) {
		store_conn_close(c, "out of memory");
		return;
	}
	memcpy(c->in + c->in_len, data, n);
	c->in_len += n;
	process(c, c->in, c->in_len);
}

void store_conn_read_done(struct store_conn *c, const uint8_t *buf, size_t n)
{
	if (n == 0 || c->closing)
		return;
	if (buf != c->s->rbuf) {
		c->in_len += n; /* read in place */
		process(c, c->in, c->in_len);
		return;
	}
	store_conn_input(c, c->s->rbuf, n);
}

void store_conn_resume(struct store_conn *c)
{
	c->paused = false;
	if (c->in_len > 0)
		process(c, c->in, c->in_len);
	if (!c->closing && !c->paused && !c->reading && store_conn_start_reading(c) < 0)
		store_conn_close(c, NULL);
}

int store_conn_start_reading(struct store_conn *c)
{
	int rc = c->s->io->start_read(c);

	c->reading = rc == 0;
	return rc;
}
