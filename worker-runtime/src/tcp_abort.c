/* tcp_abort: a failure's reason around the ring (see tcp.h, ddpi_tcp_abort).
 *
 * A leader whose node failed a call before its part on the ring (a local
 * mismatch, a local rank gone) would otherwise just close its sockets, and the
 * other nodes would fail with "the previous node's leader is gone": the cause
 * only in the failed node's log. Instead it sends an abort record, a frame
 * of kind DDPI_TCP_ABORT with its code and message (tcp_int.h):
 *   - to the right, only where the next leader reads a frame next (at_frame):
 *     that leader reads it in place of a call in the calls' gather, and sends
 *     it on in place of its next frame, so it goes round one step a leader as
 *     the failed node's call would have, until the failed node's left;
 *   - to the left, on the socket that leader only writes to: it reads it
 *     there when its sends fail (the failed process exited, its kernel
 *     reset the connection), and then fails with the reason rather than
 *     "the next node's leader is gone".
 * A leader that dies without a word still gives "leader is gone". */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "tcp_int.h"
#include "util.h"

#define TCP_ABORT_WAIT_MS 1000 /* the most a record waits for room to be sent */

int ddpi_tcp_why_begin(struct ddpi_tcp *t, const struct ddpi_tcp_frame *f)
{
	int from = f->call.root;

	if (from < 0 || from >= t->nnodes || from == t->me || f->len > DDPI_TCP_ABORT_TEXT)
		return -EPROTO;
	t->why.from = from;
	/* A code as libddp returns them (a negative errno or DDP_E*), else a peer's. */
	t->why.code = f->call.dt > 0 && f->call.dt < 65536 ? -(int)f->call.dt : DDP_EPEER;
	t->why.finished = f->call.op == 1;
	t->why.seq = f->call.seq;
	t->why.len = (size_t)f->len;
	return 0;
}

int ddpi_tcp_why_fail(struct ddpi_tcp *t, const char *what)
{
	const char *text = t->why.text;
	size_t wl = strlen(what);
	char rk[96];

	t->why.text[t->why.len] = '\0';
	if (text[0] == '\0') /* a failure with no message: its code's */
		text = ddp_strerror(t->why.code);
	/* "all_reduce: on node 1 (ranks 2-3): mismatched ...", not "...: all_reduce: mismatched". */
	if (!strncmp(text, what, wl) && !strncmp(text + wl, ": ", 2))
		text += wl + 2;
	ddpi_tcp_node_ranks(t, t->why.from, rk, sizeof(rk));
	return ddpi_tcp_leader_cause(
		t, ddpi_err(t->why.code, "%s: on node %d (%s): %s", what, t->why.from, rk, text),
		t->why.from, t->why.finished ? "finished (ddp_finalize)" : "failed");
}

int ddpi_tcp_why_peek(struct ddpi_tcp *t, int rc, int wait_ms, const char *what)
{
	struct {
		struct ddpi_tcp_frame f;
		char text[DDPI_TCP_ABORT_TEXT];
	} in;
	ssize_t n;

	t->at_frame = 0; /* a frame cut short: no record can follow it */
	if (t->why.from >= 0)
		return rc;
	/* The record arrives whole (a send), or not at all: one look once it is in. */
	if (wait_ms > 0) {
		struct pollfd p = {.fd = t->right_fd, .events = POLLIN};
		poll(&p, 1, wait_ms);
	}
	n = recv(t->right_fd, &in, sizeof(in), MSG_DONTWAIT);
	if (n < (ssize_t)sizeof(in.f) || in.f.call.kind != DDPI_TCP_ABORT ||
	    in.f.len > DDPI_TCP_ABORT_TEXT || (size_t)n != sizeof(in.f) + in.f.len ||
	    ddpi_tcp_why_begin(t, &in.f) < 0)
		return rc;
	memcpy(t->why.text, in.text, t->why.len);
	return ddpi_tcp_why_fail(t, what);
}

int ddpi_tcp_why_watch(struct ddpi_tcp *t, const char *what)
{
	struct {
		struct ddpi_tcp_frame f;
		char text[DDPI_TCP_ABORT_TEXT];
	} in;
	ssize_t n = recv(t->right_fd, &in, sizeof(in), MSG_PEEK | MSG_DONTWAIT);

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	/* A finish record stays for a send that fails (ddpi_tcp_why_peek); a
	 * record cut short would keep the socket readable: not watched again. */
	if (n < (ssize_t)sizeof(in.f) || in.f.call.kind != DDPI_TCP_ABORT || in.f.call.op == 1 ||
	    in.f.len > DDPI_TCP_ABORT_TEXT || (size_t)n < sizeof(in.f) + in.f.len) {
		t->watch_from = UINT64_MAX;
		return 0;
	}
	if (in.f.call.seq > t->seq) { /* left there for the next call */
		t->watch_from = t->seq + 1;
		return 0;
	}
	return ddpi_tcp_why_peek(t, 0, 0, what);
}

/* Sends the record whole, or gives up (the peer gone, or not reading for
 * TCP_ABORT_WAIT_MS): the neighbour then sees the ring closed. */
static void send_record(int fd, const struct iovec *rec)
{
	struct iovec v[2] = {rec[0], rec[1]};
	struct msghdr mh = {.msg_iov = v, .msg_iovlen = 2};
	int64_t until = util_now_ms() + TCP_ABORT_WAIT_MS;

	while (v[0].iov_len + v[1].iov_len > 0) {
		ssize_t w = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		int64_t left = until - util_now_ms();
		if (w < 0 && errno != EAGAIN && errno != EINTR)
			return;
		for (int i = 0; i < 2 && w > 0; i++) {
			size_t k = (size_t)w < v[i].iov_len ? (size_t)w : v[i].iov_len;
			v[i].iov_base = (char *)v[i].iov_base + k;
			v[i].iov_len -= k;
			w -= (ssize_t)k;
		}
		if (v[0].iov_len + v[1].iov_len > 0) {
			struct pollfd p = {.fd = fd, .events = POLLOUT};
			if (left <= 0)
				return;
			poll(&p, 1, (int)left);
		}
	}
}

void ddpi_tcp_abort(struct ddpi_tcp *t, int code, const char *why, uint64_t seq)
{
	if (t->aborted)
		return;
	t->aborted = 1;
	if (t->why.from < 0) { /* this node's own failure */
		t->why.from = t->me;
		t->why.seq = seq;
		t->why.code = code < 0 ? code : DDP_EPEER;
		t->why.len = (size_t)snprintf(t->why.text, sizeof(t->why.text), "%s", why);
		if (t->why.len > DDPI_TCP_ABORT_TEXT)
			t->why.len = DDPI_TCP_ABORT_TEXT;
	}
	struct ddpi_tcp_frame f = {.call = {.kind = DDPI_TCP_ABORT,
					    .dt = (uint32_t)-t->why.code,
					    .op = t->why.finished ? 1u : 0u,
					    .root = t->why.from,
					    .seq = t->why.seq},
				   .len = t->why.len};
	struct iovec rec[2] = {{&f, sizeof(f)}, {t->why.text, t->why.len}};

	if (t->right_fd >= 0 && t->at_frame && right_of(t) != t->why.from)
		send_record(t->right_fd, rec);
	if (t->left_fd >= 0 && left_of(t) != t->why.from)
		send_record(t->left_fd, rec);
	/* shutdown, not close: the descriptors stay valid until ddpi_tcp_close. */
	if (t->left_fd >= 0)
		shutdown(t->left_fd, SHUT_RDWR);
	if (t->right_fd >= 0)
		shutdown(t->right_fd, SHUT_RDWR);
}

void ddpi_tcp_finish(struct ddpi_tcp *t, uint64_t ncalls, const char *refused)
{
	char text[DDPI_TCP_ABORT_TEXT];

	if (!t || t->aborted || t->why.from >= 0)
		return;
	if (refused)
		snprintf(text, sizeof(text),
			 "its leader finished (ddp_finalize) after its call was refused (%s)",
			 refused);
	else
		snprintf(text, sizeof(text),
			 "its leader finished (ddp_finalize) after %llu collective call%s: the "
			 "nodes made different numbers of calls",
			 (unsigned long long)ncalls, ncalls == 1 ? "" : "s");
	t->why.finished = 1;
	ddpi_tcp_abort(t, -EINVAL, text, ncalls);
}
