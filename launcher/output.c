/* output: line-atomic pumping of worker output (see output.h). */
#include "output.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

#define READ_CHUNK (64 * 1024)

/* One loop, one reader at a time: libuv calls alloc_cb then read_cb. */
static char read_buf[READ_CHUNK];
static struct output_buf scratch;
/* Every open stream, so that a backed-up console can pause them all. */
static struct output_stream *streams;
static bool paused;

void output_buf_free(struct output_buf *b)
{
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
}

static int buf_reserve(struct output_buf *b, size_t extra)
{
	size_t need = b->len + extra;
	size_t cap = b->cap ? b->cap : 256;
	char *p;

	if (need <= b->cap)
		return 0;
	while (cap < need)
		cap *= 2;
	p = realloc(b->p, cap);
	if (p == NULL)
		return -ENOMEM;
	b->p = p;
	b->cap = cap;
	return 0;
}

static int buf_add(struct output_buf *b, const char *s, size_t n)
{
	if (n == 0)
		return 0; /* s may be NULL then: memcpy must not see it */
	if (buf_reserve(b, n) != 0)
		return -ENOMEM;
	memcpy(b->p + b->len, s, n);
	b->len += n;
	return 0;
}

/* Emit one line (without its '\n') with the prefix. */
static int emit(struct output_buf *out, const char *prefix, size_t plen, const char *a, size_t alen,
		const char *b, size_t blen)
{
	if (buf_reserve(out, plen + alen + blen + 1) != 0)
		return -ENOMEM;
	buf_add(out, prefix, plen);
	buf_add(out, a, alen);
	buf_add(out, b, blen);
	buf_add(out, "\n", 1);
	return 0;
}

int output_lines(struct output_buf *pending, const char *prefix, size_t prefix_len,
		 const char *data, size_t n, bool final, struct output_buf *out)
{
	const char *end = data + n;
	const char *nl;

	while (data < end && (nl = memchr(data, '\n', (size_t)(end - data))) != NULL) {
		if (emit(out, prefix, prefix_len, pending->p, pending->len, data,
			 (size_t)(nl - data)) != 0)
			return -ENOMEM;
		pending->len = 0;
		data = nl + 1;
	}
	while (pending->len + (size_t)(end - data) > OUTPUT_MAX_LINE) {
		/* An endless line: cut it so memory stays bounded. */
		size_t take = OUTPUT_MAX_LINE - pending->len;

		if (emit(out, prefix, prefix_len, pending->p, pending->len, data, take) != 0)
			return -ENOMEM;
		pending->len = 0;
		data += take;
	}
	if (buf_add(pending, data, (size_t)(end - data)) != 0)
		return -ENOMEM;
	if (final && pending->len > 0) {
		if (emit(out, prefix, prefix_len, pending->p, pending->len, NULL, 0) != 0)
			return -ENOMEM;
		pending->len = 0;
	}
	return 0;
}

static void consume(struct output_stream *s, const char *data, size_t n, bool final)
{
	if (n > 0) /* for the hang monitor (hang.c): output is progress */
		s->last_ms = (int64_t)uv_now(s->pipe.loop);
	if (s->file_fd >= 0 && n > 0 && util_write_all(s->file_fd, data, n) != 0) {
		close(s->file_fd); /* disk full or similar: keep the console going */
		s->file_fd = -1;
	}
	if (s->console_fd < 0)
		return;
	scratch.len = 0;
	if (output_lines(&s->pending, s->prefix, s->prefix_len, data, n, final, &scratch) != 0) {
		/* Out of memory: pass the bytes through rather than lose them. */
		output_console_write(s->console_fd, data, n);
		return;
	}
	if (scratch.len > 0)
		output_console_write(s->console_fd, scratch.p, scratch.len);
	if (scratch.cap > 4 * READ_CHUNK) /* a long line passed: give memory back */
		output_buf_free(&scratch);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);

static void unlink_stream(struct output_stream *s)
{
	struct output_stream **p;

	for (p = &streams; *p != NULL; p = &(*p)->next)
		if (*p == s) {
			*p = s->next;
			break;
		}
}

void output_pause(bool on)
{
	struct output_stream *s;

	paused = on;
	for (s = streams; s != NULL; s = s->next) {
		if (on)
			uv_read_stop((uv_stream_t *)&s->pipe);
		else
			uv_read_start((uv_stream_t *)&s->pipe, on_alloc, on_read);
	}
}

static void on_closed(uv_handle_t *h)
{
	struct output_stream *s = h->data;

	output_buf_free(&s->pending);
	if (s->closed_cb != NULL)
		s->closed_cb(s);
}

static void stream_close(struct output_stream *s)
{
	if (!s->open)
		return;
	consume(s, NULL, 0, true);
	if (s->file_fd >= 0)
		close(s->file_fd);
	s->file_fd = -1;
	s->open = false;
	unlink_stream(s);
	uv_close((uv_handle_t *)&s->pipe, on_closed);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	buf->base = read_buf;
	buf->len = sizeof(read_buf);
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
	struct output_stream *s = st->data;

	if (nread > 0)
		consume(s, buf->base, (size_t)nread, false);
	else if (nread < 0)
		stream_close(s); /* UV_EOF, or an error that ends the stream */
}

int output_stream_start(uv_loop_t *loop, struct output_stream *s, int fd)
{
	int rc;

	s->pending = (struct output_buf){0};
	s->open = false;
	s->last_ms = -1;
	rc = uv_pipe_init(loop, &s->pipe, 0);
	if (rc != 0) {
		close(fd);
		if (s->file_fd >= 0)
			close(s->file_fd);
		s->file_fd = -1;
		return rc;
	}
	s->pipe.data = s;
	s->open = true;
	s->next = streams;
	streams = s;
	rc = uv_pipe_open(&s->pipe, fd);
	if (rc != 0)
		close(fd); /* not taken by libuv */
	else if (!paused)
		rc = uv_read_start((uv_stream_t *)&s->pipe, on_alloc, on_read);
	if (rc != 0)
		stream_close(s); /* closed_cb still runs, from the loop */
	return 0;
}

void output_stream_finish(struct output_stream *s)
{
	uv_os_fd_t fd;

	if (!s->open)
		return;
	uv_read_stop((uv_stream_t *)&s->pipe);
	if (uv_fileno((uv_handle_t *)&s->pipe, &fd) == 0) {
		for (;;) {
			ssize_t r = read(fd, read_buf, sizeof(read_buf));

			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				break; /* EOF, or EAGAIN: nothing more now */
			consume(s, read_buf, (size_t)r, false);
		}
	}
	stream_close(s);
}

int64_t output_last_line_ms(const struct output_stream *s)
{
	return s->last_ms;
}
