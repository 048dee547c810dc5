/* store_ring: the store server's connections over io_uring, on the server's
 * own libuv loop.
 *
 * Why: with epoll every request costs a read() and every reply a write(), and
 * on a machine with page-table isolation (most VMs) a system call costs about
 * a microsecond: a quarter of the server's time per request. Here every
 * connection has one multishot receive armed, whose data lands in a shared
 * ring of provided buffers and is parsed in place; the replies of a loop
 * iteration go out as SEND entries handed to the kernel together by one
 * io_uring_enter (store_server_flush). One system call per batch instead of
 * two per request. The ring's descriptor is watched by a uv_poll, so the
 * server stays on the embedder's single loop.
 *
 * Accepting stays with libuv: the accepted uv_tcp_t owns the descriptor and
 * closes it, and libuv never polls it (its reading is never started). A
 * connection is closed (uv_close) only once no entry in flight names it:
 * c->rops counts them, and closing cancels them first.
 *
 * Not used (libuv streams, store_conn_uv.c) where the kernel is older than
 * 6.0, io_uring is disabled or filtered (a container's seccomp profile), or
 * DDP_STORE_IO=uv. DDP_STORE_IO=uring makes its absence an error. Built only
 * with liburing (the Makefile's URING); one more transport behind
 * store_transport.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include <liburing.h>

#include "store_server_int.h"
#include "store_transport.h"

#define RING_ENTRIES	256
#define RING_CQ_ENTRIES 1024
/* Provided receive buffers: a request is usually well under 2 KiB (larger
 * ones arrive in several and are joined in c->in). Pages are touched only as
 * the ring cycles through them. Running out is not an error: a receive then
 * ends with ENOBUFS and is armed again once the batch gave its buffers back. */
#define RING_NBUF  1024
#define RING_BUFSZ 2048
#define RING_BGID  1
/* A SEND buffer larger than this is freed once sent, not kept for reuse. */
#define RING_KEEP_SND (64 * 1024)

/* user_data: the connection's address with the kind of entry in the low bits
 * (a malloc'd struct store_conn is at least 8-aligned). */
enum { OP_RECV = 1, OP_SEND = 2, OP_CANCEL = 3, OP_MASK = 3 };

struct store_ring {
	struct io_uring ring;
	uv_poll_t poll;
	struct store_server *s;
	struct io_uring_buf_ring *br;
	size_t br_size;
	uint8_t *bufs;
	unsigned nret; /* buffers given back since the last advance */
	bool closing, submit_failed;
};

static uint64_t tag(struct store_conn *c, unsigned op)
{
	return (uint64_t)(uintptr_t)c | op;
}

static struct io_uring_sqe *get_sqe(struct store_ring *r)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);

	if (sqe == NULL) { /* queue full: hand it over now */
		io_uring_submit(&r->ring);
		sqe = io_uring_get_sqe(&r->ring);
	}
	return sqe;
}

static int conn_fd(struct store_conn *c)
{
	uv_os_fd_t fd;

	return uv_fileno((uv_handle_t *)&c->tcp, &fd) < 0 ? -1 : fd;
}

/* An entry naming c completed: c may now be closed for good. */
static void conn_unref(struct store_conn *c)
{
	if (--c->rops == 0 && c->closing)
		uv_close((uv_handle_t *)&c->tcp, store_conn_on_closed);
}

static int ring_recv_start(struct store_conn *c)
{
	struct store_ring *r = c->s->ring;
	struct io_uring_sqe *sqe;
	int fd = conn_fd(c);

	/* Still armed (its cancel not yet done): it goes on, or is re-armed
	 * when its last completion comes. */
	if (c->recv_armed)
		return 0;
	if (fd < 0)
		return -EBADF;
	sqe = get_sqe(r);
	if (sqe == NULL)
		return -EBUSY;
	io_uring_prep_recv_multishot(sqe, fd, NULL, 0, 0);
	sqe->flags |= IOSQE_BUFFER_SELECT;
	sqe->buf_group = RING_BGID;
	io_uring_sqe_set_data64(sqe, tag(c, OP_RECV));
	c->recv_armed = true;
	c->rops++;
	store_server_wake(c->s);
	return 0;
}

static void ring_recv_stop(struct store_conn *c)
{
	struct io_uring_sqe *sqe;

	if (!c->recv_armed || (sqe = get_sqe(c->s->ring)) == NULL)
		return;
	io_uring_prep_cancel64(sqe, tag(c, OP_RECV), 0);
	io_uring_sqe_set_data64(sqe, tag(c, OP_CANCEL));
	c->rops++;
	store_server_wake(c->s);
}

static void send_rest(struct store_conn *c)
{
	struct io_uring_sqe *sqe = get_sqe(c->s->ring);
	int fd = conn_fd(c);

	if (sqe == NULL || fd < 0) {
		store_conn_close(c, "cannot queue a send");
		return;
	}
	io_uring_prep_send(sqe, fd, c->snd.p + c->snd_off, c->snd.len - c->snd_off, MSG_NOSIGNAL);
	io_uring_sqe_set_data64(sqe, tag(c, OP_SEND));
	c->out_inflight = c->snd.len - c->snd_off;
	c->sending = true;
	c->rops++;
	/* The rest of a short send is queued from a completion, and that may be
	 * reaped by the check phase's own submit, after its last pass: without
	 * this the entry sat in the queue while poll blocked (nothing else was
	 * coming for it) until some other event woke the loop. */
	store_server_wake(c->s);
}

static void ring_send(struct store_conn *c)
{
	uint8_t *p;
	size_t cap;

	/* One SEND at a time keeps the bytes in order; what accumulates
	 * meanwhile goes when it completes. */
	if (c->sending || c->out.len == 0)
		return;
	/* Swap: the replies become the SEND's buffer, the old SEND buffer
	 * (empty, its capacity kept) takes the next replies. */
	p = c->snd.p;
	cap = c->snd.cap;
	c->snd = c->out;
	c->out.p = p;
	c->out.cap = cap;
	c->out.len = 0;
	c->out.err = 0;
	c->snd_off = 0;
	send_rest(c);
}

static void ring_conn_close(struct store_conn *c)
{
	struct io_uring_sqe *sqe;
	int fd = conn_fd(c);

	if (c->rops == 0) {
		uv_close((uv_handle_t *)&c->tcp, store_conn_on_closed);
		return;
	}
	sqe = get_sqe(c->s->ring);
	if (sqe == NULL) {
		/* No room for a cancel (the kernel refused a submit): shutting
		 * the socket down ends its receive (0) and its send (EPIPE) just
		 * as well, so the connection is still freed. */
		if (fd >= 0)
			shutdown(fd, SHUT_RDWR);
		return;
	}
	io_uring_prep_cancel_fd(sqe, fd, IORING_ASYNC_CANCEL_ALL);
	io_uring_sqe_set_data64(sqe, tag(c, OP_CANCEL));
	c->rops++;
	store_server_wake(c->s);
}

static void on_recv(struct store_ring *r, struct store_conn *c, int res, unsigned flags)
{
	if (res > 0 && (flags & IORING_CQE_F_BUFFER)) {
		unsigned bid = flags >> IORING_CQE_BUFFER_SHIFT;
		uint8_t *data = r->bufs + (size_t)bid * RING_BUFSZ;

		/* Parsed in place; what is not a whole message is copied, so the
		 * buffer goes back at once. */
		store_conn_input(c, data, (size_t)res);
		io_uring_buf_ring_add(r->br, data, RING_BUFSZ, (unsigned short)bid,
				      io_uring_buf_ring_mask(RING_NBUF), (int)r->nret++);
	}
	if (flags & IORING_CQE_F_MORE)
		return;
	/* The receive has ended: the peer closed, an error, our cancel (a pause
	 * or a close), or no buffer was free. Released first, so that a close
	 * from here needs no cancel when nothing else is in flight. */
	c->recv_armed = false;
	conn_unref(c);
	if (c->closing)
		return;
	if (res == 0)
		store_conn_close(c, NULL);
	else if (res < 0 && res != -ENOBUFS && res != -ECANCELED)
		store_conn_close(c, res == -ECONNRESET ? NULL : strerror(-res));
	else if (c->reading && ring_recv_start(c) < 0)
		store_conn_close(c, "cannot queue a receive");
}

static void on_send(struct store_conn *c, int res)
{
	c->sending = false;
	conn_unref(c);
	if (c->closing)
		return;
	if (res < 0) {
		c->out_inflight = 0;
		store_conn_close(c, res == -EPIPE || res == -ECONNRESET ? NULL : strerror(-res));
	} else {
		c->snd_off += (size_t)res;
		if (c->snd_off < c->snd.len) {
			send_rest(c); /* a short send: the socket was full */
		} else {
			c->out_inflight = 0;
			c->snd.len = 0;
			if (c->snd.cap > RING_KEEP_SND) {
				store_buf_free(&c->snd);
				store_buf_init(&c->snd);
			}
			if (c->out.len > 0)
				store_conn_mark_dirty(c);
			store_conn_written(c);
		}
	}
}

static void reap(struct store_ring *r)
{
	struct io_uring_cqe *cqe;
	unsigned head, n;

again:
	n = 0;
	io_uring_for_each_cqe(&r->ring, head, cqe)
	{
		struct store_conn *c =
			(struct store_conn *)(uintptr_t)(cqe->user_data & ~(uint64_t)OP_MASK);

		n++;
		switch (cqe->user_data & OP_MASK) {
		case OP_RECV:
			on_recv(r, c, cqe->res, cqe->flags);
			break;
		case OP_SEND:
			on_send(c, cqe->res);
			break;
		case OP_CANCEL:
			conn_unref(c);
			break;
		default:
			break;
		}
	}
	io_uring_cq_advance(&r->ring, n);
	if (r->nret > 0) {
		io_uring_buf_ring_advance(r->br, (int)r->nret);
		r->nret = 0;
	}
	/* More completions than the queue holds (thousands of connections
	 * closing at once): the kernel keeps the rest, and hands them over only
	 * when asked; its descriptor does not say so. */
	if (io_uring_cq_has_overflow(&r->ring) && io_uring_get_events(&r->ring) >= 0 &&
	    io_uring_cq_ready(&r->ring) > 0)
		goto again;
}

static void ring_submit(struct store_server *s)
{
	struct store_ring *r = s->ring;
	int rc;

	if (io_uring_sq_ready(&r->ring) > 0) {
		rc = io_uring_submit(&r->ring);
		/* EBUSY/EAGAIN: completions backed up; they are reaped below and
		 * the entries go next time (the idle handle stays on). */
		if (rc < 0 && rc != -EBUSY && rc != -EAGAIN && rc != -EINTR && !r->submit_failed) {
			store_srv_log(s, "io_uring submit: %s", strerror(-rc));
			r->submit_failed = true; /* said once: it is retried every iteration */
		}
	}
	reap(r);
}

static bool ring_idle(const struct store_server *s)
{
	return io_uring_sq_ready(&s->ring->ring) == 0;
}

static void on_ring_ready(uv_poll_t *h, int status, int events)
{
	struct store_ring *r = h->data;

	(void)status;
	(void)events;
	reap(r);
	/* Closing: no check phase flushes any more; cancels go now. */
	if (r->s->closing && io_uring_sq_ready(&r->ring) > 0)
		ring_submit(r->s);
}

static void free_ring(struct store_ring *r)
{
	io_uring_queue_exit(&r->ring);
	if (r->br)
		munmap(r->br, r->br_size);
	free(r->bufs);
	free(r);
}

static void on_ring_closed(uv_handle_t *h)
{
	struct store_ring *r = h->data;
	struct store_server *s = r->s;

	free_ring(r);
	s->open_handles--;
	store_server_maybe_free(s);
}

static void ring_shutdown(struct store_server *s)
{
	struct store_ring *r = s->ring;

	if (r == NULL || r->closing)
		return;
	r->closing = true;
	uv_close((uv_handle_t *)&r->poll, on_ring_closed);
}

/* The ring and its buffers; on failure nothing is left but r itself. */
static int setup(struct store_ring *r)
{
	struct io_uring_params p;
	struct io_uring_buf_reg reg;
	int rc, i;

	struct io_uring_probe *probe;

	/* COOP_TASKRUN: completions run when the loop next enters the kernel
	 * instead of interrupting it (25% less CPU per request here). Not
	 * SINGLE_ISSUER: an embedder may start the server on one thread and run
	 * its loop on another. */
	memset(&p, 0, sizeof(p));
	p.flags = IORING_SETUP_CQSIZE | IORING_SETUP_COOP_TASKRUN;
	p.cq_entries = RING_CQ_ENTRIES;
	rc = io_uring_queue_init_params(RING_ENTRIES, &r->ring, &p);
	if (rc < 0)
		return rc;
	/* Multishot receive came with Linux 6.0, as did SEND_ZC, which the
	 * probe can tell (it cannot tell a flag). */
	probe = io_uring_get_probe_ring(&r->ring);
	rc = probe && io_uring_opcode_supported(probe, IORING_OP_SEND_ZC) &&
			     (p.features & IORING_FEAT_NODROP)
		     ? 0
		     : -ENOTSUP;
	io_uring_free_probe(probe);
	if (rc < 0) {
		io_uring_queue_exit(&r->ring);
		return rc;
	}
	r->br_size = RING_NBUF * sizeof(struct io_uring_buf);
	r->br = mmap(NULL, r->br_size, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
	/* calloc: to memory checkers the kernel's writes are invisible; zeroed
	 * buffers keep valgrind from calling received bytes undefined. */
	r->bufs = calloc(RING_NBUF, RING_BUFSZ);
	if (r->br == MAP_FAILED || r->bufs == NULL) {
		rc = -ENOMEM;
		goto fail;
	}
	memset(&reg, 0, sizeof(reg));
	reg.ring_addr = (uint64_t)(uintptr_t)r->br;
	reg.ring_entries = RING_NBUF;
	reg.bgid = RING_BGID;
	rc = io_uring_register_buf_ring(&r->ring, &reg, 0);
	if (rc < 0)
		goto fail;
	io_uring_buf_ring_init(r->br);
	for (i = 0; i < RING_NBUF; i++)
		io_uring_buf_ring_add(r->br, r->bufs + (size_t)i * RING_BUFSZ, RING_BUFSZ,
				      (unsigned short)i, io_uring_buf_ring_mask(RING_NBUF), i);
	io_uring_buf_ring_advance(r->br, RING_NBUF);
	return 0;
fail:
	io_uring_queue_exit(&r->ring);
	if (r->br != MAP_FAILED)
		munmap(r->br, r->br_size);
	free(r->bufs);
	return rc;
}

int store_ring_open(struct store_server *s)
{
	struct store_ring *r = calloc(1, sizeof(*r));
	int rc;

	if (r == NULL)
		return -ENOMEM;
	r->s = s;
	rc = setup(r);
	if (rc < 0) {
		free(r);
		return rc;
	}
	rc = uv_poll_init(s->loop, &r->poll, r->ring.ring_fd);
	if (rc < 0) {
		free_ring(r);
		return rc;
	}
	r->poll.data = r;
	s->open_handles++;
	s->ring = r;
	rc = uv_poll_start(&r->poll, UV_READABLE, on_ring_ready);
	if (rc < 0) {
		ring_shutdown(s); /* nothing is in flight yet */
		s->ring = NULL;
		return rc;
	}
	s->io = &store_transport_ring;
	return 0;
}

const struct store_transport_ops store_transport_ring = {
	.name = "io_uring",
	.start_read = ring_recv_start,
	.stop_read = ring_recv_stop,
	.write = ring_send,
	.close = ring_conn_close,
	.submit = ring_submit,
	.idle = ring_idle,
	.shutdown = ring_shutdown,
};
