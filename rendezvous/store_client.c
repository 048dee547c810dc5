/* store_client: blocking 2.x-dialect client (see store_client.h): the
 * connection and its deadline-bound I/O; the operations are in
 * store_client_ops.c.
 *
 * The socket is non-blocking; every send and receive polls against the
 * operation's deadline. Keys go on the wire as "/" + key (with a prefix p:
 * "/" + p + "/" + key), exactly as torch.distributed.TCPStore (and
 * PrefixStore over it) sends them, so C and Python clients share one key
 * space on the same server. */
#include "store_client.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "store_addr.h"
#include "store_client_int.h"
#include "util.h"

int64_t store_client_deadline(int64_t ms)
{
	return ms > 0 ? util_now_ms() + ms : -1;
}

static int poll_fd(int fd, short events, int64_t deadline)
{
	struct pollfd p = {.fd = fd, .events = events};

	for (;;) {
		int64_t left = deadline < 0 ? -1 : deadline - util_now_ms();
		int rc;

		/* Past the deadline it still looks once: what has already come
		 * (a connection the last try made at the deadline) is no time out. */
		rc = poll(&p, 1,
			  deadline < 0 ? -1
				       : (left <= 0 ? 0 : (left > 1000000 ? 1000000 : (int)left)));
		if (rc > 0)
			return 0;
		if (deadline >= 0 && left <= 0 && rc == 0)
			return -ETIMEDOUT;
		if (rc < 0 && errno != EINTR)
			return -errno;
	}
}

int store_client_send(struct store_client *c, const uint8_t *p, size_t n, int64_t deadline)
{
	while (n > 0) {
		ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);

		if (w > 0) {
			p += w;
			n -= (size_t)w;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			int rc = poll_fd(c->fd, POLLOUT, deadline);

			if (rc < 0)
				return rc;
			continue;
		}
		return errno == EPIPE ? -EPIPE : -(errno ? errno : EIO);
	}
	return 0;
}

int store_client_recv(struct store_client *c, void *dst, size_t n, int64_t deadline)
{
	uint8_t *p = dst;

	while (n > 0) {
		ssize_t r = recv(c->fd, p, n, 0);

		if (r > 0) {
			p += r;
			n -= (size_t)r;
			continue;
		}
		if (r == 0)
			return -ECONNRESET;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			int rc = poll_fd(c->fd, POLLIN, deadline);

			if (rc < 0)
				return rc;
			continue;
		}
		return -errno;
	}
	return 0;
}

/* Any failure but a completed wait timeout leaves the stream out of step. */
int store_client_fail(struct store_client *c, int rc)
{
	if (rc < 0)
		c->broken = true;
	return rc;
}

int store_client_recv_bytes(struct store_client *c, void **val, size_t *len, int64_t deadline)
{
	uint64_t l;
	uint8_t *p;
	int rc = store_client_recv(c, &l, 8, deadline);

	if (rc < 0)
		return rc;
	if (l > STORE_MAX_REPLY)
		return -EPROTO;
	p = malloc((size_t)l + 1);
	if (p == NULL)
		return -ENOMEM;
	rc = store_client_recv(c, p, (size_t)l, deadline);
	if (rc < 0) {
		free(p);
		return rc;
	}
	p[l] = '\0';
	*val = p;
	*len = (size_t)l;
	return 0;
}

/* ---- connecting ----------------------------------------------------------------- */

static int connect_one(const struct addrinfo *a, int64_t deadline, int *fd_out)
{
	int fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP);
	int rc, err = 0;
	socklen_t el = sizeof(err);

	if (fd < 0)
		return -errno;
	rc = connect(fd, a->ai_addr, a->ai_addrlen);
	if (rc < 0 && errno != EINPROGRESS) {
		rc = -errno;
		close(fd);
		return rc;
	}
	if (rc < 0) {
		rc = poll_fd(fd, POLLOUT, deadline);
		if (rc == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0)
			rc = -errno;
		else if (rc == 0 && err != 0)
			rc = -err;
		if (rc < 0) {
			close(fd);
			return rc;
		}
	}
	if (store_sock_is_self(fd)) { /* nothing listens there */
		close(fd);
		return -ECONNREFUSED;
	}
	*fd_out = fd;
	return 0;
}

static int handshake(struct store_client *c, int64_t deadline)
{
	struct store_msg validate = {.op = STORE_OP_VALIDATE};
	struct store_msg ping = {.op = STORE_OP_PING, .num = c->nonce};
	uint32_t echo = 0;
	int rc;

	c->req.len = 0;
	rc = store_encode(&c->req, STORE_DIALECT_V2, NULL, &validate);
	if (rc == 0)
		rc = store_encode(&c->req, STORE_DIALECT_V2, NULL, &ping);
	if (rc == 0)
		rc = store_client_send(c, c->req.p, c->req.len, deadline);
	if (rc == 0)
		rc = store_client_recv(c, &echo, 4, deadline);
	if (rc == 0 && echo != c->nonce)
		rc = -EPROTO;
	return rc;
}

int store_client_connect(const char *host, int port, int64_t connect_timeout_ms,
			 int64_t op_timeout_ms, struct store_client **out)
{
	struct store_client *c;
	int64_t deadline = store_client_deadline(connect_timeout_ms), backoff = 10, left;
	int rc = -ECONNREFUSED, one = 1, answer = 0;

	if (host == NULL || port <= 0 || port > UTIL_PORT_MAX)
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (c == NULL)
		return -ENOMEM;
	c->fd = -1;
	c->op_timeout_ms = op_timeout_ms;
	c->nonce = (uint32_t)util_now_ms() ^ ((uint32_t)getpid() << 16);
	store_buf_init(&c->req);
	for (;;) {
		struct addrinfo *ai = NULL, *a;

		rc = store_addr_resolve(host, port, false, &ai, NULL);
		for (a = rc == 0 ? ai : NULL; a; a = a->ai_next) {
			int64_t t0 = util_now_ms(), until = deadline;
			if (a->ai_next && (deadline < 0 || deadline - t0 > STORE_ADDR_TRY_MS))
				until = t0 + STORE_ADDR_TRY_MS; /* the next may answer */
			rc = connect_one(a, until, &c->fd);
			if (rc == 0)
				break;
			if (rc != -ETIMEDOUT)
				answer = rc;
			else if (util_now_ms() - t0 >= STORE_ANSWER_MS)
				answer = 0; /* silence since: what it said before is stale */
		}
		if (ai)
			freeaddrinfo(ai);
		if (rc == 0)
			break;
		left = deadline < 0 ? 0 : deadline - util_now_ms();
		if (left <= 0) {
			if (rc == -ETIMEDOUT && answer < 0)
				rc = answer;
			goto fail;
		}
		/* The last sleep is cut to the deadline, where one more try goes:
		 * a server that comes up in the last second is still found. */
		util_sleep_ms(backoff < left ? backoff : left);
		backoff = backoff * 2 > 1000 ? 1000 : backoff * 2;
	}
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* A wait with no timeout must still end if the server's host dies. */
	store_sock_keepalive(c->fd, 15);
	/* The handshake gets the operation timeout: a server that accepts but
	 * never answers (a PyTorch 1.x server reads VALIDATE as a huge SET) must
	 * not hang us. */
	rc = handshake(c, store_client_deadline(op_timeout_ms > 0 ? op_timeout_ms : 30000));
	if (rc < 0)
		goto fail;
	*out = c;
	return 0;
fail:
	store_client_close(c);
	return rc;
}

void store_client_close(struct store_client *c)
{
	if (c == NULL)
		return;
	if (c->fd >= 0)
		close(c->fd);
	free(c->prefix);
	store_buf_free(&c->req);
	free(c);
}

void store_client_set_timeout(struct store_client *c, int64_t op_timeout_ms)
{
	c->op_timeout_ms = op_timeout_ms;
}

int store_client_set_prefix(struct store_client *c, const char *prefix)
{
	char *p = NULL;

	if (prefix && *prefix) {
		p = strdup(prefix);
		if (p == NULL)
			return -ENOMEM;
	}
	free(c->prefix);
	c->prefix = p;
	return 0;
}

/* One end of the connection (peer: the store's), as numeric text. */
static int end_addr(const struct store_client *c, bool peer, char *buf, size_t len)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);

	if ((peer ? getpeername : getsockname)(c->fd, (struct sockaddr *)&ss, &sl) < 0)
		return -errno;
	return store_addr_format((struct sockaddr *)&ss, false, buf, len);
}

int store_client_local_addr(const struct store_client *c, char *buf, size_t len)
{
	return end_addr(c, false, buf, len);
}

int store_client_peer_addr(const struct store_client *c, char *buf, size_t len)
{
	return end_addr(c, true, buf, len);
}
