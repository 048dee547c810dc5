/* tcp: ring collectives between node leaders (see tcp.h). */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "store_client.h"
#include "tcp.h"
#include "util.h"

#define HELLO_MAGIC 0x44445054u /* "DDPT" */
#define SEG_BYTES   (4u << 20)	/* ring steps move at most this much at once */

struct hello {
	uint32_t magic;
	uint32_t node;
	uint32_t restart;
	uint32_t world;
};

struct ddpi_tcp {
	int nnodes, me, world, restart;
	int left_fd, right_fd;
	int *node_of; /* global rank -> node */
	int **ranks;  /* node -> its global ranks, ascending */
	int *nranks;  /* node -> count */
	void *tmp;    /* receive scratch for reductions and packed blocks */
	size_t tmp_len;
};

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

static int left_of(const struct ddpi_tcp *t)
{
	return (t->me - 1 + t->nnodes) % t->nnodes;
}

static int right_of(const struct ddpi_tcp *t)
{
	return (t->me + 1) % t->nnodes;
}

/* The current error was caused by node g's leader (it did what): name it,
 * with its global rank once the node entries are read. Returns code. */
static int leader_cause(const struct ddpi_tcp *t, int code, int g, const char *did)
{
	if (t->ranks && t->ranks[g] && t->nranks[g] > 0)
		return ddpi_caused_by(code, "rank %d (the leader of node %d) %s", t->ranks[g][0], g,
				      did);
	return ddpi_caused_by(code, "the leader of node %d %s", g, did);
}

/* Sends sq on t->right_fd while receiving rq from t->left_fd (either may be
 * NULL), full duplex, until both are done or the deadline passes. */
static int pump(struct ddpi_tcp *t, struct ioq *sq, struct ioq *rq, int64_t deadline,
		const char *what)
{
	if (sq)
		ioq_advance(sq, 0);
	if (rq)
		ioq_advance(rq, 0);
	while ((sq && !ioq_done(sq)) || (rq && !ioq_done(rq))) {
		struct pollfd p[2];
		int np = 0, si = -1, ri = -1;
		int64_t left = deadline - util_now_ms();

		if (left <= 0)
			return leader_cause(
				t,
				ddpi_err(-ETIMEDOUT, "%s: timed out waiting for the neighbour node",
					 what),
				rq && !ioq_done(rq) ? left_of(t) : right_of(t), "timed out");
		if (sq && !ioq_done(sq)) {
			si = np;
			p[np++] = (struct pollfd){.fd = t->right_fd, .events = POLLOUT};
		}
		if (rq && !ioq_done(rq)) {
			ri = np;
			p[np++] = (struct pollfd){.fd = t->left_fd, .events = POLLIN};
		}
		int n = poll(p, (nfds_t)np, left > 1000 ? 1000 : (int)left);
		if (n < 0 && errno != EINTR)
			return ddpi_err(-errno, "%s: poll: %s", what, strerror(errno));
		if (n <= 0)
			continue;
		if (si >= 0 && p[si].revents) {
			struct iovec v[16];
			int k = 0;
			for (int i = sq->i; i < sq->n && k < 16; i++, k++)
				v[k] = sq->v[i];
			if (k == 0)
				continue; /* cannot happen: the queue is not done */
			v[0].iov_base = (char *)v[0].iov_base + sq->off;
			v[0].iov_len -= sq->off;
			struct msghdr mh = {.msg_iov = v, .msg_iovlen = (size_t)k};
			ssize_t w = sendmsg(t->right_fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
			if (w < 0 && errno != EAGAIN && errno != EINTR)
				return leader_cause(
					t,
					ddpi_err(DDP_EPEER,
						 "%s: the next node's leader is gone (%s)", what,
						 strerror(errno)),
					right_of(t), "disconnected");
			if (w > 0)
				ioq_advance(sq, (size_t)w);
		}
		if (ri >= 0 && p[ri].revents) {
			struct iovec v[16];
			int k = 0;
			for (int i = rq->i; i < rq->n && k < 16; i++, k++)
				v[k] = rq->v[i];
			if (k == 0)
				continue; /* cannot happen: the queue is not done */
			v[0].iov_base = (char *)v[0].iov_base + rq->off;
			v[0].iov_len -= rq->off;
			ssize_t r = readv(t->left_fd, v, k);
			if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
				return leader_cause(
					t,
					ddpi_err(DDP_EPEER,
						 "%s: the previous node's leader is gone (%s)",
						 what,
						 r == 0 ? "connection closed" : strerror(errno)),
					left_of(t), "disconnected");
			if (r > 0)
				ioq_advance(rq, (size_t)r);
		}
	}
	return 0;
}

static int send_recv(struct ddpi_tcp *t, const void *sbuf, size_t slen, void *rbuf, size_t rlen,
		     int64_t deadline, const char *what)
{
	struct iovec sv = {(void *)sbuf, slen}, rv = {rbuf, rlen};
	struct ioq sq = {&sv, 1, 0, 0}, rq = {&rv, 1, 0, 0};

	return pump(t, sbuf ? &sq : NULL, rbuf ? &rq : NULL, deadline, what);
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

/* "ranks 4-7" or "ranks 4,6,9" (node g's ranks, ascending), at most len bytes. */
static void node_ranks(const struct ddpi_tcp *t, int g, char *buf, size_t len)
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
			node_ranks(t, g0, rk, sizeof(rk));
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

int ddpi_tcp_agree(struct ddpi_tcp *t, const struct ddpi_call *mine, int64_t deadline,
		   const char *what)
{
	int m = t->nnodes, me = t->me, rc = 0;
	struct ddpi_call *calls = calloc((size_t)m, sizeof(*calls));

	if (!calls)
		return ddpi_err(-ENOMEM, "%s: no memory", what);
	calls[me] = *mine;
	/* An all-gather of one descriptor: step s passes on node (me - s)'s. */
	for (int s = 0; s < m - 1 && rc == 0; s++) {
		int sg = ((me - s) % m + m) % m, rg = ((me - s - 1) % m + m) % m;
		rc = send_recv(t, &calls[sg], sizeof(calls[sg]), &calls[rg], sizeof(calls[rg]),
			       deadline, what);
	}
	for (int g = 0; g < m && rc == 0; g++)
		if (memcmp(&calls[g], mine, sizeof(*mine)))
			rc = mismatch(t, calls, what);
	free(calls);
	return rc;
}

static void block_bounds(size_t count, int m, int b, size_t *lo, size_t *hi)
{
	size_t per = count / (size_t)m, rem = count % (size_t)m;
	*lo = (size_t)b * per + ((size_t)b < rem ? (size_t)b : rem);
	*hi = *lo + per + ((size_t)b < rem);
}

int ddpi_tcp_all_reduce(struct ddpi_tcp *t, void *buf, size_t count, enum ddp_dtype dt,
			enum ddp_op op, int64_t deadline)
{
	size_t es = ddp_dtype_size(dt);
	int m = t->nnodes, me = t->me, rc;
	char *b = buf;

	/* Reduce-scatter: after m-1 steps node r holds block r+1 complete. */
	for (int s = 0; s < m - 1; s++) {
		int sb = ((me - s) % m + m) % m, rb = ((me - s - 1) % m + m) % m;
		size_t slo, shi, rlo, rhi;
		block_bounds(count, m, sb, &slo, &shi);
		block_bounds(count, m, rb, &rlo, &rhi);
		for (size_t done = 0; done < (shi - slo) || done < (rhi - rlo);) {
			size_t seg = SEG_BYTES / es;
			size_t sn = shi - slo > done ? shi - slo - done : 0;
			size_t rn = rhi - rlo > done ? rhi - rlo - done : 0;
			sn = sn < seg ? sn : seg;
			rn = rn < seg ? rn : seg;
			if ((rc = need_tmp(t, rn * es)) < 0)
				return rc;
			rc = send_recv(t, sn ? b + (slo + done) * es : NULL, sn * es,
				       rn ? t->tmp : NULL, rn * es, deadline, "all_reduce");
			if (rc < 0)
				return rc;
			if (rn) {
				const void *src[2] = {t->tmp, b + (rlo + done) * es};
				ddpi_reduce(dt, op, b + (rlo + done) * es, src, 2, rn, 1);
			}
			done += seg;
		}
	}
	/* All-gather the complete blocks around the ring. */
	for (int s = 0; s < m - 1; s++) {
		int sb = ((me + 1 - s) % m + m) % m, rb = ((me - s) % m + m) % m;
		size_t slo, shi, rlo, rhi;
		block_bounds(count, m, sb, &slo, &shi);
		block_bounds(count, m, rb, &rlo, &rhi);
		rc = send_recv(t, b + slo * es, (shi - slo) * es, b + rlo * es, (rhi - rlo) * es,
			       deadline, "all_reduce");
		if (rc < 0)
			return rc;
	}
	return 0;
}

int ddpi_tcp_broadcast(struct ddpi_tcp *t, void *buf, size_t bytes, int root, int64_t deadline)
{
	int m = t->nnodes, rn = t->node_of[root];
	int first = t->me == rn, last = (t->me + 1) % m == rn;

	/* Down the ring from the root's node, forwarding segment by segment. */
	for (size_t off = 0; off < bytes; off += SEG_BYTES) {
		size_t n = bytes - off < SEG_BYTES ? bytes - off : SEG_BYTES;
		int rc;
		if (!first &&
		    (rc = send_recv(t, NULL, 0, (char *)buf + off, n, deadline, "broadcast")) < 0)
			return rc;
		if (!last &&
		    (rc = send_recv(t, (char *)buf + off, n, NULL, 0, deadline, "broadcast")) < 0)
			return rc;
	}
	return 0;
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
	return rc;
}

int ddpi_tcp_barrier(struct ddpi_tcp *t, int64_t deadline)
{
	int32_t one = 1;
	return ddpi_tcp_all_reduce(t, &one, 1, DDP_INT32, DDP_SUM, deadline);
}

/* ---- setup -------------------------------------------------------------------------- */

static int listen_on(const char *addr, int *fd_out, int *port_out)
{
	struct addrinfo hints = {.ai_flags = AI_NUMERICHOST | AI_PASSIVE,
				 .ai_socktype = SOCK_STREAM};
	struct addrinfo *ai = NULL;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int fd, rc;

	if ((rc = getaddrinfo(addr, "0", &hints, &ai)) != 0)
		return ddpi_err(-EINVAL, "tcp: bad local address '%s': %s", addr, gai_strerror(rc));
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 16) < 0 ||
	    getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
		rc = ddpi_err(-errno, "tcp: cannot listen on %s: %s", addr, strerror(errno));
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		return rc;
	}
	freeaddrinfo(ai);
	*port_out = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
						   : ((struct sockaddr_in *)&ss)->sin_port);
	*fd_out = fd;
	return 0;
}

static void tune(int fd)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

static int connect_to(const char *host, int port, int64_t deadline, int *out)
{
	struct addrinfo hints = {.ai_flags = AI_NUMERICHOST, .ai_socktype = SOCK_STREAM};
	struct addrinfo *ai = NULL;
	char ps[16];
	int fd = -1, rc;

	snprintf(ps, sizeof(ps), "%d", port);
	if ((rc = getaddrinfo(host, ps, &hints, &ai)) != 0)
		return ddpi_err(-EINVAL, "tcp: bad peer address '%s': %s", host, gai_strerror(rc));
	for (;;) {
		fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (fd < 0)
			break;
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
			break;
		if (errno == EINPROGRESS) {
			struct pollfd p = {.fd = fd, .events = POLLOUT};
			int64_t left = deadline - util_now_ms();
			int err = 0;
			socklen_t el = sizeof(err);
			if (left > 0 && poll(&p, 1, (int)(left > 60000 ? 60000 : left)) == 1 &&
			    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0)
				break;
			errno = err ? err : ETIMEDOUT;
		}
		rc = errno;
		close(fd);
		fd = -1;
		if (util_now_ms() >= deadline || (rc != ECONNREFUSED && rc != ETIMEDOUT)) {
			errno = rc;
			break;
		}
		usleep(20000);
	}
	freeaddrinfo(ai);
	if (fd < 0)
		return ddpi_err(-errno,
				"tcp: cannot connect to the next node's leader at %s:%d: %s", host,
				port, strerror(errno));
	*out = fd;
	return 0;
}

static int accept_left(int lfd, const struct ddpi_tcp *t, int64_t deadline, int *out)
{
	int want = (t->me - 1 + t->nnodes) % t->nnodes;

	for (;;) {
		struct pollfd p = {.fd = lfd, .events = POLLIN};
		int64_t left = deadline - util_now_ms();
		struct hello h;
		int fd;

		if (left <= 0)
			return leader_cause(
				t,
				ddpi_err(-ETIMEDOUT,
					 "tcp: node %d's leader did not connect in time", want),
				want, "timed out");
		if (poll(&p, 1, (int)(left > 1000 ? 1000 : left)) <= 0)
			continue;
		fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		/* A short blocking read of the hello; a stranger gets dropped. */
		struct timeval tv = {2, 0};
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		if (recv(fd, &h, sizeof(h), MSG_WAITALL) == (ssize_t)sizeof(h) &&
		    h.magic == HELLO_MAGIC && (int)h.node == want && (int)h.restart == t->restart &&
		    (int)h.world == t->world) {
			*out = fd;
			return 0;
		}
		close(fd);
	}
}

/* "addr port nranks r0 r1 ..." for node g, into the rank tables. */
static int parse_entry(struct ddpi_tcp *t, int g, const char *v, char *addr, size_t alen, int *port)
{
	char fmt[32];
	int n, used = 0;

	snprintf(fmt, sizeof(fmt), "%%%zus %%d %%d%%n", alen - 1);
	if (sscanf(v, fmt, addr, port, &n, &used) != 3 || n < 1 || n > t->world)
		return ddpi_err(-EPROTO, "tcp: bad leader entry for node %d: '%s'", g, v);
	t->nranks[g] = n;
	t->ranks[g] = calloc((size_t)n, sizeof(int));
	if (!t->ranks[g])
		return -ENOMEM;
	v += used;
	for (int i = 0; i < n; i++) {
		int r, k = 0;
		if (sscanf(v, "%d%n", &r, &k) != 1 || r < 0 || r >= t->world || t->node_of[r] != -1)
			return ddpi_err(-EPROTO, "tcp: bad or duplicate rank in node %d's entry",
					g);
		t->ranks[g][i] = r;
		t->node_of[r] = g;
		v += k;
	}
	return 0;
}

static int cmp_int(const void *a, const void *b)
{
	return *(const int *)a - *(const int *)b;
}

int ddpi_tcp_open(const struct ddp_env *env, const int *local_ranks, struct store_client *sc,
		  int64_t deadline, struct ddpi_tcp **out)
{
	struct ddpi_tcp *t = calloc(1, sizeof(*t));
	char myaddr[128], key[32], *entry = NULL, rightaddr[128];
	int lfd = -1, port = 0, right_port = 0, rc = -ENOMEM;
	size_t elen = 0;

	if (!t)
		return rc;
	t->nnodes = env->nnodes;
	t->me = env->node;
	t->world = env->world;
	t->restart = env->restart;
	t->left_fd = t->right_fd = -1;
	t->node_of = malloc((size_t)env->world * sizeof(int));
	t->ranks = calloc((size_t)env->nnodes, sizeof(int *));
	t->nranks = calloc((size_t)env->nnodes, sizeof(int));
	entry = malloc(64 + (size_t)env->local_world * 12);
	if (!t->node_of || !t->ranks || !t->nranks || !entry)
		goto fail;
	for (int r = 0; r < env->world; r++)
		t->node_of[r] = -1;

	/* Listen where this host reaches the store: the other nodes can reach it too. */
	if ((rc = store_client_local_addr(sc, myaddr, sizeof(myaddr))) < 0) {
		rc = ddpi_err(rc, "store: %s", store_strerror(rc));
		goto fail;
	}
	if ((rc = listen_on(myaddr, &lfd, &port)) < 0)
		goto fail;

	/* Publish this node's address and ranks, then read everyone's. */
	int *sorted = malloc((size_t)env->local_world * sizeof(int));
	if (!sorted) {
		rc = -ENOMEM;
		goto fail;
	}
	memcpy(sorted, local_ranks, (size_t)env->local_world * sizeof(int));
	qsort(sorted, (size_t)env->local_world, sizeof(int), cmp_int);
	elen = (size_t)snprintf(entry, 64, "%s %d %d", myaddr, port, env->local_world);
	for (int i = 0; i < env->local_world; i++)
		elen += (size_t)sprintf(entry + elen, " %d", sorted[i]);
	free(sorted);
	snprintf(key, sizeof(key), "leader/%d", env->node);
	store_client_set_timeout(sc, deadline - util_now_ms() > 0 ? deadline - util_now_ms() : 1);
	if ((rc = store_client_set(sc, key, entry, elen)) < 0) {
		rc = ddpi_err(rc, "store set %s: %s", key, store_strerror(rc));
		goto fail;
	}
	for (int g = 0; g < env->nnodes; g++) {
		void *v = NULL;
		size_t vlen = 0;
		char a[128];
		int p;
		snprintf(key, sizeof(key), "leader/%d", g);
		store_client_set_timeout(sc, deadline - util_now_ms() > 0 ? deadline - util_now_ms()
									  : 1);
		if ((rc = store_client_get(sc, key, &v, &vlen)) < 0) {
			rc = ddpi_err(rc, "node %d's leader did not show up in the store: %s", g,
				      store_strerror(rc));
			if (rc == -ETIMEDOUT)
				leader_cause(t, rc, g, "timed out");
			goto fail;
		}
		rc = parse_entry(t, g, v, a, sizeof(a), &p);
		if (rc == 0 && g == (t->me + 1) % t->nnodes) {
			snprintf(rightaddr, sizeof(rightaddr), "%s", a);
			right_port = p;
		}
		free(v);
		if (rc < 0)
			goto fail;
	}
	for (int r = 0; r < env->world; r++)
		if (t->node_of[r] < 0) {
			rc = ddpi_err(DDP_EENV,
				      "rank %d belongs to no node (check GROUP_RANK and "
				      "LOCAL_WORLD_SIZE on every node)",
				      r);
			goto fail;
		}
	/* Connect right, then accept left: the listen backlog lets both happen. */
	if ((rc = connect_to(rightaddr, right_port, deadline, &t->right_fd)) < 0) {
		/* It published its address: it was there, and is no more. */
		if (rc == -ECONNREFUSED || rc == -ETIMEDOUT)
			leader_cause(t, rc, right_of(t), "could not be reached");
		goto fail;
	}
	struct hello h = {HELLO_MAGIC, (uint32_t)t->me, (uint32_t)t->restart, (uint32_t)t->world};
	if (send(t->right_fd, &h, sizeof(h), MSG_NOSIGNAL) != (ssize_t)sizeof(h)) {
		rc = leader_cause(t,
				  ddpi_err(DDP_EPEER, "tcp: hello to the next node failed: %s",
					   strerror(errno)),
				  right_of(t), "disconnected");
		goto fail;
	}
	if ((rc = accept_left(lfd, t, deadline, &t->left_fd)) < 0)
		goto fail;
	tune(t->left_fd);
	tune(t->right_fd);
	close(lfd);
	free(entry);
	*out = t;
	return 0;
fail:
	if (lfd >= 0)
		close(lfd);
	free(entry);
	ddpi_tcp_close(t);
	return rc;
}

void ddpi_tcp_abort(struct ddpi_tcp *t)
{
	/* shutdown, not close: the descriptors stay valid until ddpi_tcp_close. */
	if (t->left_fd >= 0)
		shutdown(t->left_fd, SHUT_RDWR);
	if (t->right_fd >= 0)
		shutdown(t->right_fd, SHUT_RDWR);
}

void ddpi_tcp_close(struct ddpi_tcp *t)
{
	if (!t)
		return;
	if (t->left_fd >= 0)
		close(t->left_fd);
	if (t->right_fd >= 0)
		close(t->right_fd);
	for (int g = 0; t->ranks && g < t->nnodes; g++)
		free(t->ranks[g]);
	free(t->ranks);
	free(t->nranks);
	free(t->node_of);
	free(t->tmp);
	free(t);
}
