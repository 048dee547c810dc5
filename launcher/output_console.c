/* output_console: ddprun's own stdout and stderr, written without ever
 * blocking the loop (see output.h).
 *
 * A pipe or terminal on fd 1/2 is reopened through /proc/self/fd with
 * O_NONBLOCK: a private open file description, so the flag never touches the
 * description ddprun shares with its parent (what uv_tty_init does for ttys).
 * What the reader is not ready for waits in a FIFO of chunks per console
 * (output_console_sink): one for both fds when they are the same file, so
 * that lines keep their order and are never split between writers, else one
 * each, so that a stdout nobody reads does not hold back stderr (the
 * workers' errors, ddprun's failure report). Above CONSOLE_HIGH queued bytes
 * the workers' pipes shown on that console are paused (they then block on
 * their own writes, as they would on a slow terminal); below CONSOLE_LOW
 * they resume. A reader that goes away (EPIPE) drops that fd's output, and
 * the workers' streams shown only there are closed (output_console_gone).
 *
 * A socket (journald's stdout of a service, a harness's socketpair), or a
 * pipe that cannot be reopened (another user's, under sudo or runuser), is
 * written with RWF_NOWAIT instead, which never blocks either and leaves the
 * shared description's flags alone; libuv's poll would set O_NONBLOCK on it,
 * so a timer tries again while output waits. Where the kernel does not take
 * RWF_NOWAIT (a terminal) the write blocks, as it did. */
#include "output.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define CONSOLE_HIGH (8u << 20)
#define CONSOLE_LOW  (1u << 20)
/* How often a console written with RWF_NOWAIT is tried again while its
 * reader is behind. */
#define NOWAIT_RETRY_MS 10

struct chunk {
	struct chunk *next;
	int fd;
	size_t off, len;
	char data[];
};

static struct {
	bool open;
	int wfd[3];	  /* where output for 1 and 2 is written */
	bool nonblock[3]; /* wfd is our own non-blocking description */
	bool nowait[3];	  /* else wfd is written with RWF_NOWAIT */
	uv_timer_t retry; /* tries the RWF_NOWAIT ones again */
	bool retry_init;
	bool gone[3];	       /* the reader went away, or a write failed */
	bool epipe[3];	       /* the reader went away */
	bool told[3];	       /* output_console_gone(fd) was called */
	uv_timer_t gone_timer; /* calls it from the loop, not inside a write */
	bool gone_init;
	uv_poll_t poll[3]; /* on wfd, while output for it waits */
	bool poll_init[3];
	bool polling[3];
	bool split; /* fd 1 and 2 are different files */
	struct queue {
		struct chunk *head, *tail;
		size_t backlog;
		bool paused;
	} q[2]; /* per console (output_console_sink) */
} con = {.wfd = {-1, 1, 2}};

/* 1 written all, 0 would block (c->off advanced), -1 reader gone. */
static int write_some(int fd, const char *p, size_t len, size_t *off)
{
	while (*off < len) {
		struct iovec v = {.iov_base = (char *)p + *off, .iov_len = len - *off};
		ssize_t w = con.nowait[fd] ? pwritev2(con.wfd[fd], &v, 1, -1, RWF_NOWAIT)
					   : write(con.wfd[fd], p + *off, len - *off);

		if (w < 0 && errno == EOPNOTSUPP && con.nowait[fd]) {
			con.nowait[fd] = false; /* a terminal: blocking writes, as before */
			continue;
		}

		if (w > 0) {
			*off += (size_t)w;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN) {
			if (con.nonblock[fd] || con.nowait[fd])
				return 0;
			/* Somebody made the shared description non-blocking. */
			struct pollfd pfd = {.fd = con.wfd[fd], .events = POLLOUT};

			poll(&pfd, 1, -1);
			continue;
		}
		return -1; /* EPIPE and the like */
	}
	return 1;
}

static void on_gone(uv_timer_t *t)
{
	for (int f = 1; f <= 2; f++)
		if (con.epipe[f] && !con.told[f]) {
			con.told[f] = true;
			output_console_gone(f);
		}
}

/* Console fd's writes failed with errno (saved by write_some): its output
 * is dropped from now on. A reader that went away (EPIPE: `| head`) is
 * normal; any other failure (a full disk, a file size limit) is said, once,
 * on stderr when that is another file still written. */
static void lost(int fd, int err)
{
	char msg[200];
	int n;

	con.gone[fd] = true;
	if (err == EPIPE) {
		/* One file for both (`2>&1 | head`): both are gone. The streams
		 * are closed from the loop: the write that failed may be one
		 * stream's, in the middle of its own bytes. */
		for (int f = 1; f <= 2; f++)
			if (f == fd || !con.split)
				con.gone[f] = con.epipe[f] = true;
		if (con.gone_init)
			uv_timer_start(&con.gone_timer, on_gone, 0, 0);
	}
	if (err == EPIPE || fd != 1 || !con.split || con.gone[2])
		return;
	n = snprintf(msg, sizeof(msg),
		     "ddprun: warning: cannot write to standard output: %s (the workers' output "
		     "there is dropped from now on)\n",
		     strerror(err));
	output_console_write(2, msg, (size_t)n);
}

static void set_polling(int fd, bool on);
static void flush_queue(int k);

static void on_writable(uv_poll_t *h, int status, int events)
{
	flush_queue(output_console_sink(h == &con.poll[1] ? 1 : 2));
}

static void on_retry(uv_timer_t *t)
{
	for (int k = 0; k < 2; k++)
		flush_queue(k);
}

static void set_polling(int fd, bool on)
{
	if (con.nowait[fd] && con.retry_init) {
		con.polling[fd] = on;
		if (!con.polling[1] && !con.polling[2])
			uv_timer_stop(&con.retry);
		else if (!uv_is_active((uv_handle_t *)&con.retry))
			uv_timer_start(&con.retry, on_retry, NOWAIT_RETRY_MS, NOWAIT_RETRY_MS);
		return;
	}
	if (!con.poll_init[fd] || con.polling[fd] == on)
		return;
	if (on)
		on = uv_poll_start(&con.poll[fd], UV_WRITABLE, on_writable) == 0;
	else
		uv_poll_stop(&con.poll[fd]);
	con.polling[fd] = on;
}

static void pop(struct queue *q)
{
	struct chunk *c = q->head;

	q->head = c->next;
	if (q->head == NULL)
		q->tail = NULL;
	q->backlog -= c->len;
	free(c);
}

/* Write what console k's readers take now. */
static void flush_queue(int k)
{
	struct queue *q = &con.q[k];

	while (q->head != NULL) {
		struct chunk *c = q->head;
		int rc = con.gone[c->fd] ? 0 : write_some(c->fd, c->data, c->len, &c->off);

		if (rc == 0 && !con.gone[c->fd]) {
			set_polling(c->fd, true);
			if (!con.split)
				set_polling(3 - c->fd, false);
			return;
		}
		if (rc < 0)
			lost(c->fd, errno);
		pop(q);
	}
	for (int fd = 1; fd <= 2; fd++)
		if (output_console_sink(fd) == k)
			set_polling(fd, false);
	if (q->paused && q->backlog < CONSOLE_LOW) {
		q->paused = false;
		output_pause(k, false);
	}
}

static void enqueue(int fd, const char *p, size_t len)
{
	int k = output_console_sink(fd);
	struct queue *q = &con.q[k];
	struct chunk *c = malloc(sizeof(*c) + len);

	if (c == NULL)
		return; /* out of memory: this output is lost, the job goes on */
	c->next = NULL;
	c->fd = fd;
	c->off = 0;
	c->len = len;
	memcpy(c->data, p, len);
	if (q->tail != NULL)
		q->tail->next = c;
	else
		q->head = c;
	q->tail = c;
	q->backlog += len;
	if (!q->paused && q->backlog > CONSOLE_HIGH) {
		q->paused = true;
		output_pause(k, true);
	}
}

void output_console_write(int fd, const char *buf, size_t len)
{
	size_t off = 0;

	if (fd < 1 || fd > 2 || con.gone[fd] || len == 0)
		return;
	if (con.q[output_console_sink(fd)].head == NULL) {
		int rc = write_some(fd, buf, len, &off);

		if (rc < 0)
			lost(fd, errno);
		if (rc != 0)
			return;
	}
	enqueue(fd, buf + off, len - off);
	flush_queue(output_console_sink(fd));
}

bool output_console_reader_gone(int fd)
{
	return fd >= 1 && fd <= 2 && con.epipe[fd];
}

int output_console_sink(int fd)
{
	return con.split && fd == 2 ? 1 : 0;
}

int output_console_open(uv_loop_t *loop)
{
	struct stat s1, s2;
	int fd;

	/* One console when both are the same file: a line open on one must
	 * not be broken into by the other. */
	con.split = fstat(1, &s1) == 0 && fstat(2, &s2) == 0 &&
		    (s1.st_dev != s2.st_dev || s1.st_ino != s2.st_ino);

	con.retry_init = uv_timer_init(loop, &con.retry) == 0;
	con.gone_init = uv_timer_init(loop, &con.gone_timer) == 0;
	for (fd = 1; fd <= 2; fd++) {
		struct stat st;
		char path[32];
		int nb = -1;

		if (fstat(fd, &st) != 0 ||
		    !(S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode) || S_ISSOCK(st.st_mode)))
			continue; /* files never block */
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		if (!S_ISSOCK(st.st_mode)) /* a socket cannot be opened so */
			nb = open(path, O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
		if (nb >= 0 && uv_poll_init(loop, &con.poll[fd], nb) != 0) {
			close(nb);
			nb = -1;
		}
		if (nb < 0) {
			con.nowait[fd] = con.retry_init;
			continue;
		}
		con.wfd[fd] = nb;
		con.nonblock[fd] = true;
		con.poll_init[fd] = true;
	}
	con.open = true;
	return 0;
}

void output_console_close(void)
{
	int fd;

	for (fd = 1; fd <= 2; fd++) {
		if (con.poll_init[fd] && !uv_is_closing((uv_handle_t *)&con.poll[fd]))
			uv_close((uv_handle_t *)&con.poll[fd], NULL);
		con.polling[fd] = false;
		con.poll_init[fd] = false;
	}
	if (con.retry_init && !uv_is_closing((uv_handle_t *)&con.retry))
		uv_close((uv_handle_t *)&con.retry, NULL);
	con.retry_init = false;
	if (con.gone_init && !uv_is_closing((uv_handle_t *)&con.gone_timer))
		uv_close((uv_handle_t *)&con.gone_timer, NULL);
	con.gone_init = false;
}

void output_console_finish(void)
{
	int fd;

	/* The loop is over: wait for the readers, however long they take (a
	 * stop signal still ends ddprun: agent_sig_exit_with). */
	for (fd = 1; fd <= 2; fd++)
		con.nonblock[fd] = con.nowait[fd] = false;
	/* stderr first when it is a console of its own: the failure report
	 * and the workers' last errors do not wait for a slow stdout. */
	for (int k = 1; k >= 0; k--) {
		struct queue *q = &con.q[k];

		while (q->head != NULL) {
			struct chunk *c = q->head;

			if (!con.gone[c->fd] && write_some(c->fd, c->data, c->len, &c->off) < 0)
				lost(c->fd, errno); /* its warning goes to stderr's queue */
			pop(q);
		}
		if (k == 0 && con.q[1].head != NULL)
			k = 2; /* stderr's once more, then stdout's (empty) */
	}
	for (fd = 1; fd <= 2; fd++) {
		if (con.wfd[fd] != fd && con.wfd[fd] >= 0)
			close(con.wfd[fd]);
		con.wfd[fd] = fd;
	}
	con.open = false;
}
