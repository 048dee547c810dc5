/* storebench: a TCPStore load generator speaking the 1.x dialect (so the same
 * client drives PyTorch 1.13's server and ours), or with STOREBENCH_DIALECT=2
 * the 2.x one (PyTorch 2.x's server and ours): every connection's first
 * message is then VALIDATE, as a 2.x client's is.
 *
 *   storebench ops  HOST PORT CONNS SECONDS [PROCS]  closed loop; prints
 *       "ops=<ops/s> p50_us=<..> p99_us=<..> errors=<n>"
 *   storebench rdzv HOST PORT CLIENTS TAG [PROCS]    rendezvous; prints
 *       "rdzv_ms=<..> connect_ms=<..> errors=<n>"
 *
 * The connections are shared out among PROCS worker processes (default 1).
 * ops: every connection repeats, one at a time, "SET k v(64 B) + GET k" (one
 * round trip: SET has no reply) and "ADD c 1"; each counts as one op. All
 * connections are made before the clock starts; the first 20% of the time is
 * warm-up and not measured. An op's latency runs from when its request is
 * handed to the kernel to when its whole reply has been received.
 * The closed loop runs on io_uring (storebench_uring.h) where the kernel
 * allows it: the generator shares a small machine with the server it
 * measures, a system call costs about a microsecond on a VM, and io_uring
 * takes a loop iteration's requests and replies in one system call instead
 * of two or three per op, so the generator takes less CPU from the server.
 * Otherwise, or with STOREBENCH_IO=uv (to compare), it runs on libuv; a
 * note on stderr says when io_uring was wanted but could not be had.
 * rdzv: every client connects (all at once), ADDs a shared counter, the one
 * that reaches CLIENTS sets the done key, and every client WAITs for it; the
 * time is from the first connect to the last STOP_WAITING; connect_ms, to the
 * last completed connect (the kernel's handshake, whatever the server does:
 * the floor no server can go under on this machine). It too runs on io_uring
 * unless STOREBENCH_IO=uv: libuv's dozen system calls per client cost the
 * generator more CPU than a fast server spends on the whole rendezvous. The
 * io_uring driver creates its sockets before the clock starts (socket() is
 * the client's own cost, whatever the server) and closes them after it stops;
 * the libuv driver creates each in uv_tcp_connect and closes it on its reply,
 * so the two drivers' times are not comparable with each other, only each
 * driver's times for the two servers. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "store_proto.h"

#define VALUE_LEN	64
#define RDZV_TIMEOUT_MS 120000

struct bconn {
	uv_tcp_t tcp;
	uv_connect_t creq;
	int id;
	bool connected, closed;
	int fd;	       /* ops on io_uring: the socket */
	int step;      /* ops: 0 SET+GET, 1 ADD; rdzv: 0 ADD, 1 WAIT */
	size_t expect; /* reply bytes awaited */
	size_t got;
	uint8_t reply[128];
	uint64_t t0;
	struct store_buf req[2]; /* prebuilt requests (ops) */
};

static uv_loop_t *loop;
static struct sockaddr_storage addr;
static struct bconn *conns;
static int nconns, nconnected, nerrors, ndone, rdzv_target;
static bool ops_mode, measuring, stopping;
static uint64_t t_measure, t_stop, t_start, t_connected;
static uint32_t *lat;
static size_t nlat, caplat;
static uint64_t ops_measured;
static char tag[32];
static int outstanding;
static bool use_uring; /* ops and rdzv on io_uring (storebench_uring.h) */
static enum store_dialect dialect = STORE_DIALECT_V1; /* STOREBENCH_DIALECT */

/* What a worker process reports (then, for ops, nlat latency samples). */
struct result {
	uint64_t ops, nlat, window_ns, t_end, t_connected;
	int32_t errors, done;
};

static void on_alloc(uv_handle_t *h, size_t s, uv_buf_t *b)
{
	struct bconn *c = h->data;

	*b = uv_buf_init((char *)c->reply + c->got, (unsigned)(sizeof(c->reply) - c->got));
}

static void on_closed(uv_handle_t *h)
{
}

static void fail(struct bconn *c)
{
	if (c->closed)
		return;
	c->closed = true;
	nerrors++;
	uv_close((uv_handle_t *)&c->tcp, on_closed);
	if (!ops_mode && ndone + nerrors == nconns)
		uv_stop(loop);
	if (ops_mode && outstanding > 0 && --outstanding == 0)
		uv_stop(loop);
}

static void on_write(uv_write_t *w, int status)
{
	free(w->data);
	free(w);
}

static void send_buf(struct bconn *c, const struct store_buf *b)
{
	uv_buf_t ub = uv_buf_init((char *)b->p, (unsigned)b->len);
	int n = uv_try_write((uv_stream_t *)&c->tcp, &ub, 1);

	if (n == (int)b->len)
		return;
	if (n < 0 && n != UV_EAGAIN) {
		fail(c);
		return;
	}
	if (n < 0)
		n = 0;
	{
		uv_write_t *w = malloc(sizeof(*w));
		char *copy = malloc(b->len - (size_t)n);

		memcpy(copy, b->p + n, b->len - (size_t)n);
		w->data = copy;
		ub = uv_buf_init(copy, (unsigned)(b->len - (size_t)n));
		if (uv_write(w, (uv_stream_t *)&c->tcp, &ub, 1, on_write) < 0) {
			free(copy);
			free(w);
			fail(c);
		}
	}
}

/* ---- closed-loop ops ------------------------------------------------------------- */

/* 2.x dialect: what an ops connection sends once connected, before the clock
 * starts (VALIDATE has no reply). */
static struct store_buf hello;

static void ops_next(struct bconn *c)
{
	if (stopping) {
		outstanding--;
		if (outstanding == 0)
			uv_stop(loop);
		return;
	}
	c->got = 0;
	c->expect = c->step == 0 ? 8 + VALUE_LEN : 8;
	c->t0 = uv_hrtime();
	send_buf(c, &c->req[c->step]);
}

/* A reply that came at `now`: counted if it falls in the measured window. */
static void ops_record(const struct bconn *c, uint64_t now)
{
	if (measuring && now < t_stop) {
		if (nlat == caplat) {
			uint32_t *n;

			caplat = caplat ? caplat * 2 : 1 << 16;
			n = realloc(lat, caplat * sizeof(*lat));
			if (n == NULL)
				_exit(1);
			lat = n;
		}
		lat[nlat++] = (uint32_t)((now - c->t0) / 1000);
		ops_measured++;
	}
}

static void ops_reply(struct bconn *c)
{
	ops_record(c, uv_hrtime());
	c->step ^= 1;
	ops_next(c);
}

/* The keys are user keys ("/" + key on the wire, as TCPStore's). */
static void build_ops(struct bconn *c)
{
	char key[128], ctr[128], val[VALUE_LEN];
	struct store_msg set = {.op = STORE_OP_SET, .key = key, .val = val, .val_len = sizeof(val)};
	struct store_msg get = {.op = STORE_OP_GET, .key = key};
	struct store_msg add = {.op = STORE_OP_ADD, .key = ctr, .num = 1};

	memset(val, 'v', sizeof(val));
	snprintf(key, sizeof(key), "bench/%s/k%d", tag, c->id);
	snprintf(ctr, sizeof(ctr), "bench/%s/c%d", tag, c->id);
	store_buf_init(&c->req[0]);
	store_encode(&c->req[0], dialect, NULL, &set);
	store_encode(&c->req[0], dialect, NULL, &get);
	store_buf_init(&c->req[1]);
	store_encode(&c->req[1], dialect, NULL, &add);
}

/* ---- rendezvous ---------------------------------------------------------------------- */

/* Appends one rendezvous request to b: ADD count 1, SET done "1" or WAIT done
 * (both drivers send exactly these bytes). ADD is a client's first request:
 * in the 2.x dialect VALIDATE goes before it (timed: every 2.x client sends
 * it). */
static void rdzv_put(struct store_buf *b, enum store_op op)
{
	char key[128];
	const char *keys[] = {key};
	struct store_msg validate = {.op = STORE_OP_VALIDATE};
	struct store_msg m = {.op = op, .key = key};

	if (op == STORE_OP_ADD) {
		m.num = 1;
	} else if (op == STORE_OP_SET) {
		m.val = "1";
		m.val_len = 1;
	} else {
		m = (struct store_msg){.op = op, .keys = keys, .n = 1};
	}
	if (op == STORE_OP_ADD && dialect == STORE_DIALECT_V2)
		store_encode(b, dialect, NULL, &validate);
	snprintf(key, sizeof(key), "rdzv/%s/%s", tag, op == STORE_OP_ADD ? "count" : "done");
	store_encode(b, dialect, NULL, &m);
}

static void rdzv_send(struct bconn *c, enum store_op op)
{
	struct store_buf b;

	store_buf_init(&b);
	rdzv_put(&b, op);
	send_buf(c, &b);
	store_buf_free(&b);
}

static void rdzv_reply(struct bconn *c)
{
	if (c->step == 0) {
		int64_t v;

		memcpy(&v, c->reply, 8);
		if (v == rdzv_target)
			rdzv_send(c, STORE_OP_SET);
		c->step = 1;
		c->got = 0;
		c->expect = 1;
		rdzv_send(c, STORE_OP_WAIT);
		return;
	}
	ndone++;
	uv_close((uv_handle_t *)&c->tcp, on_closed);
	c->closed = true;
	if (ndone + nerrors == nconns)
		uv_stop(loop);
}

#include "storebench_uring.h"

/* ---- common --------------------------------------------------------------------------- */

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
	struct bconn *c = s->data;

	if (n < 0) {
		fail(c);
		return;
	}
	c->got += (size_t)n;
	if (c->got < c->expect)
		return;
	if (c->got > c->expect) { /* nothing else is ever in flight */
		fail(c);
		return;
	}
	if (ops_mode)
		ops_reply(c);
	else
		rdzv_reply(c);
}

static void on_connect(uv_connect_t *req, int status)
{
	struct bconn *c = req->data;

	if (status < 0) {
		fail(c);
		return;
	}
	c->connected = true;
	uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
	nconnected++;
	t_connected = uv_hrtime();
	if (ops_mode) { /* the closed loop starts on the go signal */
		if (dialect == STORE_DIALECT_V2)
			send_buf(c, &hello);
		return;
	}
	c->expect = 8;
	rdzv_send(c, STORE_OP_ADD);
}

static void connect_all(void)
{
	int i;

	for (i = 0; i < nconns; i++) {
		struct bconn *c = &conns[i];

		uv_tcp_init(loop, &c->tcp);
		c->tcp.data = c;
		c->creq.data = c;
		if (ops_mode)
			build_ops(c);
		if (uv_tcp_connect(&c->creq, &c->tcp, (struct sockaddr *)&addr, on_connect) < 0)
			fail(c);
	}
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

static void on_phase(uv_timer_t *t)
{
	if (!measuring) {
		measuring = true;
		t_measure = uv_hrtime();
		return;
	}
	stopping = true;
	uv_timer_stop(t);
}

static void on_deadline(uv_timer_t *t)
{
	uv_stop(loop);
}

static void raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

static int read_all(int fd, void *p, size_t n)
{
	uint8_t *b = p;

	while (n > 0) {
		ssize_t r = read(fd, b, n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

static void write_all(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;

	while (n > 0) {
		ssize_t w = write(fd, b, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			_exit(1);
		b += w;
		n -= (size_t)w;
	}
}

static void note_uv(int rc)
{
	fprintf(stderr, "storebench: no io_uring (%s): on libuv\n", strerror(-rc));
}

/* io_uring unless STOREBENCH_IO=uv or the kernel will not; tried here, once,
 * so that the note is one line whatever PROCS is. */
static bool want_uring(void)
{
	const char *io = getenv("STOREBENCH_IO");
	int rc;

	if (io != NULL && strcmp(io, "uv") == 0)
		return false;
	rc = uring_open(1);
	if (rc < 0) {
		note_uv(rc);
		return false;
	}
	uring_close();
	return true;
}

/* libuv ops driver: all connections made before the go signal... */
static void ops_uv_connect(void)
{
	connect_all();
	while (nconnected + nerrors < nconns && uv_run(loop, UV_RUN_ONCE))
		;
}

/* ...then the closed loop, its phases kept by a timer. */
static void ops_uv_run(double seconds, uv_timer_t *phase)
{
	int i;

	uv_timer_start(phase, on_phase, (uint64_t)(seconds * 200), (uint64_t)(seconds * 800));
	outstanding = nconns - nerrors;
	for (i = 0; i < nconns; i++)
		if (!conns[i].closed)
			ops_next(&conns[i]);
	if (outstanding > 0)
		uv_run(loop, UV_RUN_DEFAULT);
}

static void rdzv_run(struct result *r)
{
	connect_all();
	uv_run(loop, UV_RUN_DEFAULT);
	r->t_end = uv_hrtime();
	r->t_connected = t_connected;
}

/* One worker: connections [first, first + n) of `total`. It says it is
 * ready on ready_fd, waits for go_fd to close, runs, and reports. */
static void worker(int first, int n, int total, double seconds, int go_fd, int ready_fd, int res_fd)
{
	uv_timer_t phase, deadline;
	struct result r = {0};
	char c = 'r';
	int i;

	loop = uv_default_loop();
	nconns = n;
	rdzv_target = total;
	conns = calloc((size_t)n, sizeof(*conns));
	for (i = 0; i < n; i++)
		conns[i].id = first + i;
	uv_timer_init(loop, &phase);
	uv_timer_init(loop, &deadline);
	if (use_uring) {
		/* rdzv: a client starts with three entries (connect, send, receive). */
		int rc = uring_open(ops_mode ? n : 2 * n);

		if (rc < 0) /* it worked in main(): unlikely */
			note_uv(rc);
		use_uring = rc == 0;
	}
	if (use_uring && ops_mode)
		uring_connect_all();
	else if (use_uring)
		uring_rdzv_prepare();
	else if (ops_mode)
		ops_uv_connect();
	write_all(ready_fd, &c, 1);
	while (read(go_fd, &c, 1) > 0) /* EOF: go */
		;
	t_start = uv_hrtime();
	t_stop = t_start + (uint64_t)(seconds * 1e9);
	if (use_uring && ops_mode) {
		uring_run(seconds); /* keeps its own deadline */
	} else if (use_uring) {
		uring_rdzv_run(&r); /* so does this */
	} else {
		/* Whatever the server does, the run ends. */
		uv_timer_start(&deadline, on_deadline,
			       ops_mode ? (uint64_t)(seconds * 3000) + 30000 : RDZV_TIMEOUT_MS, 0);
		if (ops_mode)
			ops_uv_run(seconds, &phase);
		else
			rdzv_run(&r);
	}
	if (ops_mode) {
		r.ops = ops_measured;
		r.nlat = nlat;
		r.window_ns = t_stop - t_measure;
	}
	r.errors = nerrors;
	r.done = ndone;
	write_all(res_fd, &r, sizeof(r));
	if (ops_mode && nlat)
		write_all(res_fd, lat, nlat * sizeof(*lat));
	_exit(0);
}

/* STOREBENCH_DIALECT: 1 (the default) or 2; -EINVAL for anything else. */
static int read_dialect(void)
{
	const char *d = getenv("STOREBENCH_DIALECT");

	if (d == NULL || strcmp(d, "1") == 0)
		return 0;
	if (strcmp(d, "2") != 0)
		return -EINVAL;
	dialect = STORE_DIALECT_V2;
	return 0;
}

int main(int argc, char **argv)
{
	int procs = 1, total, go[2], ready[2], i;
	int *res;
	pid_t *pids;
	double seconds = 0;
	uint64_t t0, t_end = 0, t_conn = 0, ops_total_x1000 = 0;
	int errors = 0, done = 0;
	char c;

	if ((argc != 6 && argc != 7) ||
	    (strcmp(argv[1], "ops") != 0 && strcmp(argv[1], "rdzv") != 0)) {
		fprintf(stderr, "usage: storebench ops HOST PORT CONNS SECONDS [PROCS]\n"
				"       storebench rdzv HOST PORT CLIENTS TAG [PROCS]\n");
		return 2;
	}
	ops_mode = strcmp(argv[1], "ops") == 0;
	total = atoi(argv[4]);
	if (argc == 7)
		procs = atoi(argv[6]);
	if (total <= 0 || procs <= 0 ||
	    (uv_ip4_addr(argv[2], atoi(argv[3]), (struct sockaddr_in *)&addr) < 0 &&
	     uv_ip6_addr(argv[2], atoi(argv[3]), (struct sockaddr_in6 *)&addr) < 0)) {
		fprintf(stderr, "storebench: bad arguments\n");
		return 2;
	}
	if (procs > total)
		procs = total;
	if (ops_mode) {
		seconds = atof(argv[5]);
		snprintf(tag, sizeof(tag), "%d", (int)(uv_hrtime() % 1000000));
	} else {
		snprintf(tag, sizeof(tag), "%s", argv[5]);
	}
	if (read_dialect() < 0) {
		fprintf(stderr, "storebench: STOREBENCH_DIALECT must be 1 or 2\n");
		return 2;
	}
	store_buf_init(&hello);
	store_encode(&hello, STORE_DIALECT_V2, NULL, &(struct store_msg){.op = STORE_OP_VALIDATE});
	use_uring = want_uring();
	raise_nofile();
	if (pipe(go) < 0 || pipe(ready) < 0)
		return 1;
	res = calloc((size_t)procs, sizeof(*res));
	pids = calloc((size_t)procs, sizeof(*pids));
	for (i = 0; i < procs; i++) {
		int rp[2], first = (int)((int64_t)total * i / procs);
		int n = (int)((int64_t)total * (i + 1) / procs) - first;

		if (pipe(rp) < 0)
			return 1;
		pids[i] = fork();
		if (pids[i] == 0) {
			close(go[1]);
			close(ready[0]);
			close(rp[0]);
			worker(first, n, total, seconds, go[0], ready[1], rp[1]);
		}
		close(rp[1]);
		res[i] = rp[0];
	}
	close(go[0]);
	close(ready[1]);
	for (i = 0; i < procs; i++)
		if (read_all(ready[0], &c, 1) < 0)
			return 1;
	t0 = uv_hrtime();
	close(go[1]); /* everyone starts now */
	for (i = 0; i < procs; i++) {
		struct result r;

		if (read_all(res[i], &r, sizeof(r)) < 0) {
			errors += 1;
			continue;
		}
		errors += r.errors;
		done += r.done;
		if (r.t_end > t_end)
			t_end = r.t_end;
		if (r.t_connected > t_conn)
			t_conn = r.t_connected;
		if (ops_mode && r.window_ns)
			ops_total_x1000 += r.ops * 1000000000000ull / r.window_ns;
		if (ops_mode && r.nlat) {
			if (nlat + r.nlat > caplat) {
				uint32_t *n;

				caplat = nlat + r.nlat;
				n = realloc(lat, caplat * sizeof(*lat));
				if (n == NULL)
					return 1;
				lat = n;
			}
			if (read_all(res[i], lat + nlat, r.nlat * sizeof(*lat)) == 0)
				nlat += r.nlat;
		}
		close(res[i]);
	}
	for (i = 0; i < procs; i++)
		waitpid(pids[i], NULL, 0);
	if (ops_mode) {
		qsort(lat, nlat, sizeof(*lat), cmp_u32);
		printf("ops=%.0f p50_us=%u p99_us=%u errors=%d\n", (double)ops_total_x1000 / 1000,
		       nlat ? lat[nlat / 2] : 0, nlat ? lat[nlat * 99 / 100] : 0, errors);
	} else if (done < total) {
		printf("rdzv_ms=nan errors=%d done=%d\n", errors, done);
	} else {
		printf("rdzv_ms=%.1f connect_ms=%.1f errors=%d\n", (double)(t_end - t0) / 1e6,
		       (double)(t_conn - t0) / 1e6, errors);
	}
	free(lat);
	free(res);
	free(pids);
	return 0;
}
