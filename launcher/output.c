/* output: live pumping of worker output, whole lines never mixed (see
 * output.h). */
#include "output.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "util.h"

#define READ_CHUNK (64 * 1024)

/* One loop, one reader at a time: libuv calls alloc_cb then read_cb. */
static char read_buf[READ_CHUNK];
static struct output_buf scratch;
/* Every open stream, so that a backed-up console can pause those it shows. */
static struct output_stream *streams;
static bool paused[2];	       /* per console (output_console_sink) */
static uint64_t paused_ms[2];  /* loop time its pause began */
static uint64_t resumed_ms[2]; /* loop time its pause last ended */
/* Per console (output_console_sink): the stream whose line is open there. */
static struct output_stream *owner[2];
static uint64_t wait_seq;

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

static void buf_drop(struct output_buf *b, size_t n)
{
	if (n == 0)
		return; /* b->p may be NULL then */
	memmove(b->p, b->p + n, b->len - n);
	b->len -= n;
	if (b->len == 0 && b->cap > 4 * READ_CHUNK)
		output_buf_free(b); /* a long line passed: give memory back */
}

/* The first '\n' or '\r' in p[0..n), or NULL. */
static const char *next_eol(const char *p, size_t n)
{
	const char *nl = memchr(p, '\n', n);
	const char *cr = memchr(p, '\r', nl ? (size_t)(nl - p) : n);

	return cr ? cr : nl;
}

int output_prefixed(enum output_col *col, const char *prefix, size_t prefix_len, const char *data,
		    size_t n, struct output_buf *out)
{
	const char *end = data + n;

	while (data < end) {
		const char *e = next_eol(data, (size_t)(end - data));
		size_t len = e ? (size_t)(e - data) + 1 : (size_t)(end - data);
		char c = data[0];

		/* A prefix where a line starts: not before a carriage return
		 * (the line has not started), nor between "\r" and "\n". */
		if (((*col == OUTPUT_BOL || *col == OUTPUT_BROKEN) && c != '\r') ||
		    (*col == OUTPUT_CR && c != '\r' && c != '\n'))
			if (buf_add(out, prefix, prefix_len) != 0)
				return -ENOMEM;
		if (buf_add(out, data, len) != 0)
			return -ENOMEM;
		if (e == NULL)
			*col = OUTPUT_MID;
		else if (*e == '\n')
			*col = OUTPUT_BOL;
		else
			*col = OUTPUT_CR;
		data += len;
	}
	return 0;
}

/* Write p[0..n) of s to the console, with the prefix. */
static void console_put(struct output_stream *s, const char *p, size_t n)
{
	if (n > 0 && s->col == OUTPUT_BROKEN) {
		s->col = OUTPUT_BOL;
		if (p[0] == '\n') { /* ends the line that break_line ended */
			p++;
			n--;
		}
	}
	if (n == 0)
		return;
	if (s->prefix_len == 0) {
		char c = p[n - 1];

		s->col = c == '\n' ? OUTPUT_BOL : c == '\r' ? OUTPUT_CR : OUTPUT_MID;
		output_console_write(s->console_fd, p, n);
		return;
	}
	scratch.len = 0;
	if (output_prefixed(&s->col, s->prefix, s->prefix_len, p, n, &scratch) != 0) {
		/* Out of memory: the bytes without their prefix, not lost. */
		output_console_write(s->console_fd, p, n);
		return;
	}
	output_console_write(s->console_fd, scratch.p, scratch.len);
	if (scratch.cap > 4 * READ_CHUNK)
		output_buf_free(&scratch);
}

static int sink_of(const struct output_stream *s)
{
	return output_console_sink(s->console_fd);
}

static uint64_t now_ms(const struct output_stream *s)
{
	return uv_now(s->pipe.loop);
}

/* Whether o's pipe holds bytes the loop has not read yet. */
static bool unread(const struct output_stream *o)
{
	uv_os_fd_t fd;
	int n = 0;

	return uv_fileno((const uv_handle_t *)&o->pipe, &fd) == 0 && ioctl(fd, FIONREAD, &n) == 0 &&
	       n > 0;
}

/* When a waiting stream may end the open line of o. A pause of their
 * console counts for neither: o could not go on, s did not wait for it
 * (output_pause takes it off s's wait, so that the waits between pauses
 * add up: pauses less than OUTPUT_HOLD_MAX_MS apart held s for ever).
 * Nor is o silent while its pipe holds bytes: the loop, not o, was late
 * (descheduled, or another stream's bytes came first in its poll); o's are
 * read next. */
static uint64_t break_at(const struct output_stream *s, const struct output_stream *o)
{
	uint64_t back = resumed_ms[sink_of(s)], now = now_ms(s);
	uint64_t last = (uint64_t)(o->last_ms < 0 ? 0 : o->last_ms);
	uint64_t idle = (last > back ? last : back) + OUTPUT_HOLD_IDLE_MS;
	uint64_t max = s->wait_since + OUTPUT_HOLD_MAX_MS;

	if (idle <= now && idle < max && unread(o))
		idle = now + OUTPUT_HOLD_IDLE_MS;
	return idle < max ? idle : max;
}

static void on_timer(uv_timer_t *t);

/* Arm s's timer for its next deadline: its incomplete line's, or the end
 * of its wait for another stream's line. */
static void rearm(struct output_stream *s)
{
	uint64_t next = UINT64_MAX, now = now_ms(s);
	struct output_stream *o = s->console_fd >= 0 ? owner[sink_of(s)] : NULL;

	if (!s->open)
		return;
	if (s->due_ms != 0 && !s->ready)
		next = s->due_ms;
	if (s->wait_seq != 0 && o != NULL && o != s) {
		uint64_t b = break_at(s, o);

		if (paused[sink_of(s)] && b <= now)
			b = now + OUTPUT_HOLD_IDLE_MS; /* a paused owner cannot go on */
		if (b < next)
			next = b;
	}
	if (next == UINT64_MAX)
		uv_timer_stop(&s->timer);
	else
		uv_timer_start(&s->timer, on_timer, next > now ? next - now : 0, 0);
}

/* End the open line on console k early: a newline there, not in any file. */
static void break_line(int k)
{
	struct output_stream *o = owner[k];

	owner[k] = NULL;
	if (o == NULL || o->col == OUTPUT_BOL || o->col == OUTPUT_BROKEN)
		return;
	output_console_write(o->console_fd, "\n", 1);
	o->col = OUTPUT_BROKEN;
}

static void pump(struct output_stream *s, bool final);

/* Console k is free: let the streams that waited for it write, first come
 * first served, until one opens a line there again. */
static void wake(int k)
{
	static bool busy;
	struct output_stream *s, *first;

	if (busy)
		return; /* the outer call goes on with the list */
	busy = true;
	while (owner[k] == NULL) {
		first = NULL;
		for (s = streams; s != NULL; s = s->next)
			if (s->wait_seq != 0 && sink_of(s) == k &&
			    (first == NULL || s->wait_seq < first->wait_seq))
				first = s;
		if (first == NULL)
			break;
		first->wait_seq = 0;
		pump(first, false);
	}
	/* Those still waiting wait for the new line from now on. */
	for (s = streams; s != NULL; s = s->next)
		if (s->wait_seq != 0 && sink_of(s) == k) {
			s->wait_since = now_ms(s);
			rearm(s);
		}
	busy = false;
}

/* Write what s holds and may write now (final: all of it, the stream ends). */
static void pump(struct output_stream *s, bool final)
{
	int k = sink_of(s);
	const char *nl;
	size_t whole, n = s->held.len;

	if (n > 0 && s->held.p[n - 1] != '\n' && s->due_ms == 0)
		s->due_ms = now_ms(s) + OUTPUT_PARTIAL_MS; /* an incomplete line waits */
	if (owner[k] != NULL && owner[k] != s) {
		struct output_stream *o = owner[k];

		if (n == 0 || (!final && !s->ready && n < OUTPUT_PARTIAL_MAX &&
			       memchr(s->held.p, '\n', n) == NULL))
			goto out; /* nothing to show yet */
		if (s->wait_seq == 0) {
			s->wait_seq = ++wait_seq;
			s->wait_since = now_ms(s);
		}
		if (!final && n < OUTPUT_HOLD_BYTES && (paused[k] || now_ms(s) < break_at(s, o)))
			goto out;
		break_line(k);
	}
	s->wait_seq = 0;
	nl = n > 0 ? memrchr(s->held.p, '\n', n) : NULL;
	whole = nl ? (size_t)(nl - s->held.p) + 1 : 0;
	console_put(s, s->held.p, whole);
	if (whole > 0 && owner[k] == s)
		owner[k] = NULL; /* its line is complete */
	/* The rest of a line already open goes at once; a new incomplete line
	 * once it is due. */
	if (n > whole && (final || s->ready || owner[k] == s || n - whole >= OUTPUT_PARTIAL_MAX)) {
		console_put(s, s->held.p + whole, n - whole);
		owner[k] = s;
		whole = n;
	}
	if (final && (s->col == OUTPUT_MID || s->col == OUTPUT_CR))
		console_put(s, "\n", 1);
	if (final && owner[k] == s)
		owner[k] = NULL;
	buf_drop(&s->held, whole);
	if (s->held.len == 0 || whole > 0) { /* what is left, if any, is a new line */
		s->ready = false;
		s->due_ms = s->held.len > 0 ? now_ms(s) + OUTPUT_PARTIAL_MS : 0;
	}
out:
	rearm(s);
	if (owner[k] == NULL)
		wake(k);
}

static void on_timer(uv_timer_t *t)
{
	struct output_stream *s = t->data;

	if (s->due_ms != 0 && now_ms(s) >= s->due_ms)
		s->ready = true;
	pump(s, false);
}

static void tail_add(struct output_stream *s, const char *data, size_t n)
{
	if (s->tail == NULL && (s->tail = malloc(OUTPUT_TAIL_MAX)) == NULL)
		return; /* out of memory: the report goes without */
	s->tail_total += n;
	if (n >= OUTPUT_TAIL_MAX) {
		memcpy(s->tail, data + n - OUTPUT_TAIL_MAX, OUTPUT_TAIL_MAX);
		s->tail_len = OUTPUT_TAIL_MAX;
		s->tail_end = 0;
		return;
	}
	while (n > 0) {
		size_t room = OUTPUT_TAIL_MAX - s->tail_end, take = n < room ? n : room;

		memcpy(s->tail + s->tail_end, data, take);
		s->tail_end = (s->tail_end + take) % OUTPUT_TAIL_MAX;
		s->tail_len =
			s->tail_len + take > OUTPUT_TAIL_MAX ? OUTPUT_TAIL_MAX : s->tail_len + take;
		data += take;
		n -= take;
	}
}

size_t output_tail(const struct output_stream *s, char *buf, size_t cap, bool *cut)
{
	size_t n = s->tail_len < cap ? s->tail_len : cap;
	size_t start = (s->tail_end + OUTPUT_TAIL_MAX - n) % OUTPUT_TAIL_MAX;
	size_t first = OUTPUT_TAIL_MAX - start < n ? OUTPUT_TAIL_MAX - start : n;

	*cut = s->tail_total > n;
	if (n == 0)
		return 0; /* s->tail may be NULL */
	memcpy(buf, s->tail + start, first);
	memcpy(buf + first, s->tail, n - first);
	return n;
}

void output_stream_release(struct output_stream *s)
{
	free(s->tail);
	s->tail = NULL;
	s->tail_len = s->tail_end = 0;
	s->tail_total = 0;
}

/* The complete lines for line_cb. */
static void lines(struct output_stream *s, const char *data, size_t n, bool final)
{
	const char *end = data + n, *nl;

	while (data < end) {
		size_t room = OUTPUT_MAX_LINE - s->line.len, len;

		nl = memchr(data, '\n', (size_t)(end - data));
		len = nl ? (size_t)(nl - data) : (size_t)(end - data);
		if (len > room)
			len = room;
		if (buf_add(&s->line, data, len) != 0)
			return; /* out of memory: the filter misses this line */
		data += len;
		if (data < end && *data == '\n')
			data++;
		else if (s->line.len < OUTPUT_MAX_LINE)
			break; /* incomplete */
		s->line_cb(s, s->line.p, s->line.len);
		s->line.len = 0;
	}
	if (final && s->line.len > 0) {
		s->line_cb(s, s->line.p, s->line.len);
		s->line.len = 0;
	}
}

/* A tee file that cannot be written (a full disk, a file size limit) is
 * closed, the console going on; said once, with the file, for the file is
 * no longer exact. */
static void file_failed(struct output_stream *s, int err)
{
	char link[64], path[512], msg[700];
	ssize_t n;
	int len;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", s->file_fd);
	n = readlink(link, path, sizeof(path) - 1);
	path[n > 0 ? n : 0] = '\0';
	len = snprintf(msg, sizeof(msg),
		       "ddprun: warning: cannot write %s: %s (the rest of this stream is not "
		       "written there)\n",
		       n > 0 ? path : "a worker's log file", strerror(-err));
	close(s->file_fd);
	s->file_fd = -1;
	output_console_write(2, msg, len > 0 && (size_t)len < sizeof(msg) ? (size_t)len : 0);
}

static void consume(struct output_stream *s, const char *data, size_t n, bool final)
{
	if (n > 0) {
		int rc;

		s->last_ms = (int64_t)uv_now(s->pipe.loop);
		if (s->file_fd >= 0 && (rc = util_write_all(s->file_fd, data, n)) != 0)
			file_failed(s, rc);
		if (s->keep_tail)
			tail_add(s, data, n);
	}
	if (s->line_cb != NULL)
		lines(s, data, n, final);
	if (s->console_fd < 0)
		return;
	if (buf_add(&s->held, data, n) != 0) {
		/* Out of memory: pass the bytes through rather than lose them. */
		output_console_write(s->console_fd, data, n);
		return;
	}
	pump(s, final);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);
static void stream_close(struct output_stream *s);

static void unlink_stream(struct output_stream *s)
{
	struct output_stream **p;

	for (p = &streams; *p != NULL; p = &(*p)->next)
		if (*p == s) {
			*p = s->next;
			break;
		}
}

/* s's console has no reader any more: s is closed (its worker's next
 * write there fails), or, tee'd, goes on into its file only. */
static void lose_console(struct output_stream *s)
{
	if (s->file_fd < 0) {
		stream_close(s);
		return;
	}
	if (owner[sink_of(s)] == s)
		owner[sink_of(s)] = NULL;
	if (output_paused(s))
		uv_read_start((uv_stream_t *)&s->pipe, on_alloc, on_read);
	s->console_fd = -1;
}

void output_console_gone(int fd)
{
	struct output_stream *s, *next;

	for (s = streams; s != NULL; s = next) {
		next = s->next; /* stream_close unlinks s */
		if (s->console_fd == fd)
			lose_console(s);
	}
}

bool output_pipe_name(const struct output_stream *s, char *link, size_t len)
{
	char path[64];
	uv_os_fd_t fd;
	ssize_t n;

	if (!s->open || uv_fileno((const uv_handle_t *)&s->pipe, &fd) != 0)
		return false;
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, link, len - 1);
	if (n <= 0)
		return false;
	link[n] = '\0';
	return true;
}

bool output_paused(const struct output_stream *s)
{
	return s->open && s->console_fd >= 0 && paused[sink_of(s)];
}

void output_pause(int k, bool on)
{
	struct output_stream *s;
	bool was = paused[k];

	paused[k] = on;
	if (streams == NULL || was == on)
		return;
	if (on)
		paused_ms[k] = uv_now(streams->pipe.loop);
	else
		resumed_ms[k] = uv_now(streams->pipe.loop);
	for (s = streams; s != NULL; s = s->next) {
		if (s->console_fd < 0 || sink_of(s) != k)
			continue;	       /* not shown there */
		if (!on && s->wait_seq != 0) { /* the pause was no part of its wait */
			uint64_t from = s->wait_since > paused_ms[k] ? s->wait_since : paused_ms[k];

			if (resumed_ms[k] > from)
				s->wait_since += resumed_ms[k] - from;
		}
		if (on)
			uv_read_stop((uv_stream_t *)&s->pipe);
		else
			uv_read_start((uv_stream_t *)&s->pipe, on_alloc, on_read);
	}
}

static void on_closed(uv_handle_t *h)
{
	struct output_stream *s = h->data;

	if (--s->closing > 0)
		return;
	output_buf_free(&s->held);
	output_buf_free(&s->line);
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
	s->wait_seq = 0;
	if (s->console_fd >= 0 && owner[sink_of(s)] == s)
		owner[sink_of(s)] = NULL;
	unlink_stream(s);
	s->closing = 2;
	uv_close((uv_handle_t *)&s->timer, on_closed);
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

	s->held = (struct output_buf){0};
	s->line = (struct output_buf){0};
	s->open = false;
	s->col = OUTPUT_BOL;
	s->ready = false;
	s->due_ms = s->wait_seq = s->wait_since = 0;
	s->last_ms = -1;
	s->tail_len = s->tail_end = 0;
	s->tail_total = 0;
	rc = uv_pipe_init(loop, &s->pipe, 0);
	if (rc != 0) {
		close(fd);
		if (s->file_fd >= 0)
			close(s->file_fd);
		s->file_fd = -1;
		return rc;
	}
	uv_timer_init(loop, &s->timer); /* cannot fail */
	s->pipe.data = s;
	s->timer.data = s;
	s->open = true;
	s->next = streams;
	streams = s;
	rc = uv_pipe_open(&s->pipe, fd);
	if (rc != 0)
		close(fd); /* not taken by libuv */
	else if (!output_paused(s))
		rc = uv_read_start((uv_stream_t *)&s->pipe, on_alloc, on_read);
	if (rc != 0)
		stream_close(s); /* closed_cb still runs, from the loop */
	else if (s->console_fd >= 0 && output_console_reader_gone(s->console_fd))
		lose_console(s); /* a restart's workers: that reader is gone for them too */
	return 0;
}

void output_stream_drain(struct output_stream *s)
{
	uv_os_fd_t fd;

	if (!s->open || uv_fileno((uv_handle_t *)&s->pipe, &fd) != 0)
		return;
	for (;;) {
		ssize_t r = read(fd, read_buf, sizeof(read_buf));

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break; /* EOF, or EAGAIN: nothing more now */
		consume(s, read_buf, (size_t)r, false);
	}
}

void output_stream_finish(struct output_stream *s)
{
	if (!s->open)
		return;
	uv_read_stop((uv_stream_t *)&s->pipe);
	output_stream_drain(s);
	stream_close(s);
}

int64_t output_last_line_ms(const struct output_stream *s)
{
	return s->last_ms;
}
