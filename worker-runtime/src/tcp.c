/* tcp: the ring's collectives between node leaders (see tcp.h): a tiny
 * iovec stream with deadlines, the calls' gather, the streamed ring; the
 * ring's setup is tcp_setup.c. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "tcp_int.h"
#include "util.h"

/* All-reduces of up to this many bytes go around the ring once, with the
 * calls' gather (all_reduce_small); larger ones take the ring's two passes. */
#define TCP_SMALL_BYTES (64u << 10)
#define TCP_RING_TMP	(1u << 20)   /* scratch ring a reduce-scatter receives into */
#define TCP_SPIN_US	30	     /* spin this long before a poll that sleeps */
#define TCP_SPIN_FAILS	4	     /* after this many failed spins in a row, */
#define TCP_SPIN_PAUSE	64	     /* this many waits go without */
#define TCP_COMBINE_MIN (256u << 10) /* combine received data in runs of this much */
/* How long a leader whose previous leader closed mid-call waits for that
 * leader's abort record to come round to its right socket (ddpi_tcp_why_peek). */
#define TCP_PEEK_WAIT_MS 200

/* ---- a tiny iovec stream with deadlines ----------------------------------------- */

struct ioq {
	struct iovec *v;
	int n, i;   /* vector and current entry */
	size_t off; /* bytes done in v[i] */
};

static int ioq_done(const struct ioq *q)
{
	return q->i >= q->n;
}

static void ioq_advance(struct ioq *q, size_t k)
{
	while (k && q->i < q->n) {
		size_t left = q->v[q->i].iov_len - q->off;
		if (k < left) {
			q->off += k;
			return;
		}
		k -= left;
		q->i++;
		q->off = 0;
	}
	while (q->i < q->n && q->v[q->i].iov_len == 0)
		q->i++;
}

/* The current error was caused by node g's leader (it did what): name it,
 * with its global rank once the node entries are read. Returns code. */
int ddpi_tcp_leader_cause(const struct ddpi_tcp *t, int code, int g, const char *did)
{
	if (t->ranks && t->ranks[g] && t->nranks[g] > 0)
		return ddpi_caused_by(code, "rank %d (the leader of node %d) %s", t->ranks[g][0], g,
				      did);
	return ddpi_caused_by(code, "the leader of node %d %s", g, did);
}

/* Waits (poll) until the right socket can take more (want_send) or the left
 * one has data (want_recv), or the deadline passes; and watches the right
 * socket for an abort record coming back (ddpi_tcp_why_watch). */
static int wait_io(struct ddpi_tcp *t, int want_send, int want_recv, int64_t deadline,
		   const char *what)
{
	struct pollfd p[2];
	nfds_t np = 0;
	int64_t left = deadline - util_now_ms();
	int watch = t->seq >= t->watch_from && t->right_fd >= 0;

	if (left <= 0)
		return ddpi_tcp_leader_cause(
			t,
			ddpi_err(-ETIMEDOUT, "%s: timed out waiting for the neighbour node", what),
			want_recv ? left_of(t) : right_of(t), "timed out");
	if (want_send || watch)
		p[np++] = (struct pollfd){
			.fd = t->right_fd,
			.events = (short)((want_send ? POLLOUT : 0) | (watch ? POLLIN : 0))};
	if (want_recv)
		p[np++] = (struct pollfd){.fd = t->left_fd, .events = POLLIN};
	/* A short spin first: a neighbour's answer usually comes within a few
	 * microseconds, and a sleeping poll's wakeup costs that again on a busy
	 * machine. Where spins keep failing (leaders sharing cores, a slow
	 * neighbour) they stop for a while: spinning then only starves the peer. */
	int n = 0;
	if (t->nospin > 0) {
		t->nospin--;
	} else {
		uint64_t until = util_now_ns() + TCP_SPIN_US * 1000u;
		while ((n = poll(p, np, 0)) == 0 && util_now_ns() < until)
			;
		t->spin_fails = n == 0 ? t->spin_fails + 1 : 0;
		if (t->spin_fails >= TCP_SPIN_FAILS) {
			t->nospin = TCP_SPIN_PAUSE;
			t->spin_fails = 0;
		}
	}
	if (n == 0)
		n = poll(p, np, left > 1000 ? 1000 : (int)left);
	if (n < 0 && errno != EINTR)
		return ddpi_err(-errno, "%s: poll: %s", what, strerror(errno));
	if (n > 0 && watch && (p[0].revents & (POLLIN | POLLHUP | POLLERR)))
		return ddpi_tcp_why_watch(t, what);
	return 0;
}

/* One non-blocking send of up to 16 entries of q: bytes sent, 0 when the
 * socket is full, or an error naming the next node. */
static ssize_t send_some(struct ddpi_tcp *t, struct iovec *v, int k, const char *what)
{
	struct msghdr mh = {.msg_iov = v, .msg_iovlen = (size_t)k};
	ssize_t w = sendmsg(t->right_fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);

	if (w >= 0)
		return w;
	if (errno == EAGAIN || errno == EINTR)
		return 0;
	return ddpi_tcp_why_peek(
		t,
		ddpi_tcp_leader_cause(t,
				      ddpi_err(DDP_EPEER, "%s: the next node's leader is gone (%s)",
					       what, strerror(errno)),
				      right_of(t), "disconnected"),
		0, what);
}

/* The same for receiving from the previous node (a close is an error). */
static ssize_t recv_some(struct ddpi_tcp *t, struct iovec *v, int k, const char *what)
{
	ssize_t r = readv(t->left_fd, v, k);

	if (r > 0)
		return r;
	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	return ddpi_tcp_why_peek(
		t,
		ddpi_tcp_leader_cause(t,
				      ddpi_err(DDP_EPEER,
					       "%s: the previous node's leader is gone (%s)", what,
					       r == 0 ? "connection closed" : strerror(errno)),
				      left_of(t), "disconnected"),
		TCP_PEEK_WAIT_MS, what);
}

/* Up to 16 entries of q from its current position, as an iovec list. */
static int ioq_window(const struct ioq *q, struct iovec *v)
{
	int k = 0;

	for (int i = q->i; i < q->n && k < 16; i++, k++)
		v[k] = q->v[i];
	if (k) {
		v[0].iov_base = (char *)v[0].iov_base + q->off;
		v[0].iov_len -= q->off;
	}
	return k;
}

/* Sends sq on t->right_fd while receiving rq from t->left_fd (either may be
 * NULL), full duplex, until both are done (or, recv_only, until rq is: the
 * rest of sq goes on in a later call) or the deadline passes. Both sides are
 * tried before waiting: poll only when neither moved. */
static int pump_(struct ddpi_tcp *t, struct ioq *sq, struct ioq *rq, int recv_only,
		 int64_t deadline, const char *what)
{
	if (sq)
		ioq_advance(sq, 0);
	if (rq)
		ioq_advance(rq, 0);
	for (;;) {
		int ws = sq && !ioq_done(sq), wr = rq && !ioq_done(rq), moved = 0, rc;
		struct iovec v[16];
		ssize_t k;

		if (!wr && (recv_only || !ws))
			return 0;
		if (ws) {
			if ((k = send_some(t, v, ioq_window(sq, v), what)) < 0)
				return (int)k;
			ioq_advance(sq, (size_t)k);
			moved |= k > 0;
		}
		if (wr) {
			if ((k = recv_some(t, v, ioq_window(rq, v), what)) < 0)
				return (int)k;
			ioq_advance(rq, (size_t)k);
			moved |= k > 0;
		}
		if (!moved && (rc = wait_io(t, ws, wr, deadline, what)) < 0)
			return rc;
	}
}

static int pump(struct ddpi_tcp *t, struct ioq *sq, struct ioq *rq, int64_t deadline,
		const char *what)
{
	return pump_(t, sq, rq, 0, deadline, what);
}

static int need_tmp(struct ddpi_tcp *t, size_t len)
{
	if (t->tmp_len >= len)
		return 0;
	void *p = realloc(t->tmp, len);
	if (!p)
		return ddpi_err(-ENOMEM, "tcp: no memory for %zu bytes", len);
	t->tmp = p;
	t->tmp_len = len;
	return 0;
}

/* ---- collectives ------------------------------------------------------------------ */

void ddpi_tcp_node_ranks(const struct ddpi_tcp *t, int g, char *buf, size_t len)
{
	const int *r = t->ranks[g];
	int n = t->nranks[g];

	if (n == 1) {
		snprintf(buf, len, "rank %d", r[0]);
	} else if (r[n - 1] - r[0] == n - 1) {
		snprintf(buf, len, "ranks %d-%d", r[0], r[n - 1]);
	} else {
		size_t k = (size_t)snprintf(buf, len, "ranks %d", r[0]);
		for (int i = 1; i < n && k < len; i++)
			k += (size_t)snprintf(buf + k, len - k, ",%d", r[i]);
	}
}

/* The message of a mismatch: one clause per distinct call, its nodes named
 * ("node 0 (ranks 0-3) called X; nodes 1,2 (ranks 4-11) called Y"), the
 * caller's own call first. The same text on every leader but for that order. */
static int mismatch(const struct ddpi_tcp *t, const struct ddpi_call *calls, const char *what)
{
	char msg[1024], desc[96], who[128];
	char *seen = calloc((size_t)t->nnodes, 1);
	size_t k = 0;

	if (!seen)
		return ddpi_err(-EINVAL, "%s: mismatched collectives across nodes", what);
	for (int i = 0; i < t->nnodes && k < sizeof(msg); i++) {
		int g0 = (t->me + i) % t->nnodes, nodes = 0;
		size_t w = 0;
		if (seen[g0])
			continue;
		for (int g = g0, j = i; j < t->nnodes; j++, g = (t->me + j) % t->nnodes) {
			if (seen[g] || memcmp(&calls[g], &calls[g0], sizeof(calls[g])))
				continue;
			seen[g] = 1;
			nodes++;
			if (w < sizeof(who))
				w += (size_t)snprintf(who + w, sizeof(who) - w, "%s%d",
						      nodes > 1 ? "," : "", g);
		}
		ddpi_call_describe(&calls[g0], desc, sizeof(desc));
		if (nodes == 1) {
			char rk[96];
			ddpi_tcp_node_ranks(t, g0, rk, sizeof(rk));
			k += (size_t)snprintf(msg + k, sizeof(msg) - k, "%snode %s (%s) called %s",
					      k ? "; " : "", who, rk, desc);
		} else {
			k += (size_t)snprintf(msg + k, sizeof(msg) - k, "%snodes %s called %s",
					      k ? "; " : "", who, desc);
		}
	}
	free(seen);
	return ddpi_err(-EINVAL, "%s: mismatched collectives across nodes: %s", what, msg);
}

/* The left leader broke the protocol in the calls' gather (it sent desc):
 * this node's own frame of the step, sq, still goes whole, so that the abort
 * record ddpi_tcp_abort sends next can follow it where the next leader reads
 * a frame after it (frame_next: another step's, or the next call's), and the
 * leaders after this one fail with this reason rather than "the previous
 * node's leader is gone". Returns -EPROTO, naming the left leader. */
static int bad_frame(struct ddpi_tcp *t, struct ioq *sq, int frame_next, int64_t deadline,
		     const char *what, const char *desc)
{
	t->at_frame = pump(t, sq, NULL, deadline, what) == 0 && frame_next;
	return ddpi_tcp_leader_cause(t, ddpi_err(-EPROTO, "%s: %s", what, desc), left_of(t),
				     "sent a bad frame");
}

/* The left leader's abort record came in place of a call, while this one
 * sends sq (its frame of the same step): the record's text is read, sq sent
 * whole unless the next leader is the one that failed (then the next leader
 * reads a frame, and the record can follow it where the next leader reads a
 * frame after sq: frame_next, as bad_frame; ddpi_tcp_abort), and the call
 * fails with the record's reason. */
static int abort_read(struct ddpi_tcp *t, const struct ddpi_tcp_frame *in, struct ioq *sq,
		      int frame_next, int64_t deadline, const char *what)
{
	struct iovec v = {t->why.text, in->len};
	struct ioq rq = {&v, 1, 0, 0};
	int rc;

	if (ddpi_tcp_why_begin(t, in) < 0) {
		char desc[96];
		snprintf(desc, sizeof(desc), "a bad abort record (from node %d, %llu bytes)",
			 in->call.root, (unsigned long long)in->len);
		return bad_frame(t, sq, frame_next, deadline, what, desc);
	}
	if ((rc = pump(t, NULL, &rq, deadline, what)) < 0) {
		t->why.from = -1;
		return rc;
	}
	t->at_frame =
		right_of(t) != t->why.from && pump(t, sq, NULL, deadline, what) == 0 && frame_next;
	return ddpi_tcp_why_fail(t, what);
}

/* An all-gather of every leader's call around the ring, with its data when
 * it has some (len bytes at data; slots: nnodes * len bytes, node g's data
 * lands at slots + g * len): step s passes on node (me - s)'s frame. A frame
 * is read in two parts, so the data's length comes from its sender: nodes in
 * different calls (with and without data) still finish the gather, and every
 * leader compares every call, so that all fail alike (-EINVAL, mismatch())
 * when any differs. The data of a call other than mine is read and dropped,
 * and passed on without it (len 0). A leader that failed before its gather
 * sends an abort record instead of its call; it goes round in place of that
 * call (abort_read), one step a leader, so every leader fails with its
 * reason. */
static int gather_calls(struct ddpi_tcp *t, const struct ddpi_call *mine, const void *data,
			size_t len, char *slots, int64_t deadline, const char *what)
{
	int m = t->nnodes, me = t->me, rc = 0, missing = 0;
	struct ddpi_call *calls = calloc((size_t)m, sizeof(*calls));
	const void *fwd = data;
	size_t fwd_len = len;
	/* After the gather the next leader reads the next call's frame, unless
	 * the call's data follows (all but a small all_reduce and a barrier). */
	int then_frame = data || mine->kind == DDPI_BARRIER;

	if (!calls)
		return ddpi_err(-ENOMEM, "%s: no memory", what);
	calls[me] = *mine;
	t->seq = mine->seq;
	t->at_frame = 0;
	for (int s = 0; s < m - 1 && rc == 0; s++) {
		int sg = ((me - s) % m + m) % m, rg = ((me - s - 1) % m + m) % m;
		/* After this step's frame the next leader reads a frame, where
		 * an abort record may follow: the next step's, or the next
		 * call's where the gather is all of this one. */
		int frame_next = s < m - 2 || then_frame;
		struct ddpi_tcp_frame out = {calls[sg], fwd_len}, in;
		struct iovec sv[2] = {{&out, sizeof(out)}, {(void *)fwd, fwd_len}};
		struct iovec rv = {&in, sizeof(in)};
		struct ioq sq = {sv, 2, 0, 0}, rq = {&rv, 1, 0, 0};

		/* A step that fails (a timeout, the previous leader gone) after
		 * this leader's frame of it went whole: the abort record can
		 * follow it (frame_next). */
		if ((rc = pump_(t, &sq, &rq, 1, deadline, what)) < 0) {
			t->at_frame = ioq_done(&sq) && frame_next;
			break;
		}
		if (in.call.kind == DDPI_TCP_ABORT) {
			rc = abort_read(t, &in, &sq, frame_next, deadline, what);
			break;
		}
		if (in.len > TCP_SMALL_BYTES) {
			char desc[64];
			snprintf(desc, sizeof(desc), "a call with %llu bytes of data",
				 (unsigned long long)in.len);
			rc = bad_frame(t, &sq, frame_next, deadline, what, desc);
			break;
		}
		int keep = in.len == len && !memcmp(&in.call, mine, sizeof(*mine));
		if (!keep && (rc = need_tmp(t, in.len)) < 0)
			break;
		calls[rg] = in.call;
		missing |= !keep;
		rv = (struct iovec){keep ? slots + (size_t)rg * len : t->tmp, in.len};
		rq = (struct ioq){&rv, 1, 0, 0};
		if ((rc = pump(t, &sq, &rq, deadline, what)) < 0) {
			t->at_frame = ioq_done(&sq) && frame_next;
			break;
		}
		fwd = keep ? rv.iov_base : NULL;
		fwd_len = keep ? len : 0;
	}
	for (int g = 0; g < m && rc == 0; g++)
		if (memcmp(&calls[g], mine, sizeof(*mine)))
			rc = mismatch(t, calls, what);
	/* Every call equal, yet some data was dropped: a sender broke the rules. */
	if (rc == 0 && missing)
		rc = ddpi_err(-EPROTO, "%s: a node's data went missing around the ring", what);
	free(calls);
	return rc;
}

int ddpi_tcp_agree(struct ddpi_tcp *t, const struct ddpi_call *mine, int64_t deadline,
		   const char *what)
{
	int rc = gather_calls(t, mine, NULL, 0, NULL, deadline, what);

	/* A barrier's ring part ends here; every other call's data follows. A
	 * failure leaves what abort_read set: a record read in the gather is
	 * passed on after this node's whole frame. */
	if (rc == 0)
		t->at_frame = mine->kind == DDPI_BARRIER;
	return rc;
}

static void block_bounds(size_t count, int m, int b, size_t *lo, size_t *hi)
{
	size_t per = count / (size_t)m, rem = count % (size_t)m;
	*lo = (size_t)b * per + ((size_t)b < rem ? (size_t)b : rem);
	*hi = *lo + per + ((size_t)b < rem);
}

/* ---- the streamed ring -------------------------------------------------------------- */

/* One step of a ring: send slen bytes at send while receiving rlen bytes at
 * recv (combined into what is there when reduce is set). The step's sending
 * may only run as far as recv step gate has got (received, and reduced when
 * it reduces); gate < 0: no limit. */
struct rstep {
	char *send, *recv;
	size_t slen, rlen;
	int gate, reduce;
};

struct ring_io {
	struct ddpi_tcp *t;
	struct rstep *st;
	int n;
	enum ddp_dtype dt;
	enum ddp_op op;
	size_t es;
	int ks, kr;	/* current send and receive step */
	size_t os, or_; /* bytes sent, received in them */
	size_t red;	/* bytes of recv step kr combined so far */
};

/* How far recv step k has got, for a send gated on it. */
static size_t ring_progress(const struct ring_io *r, int k)
{
	if (r->kr > k)
		return r->st[k].rlen;
	if (r->kr < k)
		return 0;
	return r->st[k].reduce ? r->red : r->or_;
}

/* Combine what has arrived of a reducing step, in whole elements (from the
 * scratch ring at t->tmp, where element i of the step sits at (i * es) mod
 * TCP_RING_TMP: a receive never crosses the ring's end, and ring_run
 * combines whenever one ends there, so a run since red never wraps). */
static void ring_combine(struct ring_io *r)
{
	const struct rstep *st = &r->st[r->kr];
	size_t upto = r->or_ / r->es * r->es;

	if (upto <= r->red)
		return;
	char *dst = st->recv + r->red;
	const void *src[2] = {(char *)r->t->tmp + r->red % TCP_RING_TMP, dst};
	ddpi_reduce(r->dt, r->op, dst, src, 2, (upto - r->red) / r->es, 1);
	r->red = upto;
}

/* Runs the steps as one stream each way: each byte is sent as soon as the
 * step it comes from has it, so the link never waits for a step to end, and
 * a reduction overlaps the transfer of what follows it (NCCL's and gloo's
 * pipelined rings do the same in slices). */
static int ring_run(struct ring_io *r, int64_t deadline, const char *what)
{
	for (;;) {
		struct rstep *ss = r->ks < r->n ? &r->st[r->ks] : NULL;
		struct rstep *rs = r->kr < r->n ? &r->st[r->kr] : NULL;
		int moved = 0, want_send = 0, rc;
		ssize_t k;

		if (ss && r->os == ss->slen) {
			r->ks++;
			r->os = 0;
			continue;
		}
		if (rs && r->or_ == rs->rlen) {
			if (rs->reduce)
				ring_combine(r);
			r->kr++;
			r->or_ = r->red = 0;
			continue;
		}
		if (!ss && !rs)
			return 0;
		if (ss) {
			size_t lim = ss->gate < 0 ? ss->slen : ring_progress(r, ss->gate);
			if (lim > r->os) {
				struct iovec v = {ss->send + r->os, lim - r->os};
				if ((k = send_some(r->t, &v, 1, what)) < 0)
					return (int)k;
				r->os += (size_t)k;
				moved |= k > 0;
				want_send = 1;
			}
		}
		if (rs) {
			struct iovec v = {rs->recv + r->or_, rs->rlen - r->or_};
			if (rs->reduce) {
				size_t at = r->or_ % TCP_RING_TMP, room = TCP_RING_TMP - at;
				v = (struct iovec){(char *)r->t->tmp + at,
						   v.iov_len < room ? v.iov_len : room};
			}
			if ((k = recv_some(r->t, &v, 1, what)) < 0)
				return (int)k;
			r->or_ += (size_t)k;
			moved |= k > 0;
			/* Combine in runs long enough for the kernels, before waiting,
			 * and at the scratch ring's end (a run must not wrap). */
			if (rs->reduce && (r->or_ - r->red >= TCP_COMBINE_MIN || !k ||
					   r->or_ % TCP_RING_TMP == 0))
				ring_combine(r);
		}
		if (!moved && (rc = wait_io(r->t, want_send, rs != NULL, deadline, what)) < 0)
			return rc;
	}
}

static int ring_steps(struct ddpi_tcp *t, struct rstep *st, int n, enum ddp_dtype dt,
		      enum ddp_op op, int64_t deadline, const char *what)
{
	struct ring_io r = {.t = t, .st = st, .n = n, .dt = dt, .op = op, .es = ddp_dtype_size(dt)};
	int rc = 0;

	for (int k = 0; k < n && rc == 0; k++)
		if (st[k].reduce)
			rc = need_tmp(t, TCP_RING_TMP);
	return rc < 0 ? rc : ring_run(&r, deadline, what);
}

/* Small: the calls' gather carries every node's buffer, and each node
 * combines them all in node order (the same bits everywhere): one trip
 * around the ring instead of three. */
static int all_reduce_small(struct ddpi_tcp *t, const struct ddpi_call *call, void *buf,
			    size_t count, enum ddp_dtype dt, enum ddp_op op, int64_t deadline)
{
	size_t bytes = count * ddp_dtype_size(dt);
	int m = t->nnodes, rc;
	const void **src = calloc((size_t)m, sizeof(*src));
	char *slots = malloc((size_t)m * bytes + 1);

	if (!src || !slots) {
		rc = ddpi_err(-ENOMEM, "all_reduce: no memory");
		goto out;
	}
	if ((rc = gather_calls(t, call, buf, bytes, slots, deadline, "all_reduce")) < 0)
		goto out;
	t->at_frame = 1;
	for (int g = 0; g < m; g++)
		src[g] = g == t->me ? buf : slots + (size_t)g * bytes;
	ddpi_reduce(dt, op, buf, src, m, count, 1);
out:
	free(src);
	free(slots);
	return rc;
}

int ddpi_tcp_all_reduce(struct ddpi_tcp *t, const struct ddpi_call *call, void *buf, size_t count,
			enum ddp_dtype dt, enum ddp_op op, int64_t deadline)
{
	size_t es = ddp_dtype_size(dt);
	int m = t->nnodes, me = t->me, rc;
	char *b = buf;

	if (count * es <= TCP_SMALL_BYTES)
		return all_reduce_small(t, call, buf, count, dt, op, deadline);
	if ((rc = ddpi_tcp_agree(t, call, deadline, "all_reduce")) < 0)
		return rc;
	ddpi_tcp_cc_for(t, count * es);
	struct rstep *st = calloc((size_t)(2 * (m - 1)), sizeof(*st));
	if (!st)
		return ddpi_err(-ENOMEM, "all_reduce: no memory");
	/* Reduce-scatter (after m-1 steps node r holds block r+1 complete), then
	 * all-gather of the complete blocks: each step sends the block the step
	 * before received, so each is gated on the one before. */
	for (int k = 0; k < 2 * (m - 1); k++) {
		int rsk = k < m - 1, s = rsk ? k : k - (m - 1);
		int sb = rsk ? me - s : me + 1 - s, rb = rsk ? me - s - 1 : me - s;
		size_t slo, shi, rlo, rhi;
		block_bounds(count, m, (sb % m + m) % m, &slo, &shi);
		block_bounds(count, m, (rb % m + m) % m, &rlo, &rhi);
		st[k] = (struct rstep){b + slo * es,	 b + rlo * es, (shi - slo) * es,
				       (rhi - rlo) * es, k - 1,	       rsk};
	}
	rc = ring_steps(t, st, 2 * (m - 1), dt, op, deadline, "all_reduce");
	t->at_frame = rc == 0;
	free(st);
	return rc;
}

int ddpi_tcp_broadcast(struct ddpi_tcp *t, void *buf, size_t bytes, int root, int64_t deadline)
{
	int m = t->nnodes, rn = t->node_of[root];
	int first = t->me == rn, last = (t->me + 1) % m == rn;
	/* Down the ring from the root's node, each byte passed on once it is in. */
	struct rstep st = {buf, buf, last ? 0 : bytes, first ? 0 : bytes, first ? -1 : 0, 0};

	ddpi_tcp_cc_for(t, bytes);
	int rc = ring_steps(t, &st, 1, DDP_FLOAT32, DDP_SUM, deadline, "broadcast"); /* no reduce */
	t->at_frame = rc == 0;
	return rc;
}

/* The pieces of node g's ranks inside recv, as an iovec list. */
static struct iovec *node_iov(struct ddpi_tcp *t, int g, void *recv, size_t bytes)
{
	struct iovec *v = calloc((size_t)t->nranks[g], sizeof(*v));
	if (!v)
		return NULL;
	for (int i = 0; i < t->nranks[g]; i++)
		v[i] = (struct iovec){(char *)recv + (size_t)t->ranks[g][i] * bytes, bytes};
	return v;
}

int ddpi_tcp_all_gather(struct ddpi_tcp *t, void *recv, size_t bytes, int64_t deadline)
{
	int m = t->nnodes, me = t->me, rc = 0;

	ddpi_tcp_cc_for(t, bytes * (size_t)t->world);
	for (int s = 0; s < m - 1 && rc == 0; s++) {
		int sg = ((me - s) % m + m) % m, rg = ((me - s - 1) % m + m) % m;
		struct iovec *sv = node_iov(t, sg, recv, bytes), *rv = node_iov(t, rg, recv, bytes);
		if (!sv || !rv) {
			rc = ddpi_err(-ENOMEM, "all_gather: no memory");
		} else {
			struct ioq sq = {sv, t->nranks[sg], 0, 0}, rq = {rv, t->nranks[rg], 0, 0};
			rc = pump(t, &sq, &rq, deadline, "all_gather");
		}
		free(sv);
		free(rv);
	}
	t->at_frame = rc == 0;
	return rc;
}
