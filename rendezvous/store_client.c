/* store_client: blocking 2.x-dialect client (see store_client.h).
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
#include <time.h>
#include <unistd.h>

#include "store_addr.h"
#include "util.h"
#include "store_proto.h"

/* Replies larger than this are treated as protocol errors (a server sending a
 * garbage length must not make us allocate gigabytes). */
#define CLIENT_MAX_VALUE ((size_t)1 << 30)

struct store_client {
	int fd;
	int64_t op_timeout_ms;
	char *prefix;
	bool broken;
	uint32_t nonce;
	struct store_buf req;
};

static int64_t deadline_after(int64_t ms)
{
	return ms > 0 ? util_now_ms() + ms : -1;
}

static int poll_fd(int fd, short events, int64_t deadline)
{
	struct pollfd p = {.fd = fd, .events = events};

	for (;;) {
		int64_t left = deadline < 0 ? -1 : deadline - util_now_ms();
		int rc;

		if (deadline >= 0 && left <= 0)
			return -ETIMEDOUT;
		rc = poll(&p, 1, left < 0 ? -1 : (left > 1000000 ? 1000000 : (int)left));
		if (rc > 0)
			return 0;
		if (rc < 0 && errno != EINTR)
			return -errno;
	}
}

static int send_all(struct store_client *c, const uint8_t *p, size_t n, int64_t deadline)
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

static int recv_exact(struct store_client *c, void *dst, size_t n, int64_t deadline)
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
static int fail(struct store_client *c, int rc)
{
	if (rc < 0)
		c->broken = true;
	return rc;
}

static int recv_u8(struct store_client *c, uint8_t *v, int64_t deadline)
{
	return recv_exact(c, v, 1, deadline);
}

static int recv_i64(struct store_client *c, int64_t *v, int64_t deadline)
{
	return recv_exact(c, v, 8, deadline);
}

static int recv_bytes(struct store_client *c, void **val, size_t *len, int64_t deadline)
{
	uint64_t l;
	uint8_t *p;
	int rc = recv_exact(c, &l, 8, deadline);

	if (rc < 0)
		return rc;
	if (l > CLIENT_MAX_VALUE)
		return -EPROTO;
	p = malloc((size_t)l + 1);
	if (p == NULL)
		return -ENOMEM;
	rc = recv_exact(c, p, (size_t)l, deadline);
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
	*fd_out = fd;
	return 0;
}

static void sleep_ms(int64_t ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static int handshake(struct store_client *c, int64_t deadline)
{
	uint32_t echo = 0;
	int rc;

	c->req.len = 0;
	store_put_validate(&c->req);
	store_put_u8(&c->req, STORE_V2_PING);
	store_put_u32(&c->req, c->nonce);
	rc = send_all(c, c->req.p, c->req.len, deadline);
	if (rc == 0)
		rc = recv_exact(c, &echo, 4, deadline);
	if (rc == 0 && echo != c->nonce)
		rc = -EPROTO;
	return rc;
}

int store_client_connect(const char *host, int port, int64_t connect_timeout_ms,
			 int64_t op_timeout_ms, struct store_client **out)
{
	struct store_client *c;
	int64_t deadline = deadline_after(connect_timeout_ms), backoff = 10;
	int rc = -ECONNREFUSED, one = 1;

	if (host == NULL || port <= 0 || port > 65535)
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
		for (a = ai; rc == 0 && a; a = a->ai_next) {
			rc = connect_one(a, deadline, &c->fd);
			if (rc == 0)
				break;
		}
		if (ai)
			freeaddrinfo(ai);
		if (rc == 0)
			break;
		if (deadline < 0 || util_now_ms() + backoff >= deadline)
			goto fail;
		sleep_ms(backoff);
		backoff = backoff * 2 > 1000 ? 1000 : backoff * 2;
	}
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* A wait with no timeout must still end if the server's host dies. */
	store_sock_keepalive(c->fd, 15);
	/* The handshake gets the operation timeout: a server that accepts but
	 * never answers (a PyTorch 1.x server reads VALIDATE as a huge SET) must
	 * not hang us. */
	rc = handshake(c, deadline_after(op_timeout_ms > 0 ? op_timeout_ms : 30000));
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

int store_client_local_addr(const struct store_client *c, char *buf, size_t len)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);

	if (getsockname(c->fd, (struct sockaddr *)&ss, &sl) < 0)
		return -errno;
	return store_addr_format((struct sockaddr *)&ss, false, buf, len);
}

/* ---- requests ---------------------------------------------------------------------- */

static int begin(struct store_client *c, enum store_op op)
{
	if (c->broken)
		return -ENOTCONN;
	c->req.len = 0;
	c->req.err = 0;
	store_put_op(&c->req, STORE_DIALECT_V2, op);
	return 0;
}

static int put_key(struct store_client *c, const char *key)
{
	return store_put_user_key(&c->req, c->prefix, key, 8 * 1024);
}

static int put_val(struct store_client *c, const void *val, size_t len)
{
	if (len > 8 * 1024 * 1024)
		return -EMSGSIZE;
	if (len && val == NULL)
		return -EINVAL;
	store_put_bytes(&c->req, val, len);
	return 0;
}

static int put_keys(struct store_client *c, const char *const *keys, size_t n)
{
	size_t i;
	int rc;

	if (n > 128 * 1024)
		return -E2BIG;
	store_put_u64(&c->req, n);
	for (i = 0; i < n; i++) {
		rc = put_key(c, keys[i]);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static int send_req(struct store_client *c, int64_t deadline)
{
	if (c->req.err)
		return c->req.err;
	return fail(c, send_all(c, c->req.p, c->req.len, deadline));
}

static int64_t op_deadline(struct store_client *c)
{
	return deadline_after(c->op_timeout_ms);
}

int store_set(struct store_client *c, const char *key, const void *val, size_t len)
{
	int rc = begin(c, STORE_OP_SET);

	if (rc == 0)
		rc = put_key(c, key);
	if (rc == 0)
		rc = put_val(c, val, len);
	return rc ? rc : send_req(c, op_deadline(c));
}

/* WAIT with cancel on timeout. 0 when the keys exist, -ETIMEDOUT when the
 * server confirmed the cancel (the client stays usable). */
static int do_wait(struct store_client *c, const char *const *keys, size_t n, int64_t deadline)
{
	uint8_t r;
	int rc = begin(c, STORE_OP_WAIT);

	if (rc == 0)
		rc = put_keys(c, keys, n);
	if (rc == 0)
		rc = send_req(c, deadline);
	if (rc < 0)
		return rc;
	rc = recv_u8(c, &r, deadline);
	if (rc == 0)
		return r == STORE_WAIT_STOP ? 0 : fail(c, -EPROTO);
	if (rc != -ETIMEDOUT)
		return fail(c, rc);
	/* Cancel; a STOP_WAITING already in flight may come first, and then
	 * the keys are there after all. */
	deadline = deadline_after(c->op_timeout_ms > 0 ? c->op_timeout_ms : 10000);
	begin(c, STORE_OP_CANCEL_WAIT);
	rc = send_req(c, deadline);
	if (rc == 0)
		rc = recv_u8(c, &r, deadline);
	if (rc == 0 && r == STORE_WAIT_STOP) {
		rc = recv_u8(c, &r, deadline);
		if (rc == 0 && r == STORE_WAIT_CANCELED)
			return 0;
	} else if (rc == 0 && r == STORE_WAIT_CANCELED) {
		return -ETIMEDOUT;
	}
	return fail(c, rc < 0 ? rc : -EPROTO);
}

int store_wait(struct store_client *c, const char *const *keys, size_t n, int64_t timeout_ms)
{
	return do_wait(c, keys, n, deadline_after(timeout_ms > 0 ? timeout_ms : c->op_timeout_ms));
}

static int get_now(struct store_client *c, const char *key, void **val, size_t *len,
		   int64_t deadline)
{
	int rc = begin(c, STORE_OP_GET);

	if (rc == 0)
		rc = put_key(c, key);
	if (rc == 0)
		rc = send_req(c, deadline);
	if (rc == 0)
		rc = fail(c, recv_bytes(c, val, len, deadline));
	return rc;
}

int store_get(struct store_client *c, const char *key, void **val, size_t *len)
{
	int64_t deadline = op_deadline(c);
	int rc = do_wait(c, &key, 1, deadline);

	return rc ? rc : get_now(c, key, val, len, deadline);
}

int store_try_get(struct store_client *c, const char *key, void **val, size_t *len)
{
	int64_t deadline = op_deadline(c);
	int rc = store_check(c, &key, 1);

	if (rc < 0)
		return rc;
	if (rc == 0)
		return -ENOENT;
	return get_now(c, key, val, len, deadline);
}

static int simple_i64(struct store_client *c, int64_t *out)
{
	int64_t deadline = op_deadline(c);
	int rc = send_req(c, deadline);

	if (rc == 0)
		rc = fail(c, recv_i64(c, out, deadline));
	return rc;
}

int store_add(struct store_client *c, const char *key, int64_t delta, int64_t *result)
{
	int64_t r;
	int rc = begin(c, STORE_OP_ADD);

	if (rc == 0)
		rc = put_key(c, key);
	if (rc)
		return rc;
	store_put_i64(&c->req, delta);
	rc = simple_i64(c, &r);
	if (rc == 0 && result)
		*result = r;
	return rc;
}

int store_compare_set(struct store_client *c, const char *key, const void *expected, size_t elen,
		      const void *desired, size_t dlen, void **cur, size_t *curlen)
{
	int64_t deadline = op_deadline(c);
	int rc = begin(c, STORE_OP_COMPARE_SET);

	if (rc == 0)
		rc = put_key(c, key);
	if (rc == 0)
		rc = put_val(c, expected, elen);
	if (rc == 0)
		rc = put_val(c, desired, dlen);
	if (rc == 0)
		rc = send_req(c, deadline);
	if (rc == 0)
		rc = fail(c, recv_bytes(c, cur, curlen, deadline));
	return rc;
}

int store_check(struct store_client *c, const char *const *keys, size_t n)
{
	int64_t deadline = op_deadline(c);
	uint8_t r;
	int rc = begin(c, STORE_OP_CHECK);

	if (rc == 0)
		rc = put_keys(c, keys, n);
	if (rc == 0)
		rc = send_req(c, deadline);
	if (rc == 0)
		rc = fail(c, recv_u8(c, &r, deadline));
	if (rc < 0)
		return rc;
	if (r != STORE_CHECK_READY && r != STORE_CHECK_NOT_READY)
		return fail(c, -EPROTO);
	return r == STORE_CHECK_READY;
}

int store_delete(struct store_client *c, const char *key)
{
	int64_t r = 0;
	int rc = begin(c, STORE_OP_DELETE);

	if (rc == 0)
		rc = put_key(c, key);
	if (rc == 0)
		rc = simple_i64(c, &r);
	return rc < 0 ? rc : r == 1;
}

int store_num_keys(struct store_client *c, int64_t *n)
{
	int rc = begin(c, STORE_OP_NUMKEYS);

	return rc ? rc : simple_i64(c, n);
}

int store_append(struct store_client *c, const char *key, const void *val, size_t len)
{
	int rc = begin(c, STORE_OP_APPEND);

	if (rc == 0)
		rc = put_key(c, key);
	if (rc == 0)
		rc = put_val(c, val, len);
	return rc ? rc : send_req(c, op_deadline(c));
}

int store_multi_get(struct store_client *c, const char *const *keys, size_t n, void **vals,
		    size_t *lens)
{
	int64_t deadline = op_deadline(c);
	size_t i, j;
	int rc = n ? do_wait(c, keys, n, deadline) : 0;

	if (rc == 0)
		rc = begin(c, STORE_OP_MULTI_GET);
	if (rc == 0)
		rc = put_keys(c, keys, n);
	if (rc == 0)
		rc = send_req(c, deadline);
	for (i = 0; rc == 0 && i < n; i++) {
		rc = fail(c, recv_bytes(c, &vals[i], &lens[i], deadline));
		if (rc < 0) {
			for (j = 0; j < i; j++) {
				free(vals[j]);
				vals[j] = NULL;
			}
		}
	}
	return rc;
}

int store_multi_set(struct store_client *c, const char *const *keys, const void *const *vals,
		    const size_t *lens, size_t n)
{
	size_t i;
	int rc = begin(c, STORE_OP_MULTI_SET);

	if (n > 128 * 1024)
		return -E2BIG;
	if (rc == 0)
		store_put_u64(&c->req, n);
	for (i = 0; rc == 0 && i < n; i++) {
		rc = put_key(c, keys[i]);
		if (rc == 0)
			rc = put_val(c, vals[i], lens[i]);
	}
	return rc ? rc : send_req(c, op_deadline(c));
}

int store_queue_push(struct store_client *c, const char *key, const void *val, size_t len)
{
	int rc = begin(c, STORE_OP_QUEUE_PUSH);

	if (rc == 0)
		rc = put_key(c, key);
	if (rc == 0)
		rc = put_val(c, val, len);
	return rc ? rc : send_req(c, op_deadline(c));
}

int store_queue_pop(struct store_client *c, const char *key, void **val, size_t *len)
{
	int64_t deadline = op_deadline(c), n, pause = 1;
	int rc;

	/* Wait for an item, then pop. Another client may take it first; and a
	 * key that also holds a plain value satisfies WAIT at once: then retry
	 * with a growing pause (at most 100 ms) until the deadline. */
	for (;;) {
		rc = do_wait(c, &key, 1, deadline);
		if (rc == 0)
			rc = begin(c, STORE_OP_QUEUE_POP);
		if (rc == 0)
			rc = put_key(c, key);
		if (rc == 0)
			rc = send_req(c, deadline);
		if (rc == 0)
			rc = fail(c, recv_i64(c, &n, deadline));
		if (rc < 0)
			return rc;
		if (n > 0)
			return fail(c, recv_bytes(c, val, len, deadline));
		if (deadline >= 0 && util_now_ms() + pause >= deadline)
			return -ETIMEDOUT;
		sleep_ms(pause);
		pause = pause * 2 > 100 ? 100 : pause * 2;
	}
}

int store_queue_len(struct store_client *c, const char *key, int64_t *n)
{
	int rc = begin(c, STORE_OP_QUEUE_LEN);

	if (rc == 0)
		rc = put_key(c, key);
	return rc ? rc : simple_i64(c, n);
}

int store_ping(struct store_client *c)
{
	int64_t deadline = op_deadline(c);
	uint32_t echo = 0;
	int rc = begin(c, STORE_OP_PING);

	c->nonce++;
	store_put_u32(&c->req, c->nonce);
	if (rc == 0)
		rc = send_req(c, deadline);
	if (rc == 0)
		rc = fail(c, recv_exact(c, &echo, 4, deadline));
	if (rc == 0 && echo != c->nonce)
		rc = fail(c, -EPROTO);
	return rc;
}

int store_on_close_set(struct store_client *c, const char *key, const void *val, size_t len)
{
	int64_t deadline = op_deadline(c);
	uint8_t ack;
	int rc = begin(c, STORE_OP_ON_CLOSE_SET);

	/* NULL or "" clears the registration: an empty key on the wire. */
	if (rc == 0 && (key == NULL || *key == '\0'))
		store_put_u64(&c->req, 0);
	else if (rc == 0)
		rc = put_key(c, key);
	if (rc == 0)
		rc = put_val(c, val, len);
	if (rc == 0)
		rc = send_req(c, deadline);
	if (rc == 0)
		rc = fail(c, recv_u8(c, &ack, deadline));
	return rc;
}

const char *store_strerror(int err)
{
	switch (err) {
	case 0:
		return "success";
	case -ETIMEDOUT:
		return "timed out";
	case -ECONNREFUSED:
		return "connection refused (nothing listens at that address)";
	case -ECONNRESET:
		return "connection closed by the server";
	case -EPIPE:
		return "connection closed by the server (broken pipe)";
	case -EPROTO:
		return "protocol error (unexpected reply from the server)";
	case -ENAMETOOLONG:
		return "key too long";
	case -EMSGSIZE:
		return "value too long";
	case -E2BIG:
		return "too many keys";
	case -ENOENT:
		return "key not found";
	case -ENOTCONN:
		return "client unusable after an earlier error";
	case -ECANCELED:
		return "operation cancelled";
	case -EHOSTUNREACH:
		return "host not found or unreachable";
	case -ENOMEM:
		return "out of memory";
	case -EINVAL:
		return "invalid argument";
	default:
		return err < 0 ? strerror(-err) : "unknown error";
	}
}
