/* storebench_uring.h: storebench's closed-loop ops and rendezvous drivers on
 * io_uring.
 *
 * Part of storebench.c, which includes it once, after what the drivers share
 * with the libuv ones: struct bconn and struct result, the connection table
 * and counters, the phase flags, the dialect and its hello, build_ops(),
 * ops_record() and rdzv_put(). A
 * header rather than a .c so that the Makefile's rule (one program per
 * bench/<dir>/<file>.c) still holds.
 *
 * Why: on a VM a system call costs about a microsecond, and the libuv driver
 * makes two or three per op (write, read, its share of epoll_wait) on the
 * machine whose server it measures. Here every connection has one multishot
 * receive armed, whose replies land in a ring of provided buffers, and one
 * io_uring_enter per loop iteration hands over all the iteration's requests
 * and waits for the next replies. A rendezvous client is a linked connect,
 * send and receive, then a linked send and receive: no system call of its
 * own once its socket exists.
 *
 * Needs Linux 6.1 (DEFER_TASKRUN; multishot receive came with 6.0):
 * uring_open() fails with -EINVAL on older kernels and -ENOSYS or -EPERM where
 * io_uring is missing or disabled, and storebench runs the libuv driver. */
#ifndef STOREBENCH_URING_H
#define STOREBENCH_URING_H

#ifdef DDP_HAVE_URING
#include <liburing.h>
#include <sys/mman.h>
#include <sys/socket.h>

/* user_data: the connection's index, shifted, and the kind of entry. */
enum { URING_RECV = 0, URING_SEND = 1, URING_CONNECT = 2 };
#define URING_KIND_BITS 2
#define URING_KIND_MASK ((1u << URING_KIND_BITS) - 1)
/* A reply is at most 8 + VALUE_LEN bytes, and one at a time is in flight on
 * a connection. Running out of buffers is not an error: the receive ends with
 * ENOBUFS and is armed again once the iteration gave its buffers back. */
#define URING_BUFSZ 128
#define URING_BGID  1

static struct io_uring uring;
static struct io_uring_buf_ring *uring_br;
static size_t uring_br_size;
static uint8_t *uring_bufs;
static unsigned uring_nbuf;
static unsigned uring_nret; /* buffers given back since the last advance */
/* Connections whose request is queued but not yet handed to the kernel:
 * their clocks start when it is. */
static int *uring_queued;
static int uring_nqueued;

static unsigned uring_pow2(unsigned n, unsigned min, unsigned max)
{
	unsigned p = min;

	while (p < n && p < max)
		p <<= 1;
	return p;
}

static void uring_close(void)
{
	io_uring_queue_exit(&uring);
	if (uring_br != MAP_FAILED)
		munmap(uring_br, uring_br_size);
	uring_br = MAP_FAILED;
	free(uring_bufs);
	free(uring_queued);
	uring_bufs = NULL;
	uring_queued = NULL;
}

/* The ring for n connections, its receive buffers registered. */
static int uring_open(int n)
{
	struct io_uring_params p;
	struct io_uring_buf_reg reg;
	unsigned i;
	int rc;

	/* DEFER_TASKRUN: completions are run in a batch when the loop waits for
	 * them, never interrupting it; a worker creates and uses its ring on one
	 * thread (SINGLE_ISSUER). Entries: an ops connection queues at most a
	 * SEND and a receive per iteration; the completion queue is twice that.
	 * (A completion queue that fills up anyway loses nothing: the kernel
	 * keeps the overflow, IORING_FEAT_NODROP, and hands it over later.) */
	memset(&p, 0, sizeof(p));
	p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
	rc = io_uring_queue_init_params(uring_pow2(2 * (unsigned)n, 64, 4096), &uring, &p);
	if (rc < 0)
		return rc;
	uring_nbuf = uring_pow2((unsigned)n, 64, 32768);
	uring_br_size = uring_nbuf * sizeof(struct io_uring_buf);
	uring_br = mmap(NULL, uring_br_size, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE,
			-1, 0);
	uring_bufs = malloc((size_t)uring_nbuf * URING_BUFSZ);
	uring_queued = calloc((size_t)n, sizeof(*uring_queued));
	if (uring_br == MAP_FAILED || uring_bufs == NULL || uring_queued == NULL) {
		rc = -ENOMEM;
		goto fail;
	}
	memset(&reg, 0, sizeof(reg));
	reg.ring_addr = (uint64_t)(uintptr_t)uring_br;
	reg.ring_entries = uring_nbuf;
	reg.bgid = URING_BGID;
	rc = io_uring_register_buf_ring(&uring, &reg, 0);
	if (rc < 0)
		goto fail;
	io_uring_buf_ring_init(uring_br);
	for (i = 0; i < uring_nbuf; i++)
		io_uring_buf_ring_add(uring_br, uring_bufs + (size_t)i * URING_BUFSZ, URING_BUFSZ,
				      (unsigned short)i, io_uring_buf_ring_mask(uring_nbuf),
				      (int)i);
	io_uring_buf_ring_advance(uring_br, (int)uring_nbuf);
	uring_nret = 0;
	uring_nqueued = 0;
	return 0;
fail:
	uring_close();
	return rc;
}

static uint64_t uring_tag(const struct bconn *c, unsigned kind)
{
	return (uint64_t)(c - conns) << URING_KIND_BITS | kind;
}

/* The queued requests are about to be handed to the kernel: their latency
 * starts now, as it does in the libuv driver just before its write(). */
static uint64_t uring_stamp(void)
{
	uint64_t now = uv_hrtime();
	int i;

	for (i = 0; i < uring_nqueued; i++)
		conns[uring_queued[i]].t0 = now;
	uring_nqueued = 0;
	return now;
}

static struct io_uring_sqe *uring_sqe(void)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&uring);

	if (sqe == NULL) { /* queue full: hand it over now */
		uring_stamp();
		io_uring_submit(&uring);
		sqe = io_uring_get_sqe(&uring);
	}
	return sqe;
}

/* Shut down, not closed: the armed receive then completes (with 0, its CQE
 * ignored) and the server sees the connection end. Used by both modes (in
 * rdzv nothing is outstanding). */
static void uring_fail(struct bconn *c)
{
	if (c->closed)
		return;
	c->closed = true;
	nerrors++;
	shutdown(c->fd, SHUT_RDWR);
	if (outstanding > 0)
		outstanding--;
}

static void uring_recv(struct bconn *c)
{
	struct io_uring_sqe *sqe = uring_sqe();

	if (sqe == NULL) {
		uring_fail(c);
		return;
	}
	io_uring_prep_recv_multishot(sqe, c->fd, NULL, 0, 0);
	sqe->flags |= IOSQE_BUFFER_SELECT;
	sqe->buf_group = URING_BGID;
	io_uring_sqe_set_data64(sqe, uring_tag(c, URING_RECV));
}

/* The connection's next op, or its retirement once the run is over. */
static void uring_next(struct bconn *c)
{
	const struct store_buf *b = &c->req[c->step];
	struct io_uring_sqe *sqe;

	if (stopping) {
		c->closed = true; /* whatever it receives now is not counted */
		outstanding--;
		return;
	}
	sqe = uring_sqe();
	if (sqe == NULL) {
		uring_fail(c);
		return;
	}
	c->got = 0;
	c->expect = c->step == 0 ? 8 + VALUE_LEN : 8;
	/* MSG_WAITALL: the kernel finishes a short send itself, so only a
	 * failed one posts a completion. */
	io_uring_prep_send(sqe, c->fd, b->p, b->len, MSG_WAITALL);
	sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
	io_uring_sqe_set_data64(sqe, uring_tag(c, URING_SEND));
	uring_queued[uring_nqueued++] = (int)(c - conns);
}

/* A receive's completion; `now` is when the loop got it from the kernel. */
static void uring_received(struct bconn *c, const struct io_uring_cqe *cqe, uint64_t now)
{
	if (cqe->flags & IORING_CQE_F_BUFFER) {
		unsigned bid = cqe->flags >> IORING_CQE_BUFFER_SHIFT;

		io_uring_buf_ring_add(uring_br, uring_bufs + (size_t)bid * URING_BUFSZ, URING_BUFSZ,
				      (unsigned short)bid, io_uring_buf_ring_mask(uring_nbuf),
				      (int)uring_nret++);
	}
	if (cqe->res <= 0 && cqe->res != -ENOBUFS) {
		uring_fail(c); /* the server closed, or an error */
		return;
	}
	if (cqe->res > 0 && !c->closed) {
		if (c->got + (size_t)cqe->res > c->expect) { /* nothing else is ever in flight */
			uring_fail(c);
			return;
		}
		c->got += (size_t)cqe->res;
		if (c->got == c->expect) {
			ops_record(c, now);
			c->step ^= 1;
			uring_next(c);
		}
	}
	if (!(cqe->flags & IORING_CQE_F_MORE) && !c->closed)
		uring_recv(c);
}

static void uring_reap(uint64_t now)
{
	struct io_uring_cqe *cqe;
	unsigned head, n = 0;

	io_uring_for_each_cqe(&uring, head, cqe)
	{
		struct bconn *c = &conns[cqe->user_data >> URING_KIND_BITS];

		n++;
		if ((cqe->user_data & URING_KIND_MASK) == URING_SEND)
			uring_fail(c); /* posted only when it failed */
		else
			uring_received(c, cqe, now);
	}
	io_uring_cq_advance(&uring, n);
	if (uring_nret > 0) {
		io_uring_buf_ring_advance(uring_br, (int)uring_nret);
		uring_nret = 0;
	}
}

/* Blocking connects (not timed), each with its receive armed. */
static void uring_connect_all(void)
{
	socklen_t len = addr.ss_family == AF_INET ? sizeof(struct sockaddr_in)
						  : sizeof(struct sockaddr_in6);
	int i;

	for (i = 0; i < nconns; i++) {
		struct bconn *c = &conns[i];

		build_ops(c);
		c->fd = socket(addr.ss_family, SOCK_STREAM, 0);
		/* 2.x: VALIDATE first (no reply; 5 bytes on a new blocking socket) */
		if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&addr, len) < 0 ||
		    (dialect == STORE_DIALECT_V2 &&
		     send(c->fd, hello.p, hello.len, MSG_WAITALL) != (ssize_t)hello.len)) {
			if (c->fd >= 0)
				close(c->fd);
			c->closed = true;
			nerrors++;
			continue;
		}
		c->connected = true;
		nconnected++;
		uring_recv(c);
	}
	io_uring_submit(&uring);
}

/* Hands over the queued entries and waits for a completion, until `until`
 * at the latest. */
static int uring_enter(uint64_t until)
{
	uint64_t now = uring_stamp();
	uint64_t left = until > now ? until - now : 0;
	struct __kernel_timespec ts = {.tv_sec = (long long)(left / 1000000000),
				       .tv_nsec = (long long)(left % 1000000000)};
	struct io_uring_cqe *cqe;

	return io_uring_submit_and_wait_timeout(&uring, &cqe, 1, &ts, NULL);
}

/* The closed loop, from the go signal until every connection has had its
 * reply after t_stop (or the deadline): the libuv driver's phases, kept by
 * the clock instead of timers. */
static void uring_run(double seconds)
{
	uint64_t t_phase = t_start + (uint64_t)(seconds * 0.2e9);
	uint64_t deadline = t_start + (uint64_t)(seconds * 3e9) + 30000000000ull;
	int i;

	outstanding = nconns - nerrors;
	for (i = 0; i < nconns; i++)
		if (!conns[i].closed)
			uring_next(&conns[i]);
	while (outstanding > 0) {
		int rc = uring_enter(!measuring ? t_phase : !stopping ? t_stop : deadline);
		uint64_t now = uv_hrtime();

		if (!measuring && now >= t_phase) {
			measuring = true;
			t_measure = now;
		}
		if (now >= t_stop)
			stopping = true;
		if (now >= deadline)
			break;
		if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
			fprintf(stderr, "storebench: io_uring_enter: %s\n", strerror(-rc));
			nerrors += outstanding;
			break;
		}
		uring_reap(now);
	}
}

/* ---- rendezvous ------------------------------------------------------------------ */

/* The requests, the same for every client, so shared by all their sends. */
enum { URING_RQ_ADD, URING_RQ_WAIT, URING_RQ_SET_WAIT, URING_NRQ };
static struct store_buf uring_rq[URING_NRQ];

/* Before the go signal (not timed, as libuv's socket creation is not a
 * connect either): the requests and every client's socket. */
static void uring_rdzv_prepare(void)
{
	int i;

	for (i = 0; i < URING_NRQ; i++)
		store_buf_init(&uring_rq[i]);
	rdzv_put(&uring_rq[URING_RQ_ADD], STORE_OP_ADD);
	rdzv_put(&uring_rq[URING_RQ_WAIT], STORE_OP_WAIT);
	/* The last client's SET and WAIT, one after the other, as libuv writes them. */
	rdzv_put(&uring_rq[URING_RQ_SET_WAIT], STORE_OP_SET);
	rdzv_put(&uring_rq[URING_RQ_SET_WAIT], STORE_OP_WAIT);
	for (i = 0; i < nconns; i++) {
		struct bconn *c = &conns[i];

		c->fd = -1;
		if (uring_rq[URING_RQ_SET_WAIT].err == 0)
			c->fd = socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (c->fd < 0) { /* counted as libuv counts a failed uv_tcp_connect */
			c->closed = true;
			nerrors++;
		}
	}
}

/* Room for n entries at once: a link chain must not be split over two
 * submissions, or its tail would run unlinked. */
static bool uring_room(unsigned n)
{
	if (io_uring_sq_space_left(&uring) < n)
		io_uring_submit(&uring);
	return io_uring_sq_space_left(&uring) >= n;
}

/* The receive of the reply, into what is left of c->reply: as with libuv, a
 * reply longer than expected is seen, and fails the client. */
static void uring_rdzv_prep_recv(struct bconn *c, struct io_uring_sqe *sqe)
{
	io_uring_prep_recv(sqe, c->fd, c->reply + c->got, sizeof(c->reply) - c->got, 0);
	io_uring_sqe_set_data64(sqe, uring_tag(c, URING_RECV));
}

/* Request rq and the receive of its reply, after a connect if `connect`: one
 * chain, so the kernel sends once connected and receives once sent, without
 * waiting for this loop. A send posts a completion only when it fails
 * (MSG_WAITALL: the kernel finishes a short one itself); a link that fails
 * cancels the rest of the chain, whose completions then say -ECANCELED. */
static void uring_rdzv_chain(struct bconn *c, int rq, bool connect)
{
	socklen_t len = addr.ss_family == AF_INET ? sizeof(struct sockaddr_in)
						  : sizeof(struct sockaddr_in6);
	const struct store_buf *b = &uring_rq[rq];
	struct io_uring_sqe *sqe;

	if (!uring_room(connect ? 3 : 2)) {
		uring_fail(c);
		return;
	}
	if (connect) {
		sqe = io_uring_get_sqe(&uring);
		io_uring_prep_connect(sqe, c->fd, (struct sockaddr *)&addr, len);
		io_uring_sqe_set_data64(sqe, uring_tag(c, URING_CONNECT));
		sqe->flags |= IOSQE_IO_LINK;
	}
	sqe = io_uring_get_sqe(&uring);
	io_uring_prep_send(sqe, c->fd, b->p, b->len, MSG_WAITALL);
	io_uring_sqe_set_data64(sqe, uring_tag(c, URING_SEND));
	sqe->flags |= IOSQE_IO_LINK | IOSQE_CQE_SKIP_SUCCESS;
	uring_rdzv_prep_recv(c, io_uring_get_sqe(&uring));
}

/* A reply's bytes: the ADD's count, then the WAIT's STOP_WAITING. */
static void uring_rdzv_received(struct bconn *c, int res)
{
	int64_t v;

	if (res <= 0) { /* the server closed, an error, or a cancelled link */
		uring_fail(c);
		return;
	}
	c->got += (size_t)res;
	if (c->got > c->expect) { /* nothing else is ever in flight */
		uring_fail(c);
		return;
	}
	if (c->got < c->expect) {
		if (uring_room(1))
			uring_rdzv_prep_recv(c, io_uring_get_sqe(&uring));
		else
			uring_fail(c);
		return;
	}
	if (c->step == 1) {
		ndone++;
		c->closed = true; /* closed after the measurement */
		return;
	}
	memcpy(&v, c->reply, 8);
	c->step = 1;
	c->got = 0;
	c->expect = 1;
	uring_rdzv_chain(c, v == rdzv_target ? URING_RQ_SET_WAIT : URING_RQ_WAIT, false);
}

static void uring_rdzv_reap(uint64_t now)
{
	struct io_uring_cqe *cqe;
	unsigned head, n = 0;

	io_uring_for_each_cqe(&uring, head, cqe)
	{
		struct bconn *c = &conns[cqe->user_data >> URING_KIND_BITS];
		unsigned kind = cqe->user_data & URING_KIND_MASK;

		n++;
		if (c->closed)
			continue;
		if (kind == URING_CONNECT && cqe->res == 0) {
			c->connected = true;
			nconnected++;
			t_connected = now;
		} else if (kind == URING_RECV) {
			uring_rdzv_received(c, cqe->res);
		} else { /* a failed connect, or a send (posted only when it failed) */
			uring_fail(c);
		}
	}
	io_uring_cq_advance(&uring, n);
}

/* From the go signal until every client has its STOP_WAITING or failed, or
 * RDZV_TIMEOUT_MS passed (libuv's deadline). Sockets are closed afterwards:
 * not timed. */
static void uring_rdzv_run(struct result *r)
{
	uint64_t deadline = t_start + (uint64_t)RDZV_TIMEOUT_MS * 1000000;
	int i;

	for (i = 0; i < nconns; i++) {
		conns[i].expect = 8;
		if (!conns[i].closed)
			uring_rdzv_chain(&conns[i], URING_RQ_ADD, true);
	}
	while (ndone + nerrors < nconns) {
		int rc = uring_enter(deadline);
		uint64_t now = uv_hrtime();

		if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
			fprintf(stderr, "storebench: io_uring_enter: %s\n", strerror(-rc));
			break;
		}
		uring_rdzv_reap(now);
		if (now >= deadline)
			break;
	}
	r->t_end = uv_hrtime();
	r->t_connected = t_connected;
	uring_close(); /* cancels whatever is still armed */
	for (i = 0; i < nconns; i++)
		if (conns[i].fd >= 0)
			close(conns[i].fd);
	for (i = 0; i < URING_NRQ; i++)
		store_buf_free(&uring_rq[i]);
}

#else /* !DDP_HAVE_URING: built without liburing, the libuv drivers only */

static inline int uring_open(int n)
{
	return -ENOSYS;
}

static inline void uring_close(void)
{
}

static inline void uring_connect_all(void)
{
}

static inline void uring_run(double seconds)
{
}

static inline void uring_rdzv_prepare(void)
{
}

static inline void uring_rdzv_run(struct result *r)
{
}

#endif
#endif
