/* store_conn_uv: the store server's connections over libuv streams, the
 * transport every build has (store_transport.h). A reply batch is tried with
 * one uv_try_write; what the socket does not take at once travels in its own
 * uv_write request, which owns the buffer. Reads land where store_conn.c
 * says (store_conn_read_buf). */
#include <stdlib.h>

#include "store_server_int.h"
#include "store_transport.h"

struct wreq {
	uv_write_t req;
	struct store_conn *c;
	uint8_t *data;
	size_t len;
};

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
	store_conn_written(c);
}

static void stream_write(struct store_conn *c)
{
	struct wreq *w;
	uv_buf_t b = uv_buf_init((char *)c->out.p, (unsigned)c->out.len);
	int n = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);

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

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	size_t len;
	uint8_t *p = store_conn_read_buf(h->data, &len);

	/* NULL: read_cb gets UV_ENOBUFS. */
	*buf = p ? uv_buf_init((char *)p, (unsigned)len) : uv_buf_init(NULL, 0);
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
	struct store_conn *c = st->data;

	if (nread < 0) {
		store_conn_close(c, nread == UV_EOF || nread == UV_ECONNRESET
					    ? NULL
					    : (nread == UV_ENOBUFS ? "out of memory"
								   : uv_strerror((int)nread)));
		return;
	}
	store_conn_read_done(c, (const uint8_t *)buf->base, (size_t)nread);
}

static int stream_start_read(struct store_conn *c)
{
	return uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

static void stream_stop_read(struct store_conn *c)
{
	uv_read_stop((uv_stream_t *)&c->tcp);
}

static void stream_close(struct store_conn *c)
{
	uv_close((uv_handle_t *)&c->tcp, store_conn_on_closed);
}

const struct store_transport_ops store_transport_uv = {
	.name = "libuv",
	.start_read = stream_start_read,
	.stop_read = stream_stop_read,
	.write = stream_write,
	.close = stream_close,
};
