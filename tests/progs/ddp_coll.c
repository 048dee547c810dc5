/* ddp_coll: drives libddp's collectives for the end-to-end tests.
 *   ddp_coll [--spawn N] check [shared] every dtype x op, broadcast, all_gather, barrier;
 *                                       shared: the all_reduces on memory from ddp_alloc
 *                                       (the cpu backend's direct path from 256 KiB)
 *   ddp_coll where                      each rank first prints where it runs (node,
 *                                       launcher pid), every rank's as all_gather brought
 *                                       them, its established TCP connections and each TCP
 *                                       socket's congestion control; then check
 *   ddp_coll cc BYTES...                an all_reduce of each size (float32) in turn, each
 *                                       followed by every TCP socket's congestion control
 *   ddp_coll [--spawn N] big            large all_gather (also in place) and broadcast from
 *                                       every root, odd sizes around the single-copy
 *                                       threshold and above a staging slot, twice; with
 *                                       DDP_COLL_UNDUMPABLE=1 every rank first makes itself
 *                                       undumpable (so peers without CAP_SYS_PTRACE cannot
 *                                       read its memory); with DDP_COLL_NO_WRITEV=1 a
 *                                       seccomp filter refuses it process_vm_writev
 *                                       (EPERM), as some container profiles do, before
 *                                       ddp_init (any mode)
 *   ddp_coll [--spawn N] same           large and small all_reduces (sum of small integers,
 *                                       exact; avg of fractions, rounded) in float32,
 *                                       float16 and bfloat16 at odd sizes up to 3 M
 *                                       elements: sums exact, and every rank's result
 *                                       bit-identical (all_gathered and compared)
 *   ddp_coll [--spawn N] shared         the same, on buffers inside a reducer's buckets
 *                                       (shared with the node's peers on the cpu backend:
 *                                       all_reduce reads them directly), plus float32 max
 *                                       and avg, and on memory from ddp_alloc; prints
 *                                       "[rankR] shared maps N", the
 *                                       memfd mappings of libddp's shared memory it has,
 *                                       and "[rankR] shared own N", those it made;
 *                                       then big, its buffers from ddp_alloc, and one more
 *                                       all_reduce of a bucket: "[rankR] shared maps after N",
 *                                       "[rankR] shared own after N"
 *   ddp_coll [--spawn N] zcrace         broadcasts from rank 0 whose buffer is private
 *                                       while the others' are from ddp_alloc, then the last
 *                                       rank's private and the others' from ddp_alloc,
 *                                       then all from ddp_alloc (with DDP_TEST_ZC_PAUSE, a reader looks
 *                                       late at what the others declared); then an
 *                                       all_reduce of ddp_alloc memory: "[rankR] zc maps N"
 *   ddp_coll [--spawn N] bench BYTES ITERS   float32 all_reduce timing (rank 0 prints)
 *   ddp_coll [--spawn N] one OP BYTES   one all_reduce (float32 sum, exact), all_gather or
 *                                       broadcast (from the last rank) of BYTES, checked
 *   ddp_coll [--spawn N] crash RANK [--hold-sigterm] [--linger R] [--when FILE]
 *                                       RANK exits (status 7) in the middle of all_reduces;
 *                                       --when FILE: RANK first says "rank RANK: waiting
 *                                       for FILE" and waits (at most 120 s) until FILE
 *                                       exists, while the others wait in their all_reduce;
 *                                       --hold-sigterm: every rank blocks SIGTERM until its
 *                                       collective has failed, then waits for it (so only
 *                                       libddp's error ends a collective, and a launcher's
 *                                       stop ends the rank); --linger R: rank R, once
 *                                       failed, lives on for 600 s
 *   ddp_coll [--spawn N] bcastcrash RANK MIB MS   every rank broadcasts MIB MiB from
 *                                       rank 0, again and again (at most 1000 times);
 *                                       RANK exits (status 7) MS ms after the first,
 *                                       wherever it is (inside a broadcast, mostly); a
 *                                       rank whose broadcast fails prints "rank R:
 *                                       broadcast failed: ERROR" and exits 3 (SIGTERM
 *                                       is held until then)
 *   ddp_coll [--spawn N] late R:S,...   after a barrier, rank R sleeps S seconds (a
 *                                       decimal) before one all_reduce of 1000 floats;
 *                                       every rank prints "rank R: late all_reduce: RC:
 *                                       ERROR" (exit 3 where it failed; SIGTERM held)
 *   ddp_coll [--spawn N] stop RANK      RANK stops itself (SIGSTOP) in the middle
 *   ddp_coll wideoom RANK               a float16 sum of 8 M elements, after RANK capped
 *                                       its address space (RLIMIT_AS) 8 MiB above what it
 *                                       maps: across nodes its float32 copy cannot be
 *                                       made. Each rank prints "rank R: wideoom: RC:
 *                                       ERROR" (or "... ok") and exits 3 where it failed;
 *                                       RANK then lives 20 s more, as a program that
 *                                       saves its work, before it exits
 *   ddp_coll secret                     rank 1's buffer is memory from memfd_secret (the
 *                                       kernel will not let the peers read or pin it):
 *                                       all_reduces of 300000 floats, sum and max, exact
 *   ddp_coll reuse FILE [OP]            a collective of 64 MiB that fails on every rank
 *                                       but rank 1 (DDP_TEST_CMA_FAIL=stop:1:N, or
 *                                       DDP_TEST_ZC_STOP=1:N, stops rank 1 in it,
 *                                       DDP_TIMEOUT ends the others' wait): each then
 *                                       fills its buffer with -7, prints "refilled",
 *                                       waits (at most 120 s) for FILE and prints
 *                                       "overwritten K", the elements no longer -7;
 *                                       rank 1 prints how its call ended. OP: an
 *                                       all_reduce of private memory (none given),
 *                                       shared (ddp_alloc: the direct path), a
 *                                       broadcast from rank 0 of shared memory
 *                                       (bshared) or an all_gather (gshared: the
 *                                       buffer is the send buffer)
 *   ddp_coll [--spawn N] slowbkt NB MS [COUNT]   a reducer of NB buckets (one parameter
 *                                       of COUNT floats each, 1024 if not given, buckets the
 *                                       ranks share from 64 K); the last rank marks them ready one
 *                                       at a time MS apart, the others at once; finish
 *                                       (every bucket the mean of rank + 1), then destroy;
 *                                       prints "finish: ERROR" and exits 1 if it fails
 *   ddp_coll [--spawn N] hold           prints "ready" after init, waits 1 s, barrier
 *   ddp_coll [--spawn N] mismatch       rank 1 all_reduces 2000 floats, the others 1000;
 *                                       prints the error (exit 3)
 *   ddp_coll [--spawn N] diverge CASE RANKS   the ranks in RANKS (a comma list) make
 *                                       another call than the rest, after one agreeing
 *                                       all_reduce: CASE op (max, not sum), dtype (500
 *                                       float64, not 1000 float32), count (2000, not 1000
 *                                       floats), root (broadcast from the highest rank
 *                                       of RANKS, not rank 0), skip (barrier instead of
 *                                       the all_reduce), avg (avg, not sum), gather
 *                                       (all_gather of 1000 bytes each, not 1 MiB),
 *                                       bigroot (root, of 1 MiB), bigcount (all_reduce
 *                                       of 300000 floats, not 200000), bigsmall (8000,
 *                                       not 9000: the small path against the
 *                                       large), finish (ddp_finalize, print
 *                                       "diverge finalized: RC", then live on for
 *                                       60 s, SIGTERM unheld, while the rest
 *                                       all_reduce), refused (the same, after an
 *                                       all_reduce of a NULL buffer, which is
 *                                       refused: prints "diverge refused: RC" first),
 *                                       refusedlater (every rank's all_reduce is
 *                                       refused, then every rank reduces a gradient
 *                                       bucket, then as finish). A rank whose
 *                                       call fails prints "diverge rc: RC" and
 *                                       "diverge failed: ERROR" and
 *                                       exits 3; one whose call returns prints
 *                                       "diverge returned" and exits 0 (SIGTERM is held until then)
 * Without --spawn it takes its identity from the environment (ddprun, or a test
 * harness). Prints "ok rank R" on success; exits 1 with the error otherwise. */
#include <arpa/inet.h>
#include <dirent.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ddp.h"

struct args {
	int argc;
	char **argv;
};

#define CHECK(ctx, call)                                                                       \
	do {                                                                                   \
		int rc_ = (call);                                                              \
		if (rc_ < 0)                                                                   \
			ddp_fatal(ctx, "%s: %s (%s)", #call, ddp_strerror(rc_), ddp_errmsg()); \
	} while (0)

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Value of element i on rank r: small integers, exact in every dtype. */
static double val(int r, size_t i)
{
	return (double)((int)((r * 7 + i * 3) % 11) - 5);
}

static void put(void *buf, enum ddp_dtype dt, size_t i, double v);
static double get(const void *buf, enum ddp_dtype dt, size_t i);

static int check_all_reduce_in(struct ddp_ctx *ctx, char *buf, enum ddp_dtype dt, enum ddp_op op,
			       size_t n)
{
	int w = ddp_world_size(ctx), me = ddp_rank(ctx);

	for (size_t i = 0; i < n; i++)
		put(buf, dt, i, val(me, i));
	CHECK(ctx, ddp_all_reduce(ctx, buf, n, dt, op));
	for (size_t i = 0; i < n; i++) {
		double want = op == DDP_MIN ? INFINITY : op == DDP_MAX ? -INFINITY : 0;
		for (int r = 0; r < w; r++) {
			double v = val(r, i);
			if (op == DDP_MIN)
				want = v < want ? v : want;
			else if (op == DDP_MAX)
				want = v > want ? v : want;
			else
				want += v;
		}
		if (op == DDP_AVG) {
			want /= w;
			if (dt == DDP_INT32 || dt == DDP_INT64)
				want = trunc(want);
		}
		/* Sums, minima and maxima of these small integers are exact in
		 * every dtype; only an average may round. */
		double got = get(buf, dt, i), tol = op != DDP_AVG ? 0
						    : dt == DDP_FLOAT16 || dt == DDP_BFLOAT16
							    ? 0.02
							    : 1e-6;
		if (fabs(got - want) > tol * (1 + fabs(want))) {
			fprintf(stderr,
				"rank %d: all_reduce dtype %d op %d n %zu: [%zu] = %g, want %g\n",
				me, dt, op, n, i, got, want);
			return 1;
		}
	}
	return 0;
}

/* shared: the buffer from ddp_alloc. */
static int check_all_reduce(struct ddp_ctx *ctx, enum ddp_dtype dt, enum ddp_op op, size_t n,
			    int shared)
{
	size_t bytes = n * ddp_dtype_size(dt) + 1;
	char *buf = shared ? ddp_alloc(ctx, bytes) : malloc(bytes);
	int bad;

	if (buf == NULL) {
		fprintf(stderr, "rank %d: no memory for %zu bytes\n", ddp_rank(ctx), bytes);
		return 1;
	}
	bad = check_all_reduce_in(ctx, buf, dt, op, n);
	if (shared)
		ddp_free(ctx, buf);
	else
		free(buf);
	return bad;
}

static int run_check(struct ddp_ctx *ctx, int shared)
{
	static const size_t sizes[] = {1, 7, 1000, 8193, 300000};
	int w = ddp_world_size(ctx), me = ddp_rank(ctx), bad = 0;

	for (int dt = DDP_FLOAT32; dt <= DDP_INT64; dt++)
		for (int op = DDP_SUM; op <= DDP_MAX; op++)
			for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
				bad |= check_all_reduce(ctx, dt, op, sizes[k], shared);
	for (int root = 0; root < w; root++) {
		size_t n = 3000001;
		unsigned char *b = malloc(n);
		for (size_t i = 0; i < n; i++)
			b[i] = me == root ? (unsigned char)(i * 13 + root) : 0;
		CHECK(ctx, ddp_broadcast(ctx, b, n, root));
		for (size_t i = 0; i < n && !bad; i++)
			if (b[i] != (unsigned char)(i * 13 + root)) {
				fprintf(stderr, "rank %d: broadcast from %d wrong at %zu\n", me,
					root, i);
				bad = 1;
			}
		free(b);
	}
	for (size_t bytes = 1; bytes <= 5000000; bytes *= 97) {
		unsigned char *send = malloc(bytes), *recv = malloc(bytes * w);
		for (size_t i = 0; i < bytes; i++)
			send[i] = (unsigned char)(me * 31 + i);
		CHECK(ctx, ddp_all_gather(ctx, send, recv, bytes));
		for (int r = 0; r < w && !bad; r++)
			for (size_t i = 0; i < bytes; i++)
				if (recv[r * bytes + i] != (unsigned char)(r * 31 + i)) {
					fprintf(stderr,
						"rank %d: all_gather slot %d wrong at %zu\n", me, r,
						i);
					bad = 1;
					break;
				}
		free(send);
		free(recv);
	}
	CHECK(ctx, ddp_barrier(ctx));
	return bad;
}

/* Is inode one of this process's sockets? */
static int my_socket(unsigned long inode)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	char path[300], link[64], want[64];
	int found = 0;

	snprintf(want, sizeof(want), "socket:[%lu]", inode);
	while (d && !found && (e = readdir(d)) != NULL) {
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		ssize_t n = readlink(path, link, sizeof(link) - 1);
		if (n > 0) {
			link[n] = '\0';
			found = !strcmp(link, want);
		}
	}
	if (d)
		closedir(d);
	return found;
}

/* "ADDR:PORT" as /proc/net/tcp{,6} has it (the address as native 32-bit
 * words in hex) into "a.b.c.d:port" or "[v6]:port". */
static void endpoint(const char *hex, int v6, char *out, size_t len)
{
	unsigned char a[16];
	char host[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;
	int words = v6 ? 4 : 1;

	for (int i = 0; i < words; i++) {
		char w[9] = {0};
		memcpy(w, hex + 8 * i, 8);
		uint32_t x = (uint32_t)strtoul(w, NULL, 16);
		memcpy(a + 4 * i, &x, 4);
	}
	sscanf(hex + 8 * words, ":%x", &port);
	inet_ntop(v6 ? AF_INET6 : AF_INET, a, host, sizeof(host));
	snprintf(out, len, v6 ? "[%s]:%u" : "%s:%u", host, port);
}

/* This process's established TCP connections, one "tcp LOCAL REMOTE" line each. */
static void print_tcp(struct ddp_ctx *ctx)
{
	static const char *const files[] = {"/proc/self/net/tcp", "/proc/self/net/tcp6"};

	for (int v6 = 0; v6 < 2; v6++) {
		FILE *f = fopen(files[v6], "re");
		char line[512], l[128], r[128], lo[80], ro[80];
		unsigned st;
		unsigned long inode;

		if (!f)
			continue;
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, " %*s %127s %127s %x %*s %*s %*s %*s %*s %lu", l, r, &st,
				   &inode) == 4 &&
			    st == 1 /* ESTABLISHED */ && my_socket(inode)) {
				endpoint(l, v6, lo, sizeof(lo));
				endpoint(r, v6, ro, sizeof(ro));
				ddp_print_force(ctx, "tcp %s %s\n", lo, ro);
			}
		fclose(f);
	}
}

/* The congestion control of each TCP socket this process holds, one
 * "tcpcc LABEL NAME" line each (a leader's are its ring's). */
static void print_tcp_cc(struct ddp_ctx *ctx, const char *label)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;

	while (d && (de = readdir(d))) {
		int fd = atoi(de->d_name);
		char cc[32] = "";
		socklen_t len = sizeof(cc) - 1;
		if (de->d_name[0] != '.' && fd != dirfd(d) &&
		    getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, &len) == 0)
			ddp_print_force(ctx, "tcpcc %s %s\n", label, cc);
	}
	if (d)
		closedir(d);
}

/* An all_reduce of each size in turn (bytes, float32), then each TCP
 * socket's congestion control ("tcpcc BYTES NAME"). */
static int run_cc(struct ddp_ctx *ctx, int n, char **sizes)
{
	for (int i = 0; i < n; i++) {
		size_t count = strtoull(sizes[i], NULL, 0) / sizeof(float);
		float *buf = calloc(count ? count : 1, sizeof(float));
		if (!buf)
			return 1;
		CHECK(ctx, ddp_all_reduce(ctx, buf, count, DDP_FLOAT32, DDP_SUM));
		free(buf);
		print_tcp_cc(ctx, sizes[i]);
	}
	return 0;
}

/* Where this rank runs and whose data reaches it: if the nodes were separate
 * worlds, no rank would see the other launcher's pid. */
static int run_where(struct ddp_ctx *ctx)
{
	int w = ddp_world_size(ctx);
	long long mine[2] = {ddp_node_rank(ctx), (long long)getppid()};
	long long *all = calloc((size_t)w, sizeof(mine));
	char *line = calloc((size_t)w, 48);

	if (!all || !line)
		return 1;
	CHECK(ctx, ddp_all_gather(ctx, mine, all, sizeof(mine)));
	for (int r = 0; r < w; r++)
		sprintf(line + strlen(line), " %lld:%lld", all[2 * r], all[2 * r + 1]);
	ddp_print_force(ctx, "where rank %d local %d of %d node %d of %d world %d launcher %lld\n",
			ddp_rank(ctx), ddp_local_rank(ctx), ddp_local_world_size(ctx),
			ddp_node_rank(ctx), ddp_num_nodes(ctx), w, mine[1]);
	ddp_print_force(ctx, "gathered%s\n", line);
	print_tcp(ctx);
	print_tcp_cc(ctx, "where");
	free(all);
	free(line);
	return run_check(ctx, 0);
}

/* 16-bit floats accumulate in float32 (ddp.h), on one node as across nodes:
 * each result is printed for the test to compare with the exact sum
 * rounded once. Every element must be the same (the ring splits them). */
static int run_wide(struct ddp_ctx *ctx)
{
	static const struct {
		enum ddp_dtype dt;
		enum ddp_op op;
		const char *name;
		double first, rest; /* rank 0's value, every other rank's */
	} cases[] = {
		{DDP_FLOAT16, DDP_AVG, "float16 avg", 65504, 65504}, /* the largest half */
		{DDP_FLOAT16, DDP_SUM, "float16 sum", 2048, 1},	     /* 2048 + 1 is a tie */
		{DDP_BFLOAT16, DDP_SUM, "bfloat16 sum", 256, 1},
		{DDP_BFLOAT16, DDP_AVG, "bfloat16 avg", 256, 1},
	};
	size_t n = 3001;
	unsigned short *buf = malloc(n * sizeof(*buf));

	if (!buf)
		return 1;
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		double v = ddp_rank(ctx) == 0 ? cases[k].first : cases[k].rest;

		for (size_t i = 0; i < n; i++)
			put(buf, cases[k].dt, i, v);
		CHECK(ctx, ddp_all_reduce(ctx, buf, n, cases[k].dt, cases[k].op));
		for (size_t i = 1; i < n; i++)
			if (buf[i] != buf[0]) {
				ddp_print_force(ctx, "wide %s: element %zu differs\n",
						cases[k].name, i);
				free(buf);
				return 1;
			}
		ddp_print_force(ctx, "wide %s %.17g\n", cases[k].name, get(buf, cases[k].dt, 0));
	}
	free(buf);
	return 0;
}

/* The caller's address space, in bytes (/proc/self/statm's first field). */
static long mapped_bytes(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	long pages = -1;

	if (f) {
		if (fscanf(f, "%ld", &pages) != 1)
			pages = -1;
		fclose(f);
	}
	return pages < 0 ? -1 : pages * sysconf(_SC_PAGESIZE);
}

static int run_wideoom(struct ddp_ctx *ctx, int victim)
{
	size_t n = (size_t)8 << 20;
	unsigned short *buf = calloc(n, sizeof(*buf));
	int me = ddp_rank(ctx), rc;

	if (!buf)
		return 1;
	CHECK(ctx, ddp_barrier(ctx));
	if (me == victim) {
		long have = mapped_bytes();
		struct rlimit rl;

		if (have < 0 || getrlimit(RLIMIT_AS, &rl) < 0)
			return 1;
		rl.rlim_cur = (rlim_t)have + ((rlim_t)8 << 20);
		if (setrlimit(RLIMIT_AS, &rl) < 0)
			return 1;
	}
	rc = ddp_all_reduce(ctx, buf, n, DDP_FLOAT16, DDP_SUM);
	ddp_print_force(ctx, "rank %d: wideoom: %d: %s\n", me, rc, rc < 0 ? ddp_errmsg() : "ok");
	free(buf);
	if (me == victim)
		sleep(20);
	return rc < 0 ? 3 : 0;
}

static int run_bench(struct ddp_ctx *ctx, size_t bytes, int iters)
{
	size_t n = bytes / 4;
	float *buf = malloc(n * 4 + 4);
	double t0, best = 1e9, sum = 0;

	for (size_t i = 0; i < n; i++)
		buf[i] = 1.0f;
	CHECK(ctx, ddp_all_reduce(ctx, buf, n, DDP_FLOAT32, DDP_SUM)); /* warm up */
	CHECK(ctx, ddp_barrier(ctx));
	for (int it = 0; it < iters; it++) {
		t0 = now_s();
		CHECK(ctx, ddp_all_reduce(ctx, buf, n, DDP_FLOAT32, DDP_SUM));
		double dt = now_s() - t0;
		sum += dt;
		best = dt < best ? dt : best;
	}
	/* The slowest rank's mean is the collective's time. */
	double mean = sum / iters;
	CHECK(ctx, ddp_all_reduce(ctx, &mean, 1, DDP_FLOAT64, DDP_MAX));
	if (ddp_rank(ctx) == 0)
		printf("bench bytes=%zu ranks=%d mean_us=%.1f best_us=%.1f\n", bytes,
		       ddp_world_size(ctx), mean * 1e6, best * 1e6);
	free(buf);
	return 0;
}

static int in_list(const char *list, int r, int *max)
{
	char *copy = strdup(list), *sp = NULL;
	int found = 0;

	*max = -1;
	for (char *t = strtok_r(copy, ",", &sp); t; t = strtok_r(NULL, ",", &sp)) {
		int v = atoi(t);
		found |= v == r;
		*max = v > *max ? v : *max;
	}
	free(copy);
	return found;
}

/* Large calls (the single-copy path where it is on): gather, the odd ranks
 * all_gather 1000 bytes each, the others 1 MiB; bigroot, a 1 MiB broadcast
 * from the highest odd rank, not rank 0. */
static int diverge_big(struct ddp_ctx *ctx, const char *what, int odd, int root)
{
	size_t n = 1 << 20;
	char *send = calloc(n, 1), *recv = calloc(n, (size_t)ddp_world_size(ctx));
	int rc;

	if (!strcmp(what, "gather"))
		rc = ddp_all_gather(ctx, send, recv, odd ? 1000 : n);
	else if (!strcmp(what, "bigcount"))
		rc = ddp_all_reduce(ctx, recv, odd ? 300000 : 200000, DDP_FLOAT32, DDP_SUM);
	else if (!strcmp(what, "bigsmall"))
		rc = ddp_all_reduce(ctx, recv, odd ? 8000 : 9000, DDP_FLOAT32, DDP_SUM);
	else
		rc = ddp_broadcast(ctx, send, n, odd ? root : 0);
	free(send);
	free(recv);
	return rc;
}

static int run_diverge(struct ddp_ctx *ctx, const char *what, const char *ranks)
{
	int me = ddp_rank(ctx), root, odd = in_list(ranks, me, &root), rc;
	static double buf[2000];
	sigset_t term;

	/* A launcher stops the others when one rank fails: SIGTERM waits until
	 * this rank has said how its own call ended. */
	sigemptyset(&term);
	sigaddset(&term, SIGTERM);
	sigprocmask(SIG_BLOCK, &term, NULL);

	for (int i = 0; i < 2000; i++)
		buf[i] = 1;
	CHECK(ctx, ddp_all_reduce(ctx, buf, 1000, DDP_FLOAT32, DDP_SUM)); /* they agree here */
	if (!strcmp(what, "refusedlater")) {
		/* A refusal, then a call that ran (a gradient bucket): a rank
		 * that finalizes now made different numbers of calls. */
		static float w[256];
		struct ddp_param p = {"w", w, 256, DDP_FLOAT32};
		struct ddp_reducer *r;
		fprintf(stderr, "diverge refused: %d\n",
			ddp_all_reduce(ctx, NULL, 1000, DDP_FLOAT32, DDP_SUM));
		CHECK(ctx, ddp_reducer_create(ctx, &p, 1, NULL, &r));
		CHECK(ctx, ddp_reducer_mark_ready(r, 0));
		CHECK(ctx, ddp_reducer_finish(r));
		ddp_reducer_destroy(r);
		what = "finish";
	}
	if (!strcmp(what, "op"))
		rc = ddp_all_reduce(ctx, buf, 1000, DDP_FLOAT32, odd ? DDP_MAX : DDP_SUM);
	else if (!strcmp(what, "avg"))
		rc = ddp_all_reduce(ctx, buf, 1000, DDP_FLOAT32, odd ? DDP_AVG : DDP_SUM);
	else if (!strcmp(what, "dtype"))
		rc = odd ? ddp_all_reduce(ctx, buf, 500, DDP_FLOAT64, DDP_SUM)
			 : ddp_all_reduce(ctx, buf, 1000, DDP_FLOAT32, DDP_SUM);
	else if (!strcmp(what, "count"))
		rc = ddp_all_reduce(ctx, buf, odd ? 2000 : 1000, DDP_FLOAT32, DDP_SUM);
	else if (!strcmp(what, "root"))
		rc = ddp_broadcast(ctx, buf, 1000, odd ? root : 0);
	else if (!strcmp(what, "skip"))
		rc = odd ? ddp_barrier(ctx) : ddp_all_reduce(ctx, buf, 1000, DDP_FLOAT32, DDP_SUM);
	else if ((!strcmp(what, "finish") || !strcmp(what, "refused")) && odd) {
		if (!strcmp(what, "refused"))
			fprintf(stderr, "diverge refused: %d\n",
				ddp_all_reduce(ctx, NULL, 1000, DDP_FLOAT32, DDP_SUM));
		/* Lives on after it (a program's other work): only the mark in
		 * the shared segment or the ring's record can tell the others. */
		rc = ddp_finalize(ctx);
		fprintf(stderr, "diverge finalized: %d\n", rc);
		sigprocmask(SIG_UNBLOCK, &term, NULL);
		sleep(60);
		exit(0);
	} else if (!strcmp(what, "finish") || !strcmp(what, "refused"))
		rc = ddp_all_reduce(ctx, buf, 1000, DDP_FLOAT32, DDP_SUM);
	else if (!strcmp(what, "gather") || !strcmp(what, "bigroot") || !strcmp(what, "bigcount") ||
		 !strcmp(what, "bigsmall"))
		rc = diverge_big(ctx, what, odd, root);
	else
		ddp_fatal(ctx, "diverge: unknown case '%s'", what);
	if (rc < 0) {
		fprintf(stderr, "diverge rc: %d\ndiverge failed: %s\n", rc, ddp_errmsg());
		exit(3);
	}
	fprintf(stderr, "diverge returned\n");
	return 0;
}

static int run_fail(struct ddp_ctx *ctx, int victim, int stop, int argc, char **argv)
{
	float buf[1024];
	int linger = -1, hold = 0;
	const char *gate = NULL;
	sigset_t term;

	sigemptyset(&term);
	sigaddset(&term, SIGTERM);
	for (int i = 0; i < argc; i++)
		if (!strcmp(argv[i], "--hold-sigterm"))
			hold = !sigprocmask(SIG_BLOCK, &term, NULL);
		else if (!strcmp(argv[i], "--linger") && i + 1 < argc)
			linger = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--when") && i + 1 < argc)
			gate = argv[++i];

	for (int it = 0; it < 20; it++) {
		if (it == 10 && ddp_rank(ctx) == victim) {
			if (gate) {
				fprintf(stderr, "rank %d: waiting for %s\n", victim, gate);
				for (int k = 0; k < 12000 && access(gate, F_OK) != 0; k++)
					usleep(10000);
			}
			fprintf(stderr, "rank %d: %s now\n", victim, stop ? "stopping" : "exiting");
			if (stop)
				raise(SIGSTOP);
			else
				_exit(7);
		}
		for (int i = 0; i < 1024; i++)
			buf[i] = 1;
		int rc = ddp_all_reduce(ctx, buf, 1024, DDP_FLOAT32, DDP_SUM);
		if (rc < 0) {
			fprintf(stderr, "rank %d: all_reduce failed: %s: %s\n", ddp_rank(ctx),
				ddp_strerror(rc), ddp_errmsg());
			rc = ddp_barrier(ctx);
			fprintf(stderr, "rank %d: then barrier: %s\n", ddp_rank(ctx),
				ddp_strerror(rc));
			if (ddp_rank(ctx) == linger) {
				fprintf(stderr, "rank %d: lingering\n", linger);
				sleep(600);
			}
			if (hold) {
				/* A SIGTERM that came meanwhile ends the rank now. */
				sigprocmask(SIG_UNBLOCK, &term, NULL);
				sleep(600);
			}
			return 3;
		}
	}
	return 0;
}

static void *exit_after(void *ms)
{
	usleep((useconds_t)(intptr_t)ms * 1000);
	fprintf(stderr, "rank exiting now\n");
	_exit(7);
}

static int run_bcastcrash(struct ddp_ctx *ctx, int victim, size_t mib, int ms)
{
	size_t n = mib << 20;
	char *b = malloc(n);
	sigset_t term;
	pthread_t th;
	int rc = 0;

	if (!b)
		ddp_fatal(ctx, "bcastcrash: no memory");
	memset(b, ddp_rank(ctx), n);
	sigemptyset(&term);
	sigaddset(&term, SIGTERM);
	sigprocmask(SIG_BLOCK, &term, NULL);
	for (int i = 0; i < 1000 && rc == 0; i++) {
		if (i == 1 && ddp_rank(ctx) == victim)
			pthread_create(&th, NULL, exit_after, (void *)(intptr_t)ms);
		rc = ddp_broadcast(ctx, b, n, 0);
	}
	free(b);
	if (rc == 0)
		return 0;
	fprintf(stderr, "rank %d: broadcast failed: %s\n", ddp_rank(ctx), ddp_errmsg());
	return 3;
}

static int run_late(struct ddp_ctx *ctx, const char *spec)
{
	static float buf[1000];
	double secs = 0;
	sigset_t term;
	int rc;

	for (const char *p = spec; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
		if (atoi(p) == ddp_rank(ctx) && strchr(p, ':'))
			secs = atof(strchr(p, ':') + 1);
	sigemptyset(&term);
	sigaddset(&term, SIGTERM);
	sigprocmask(SIG_BLOCK, &term, NULL);
	CHECK(ctx, ddp_barrier(ctx));
	usleep((useconds_t)(secs * 1e6));
	rc = ddp_all_reduce(ctx, buf, 1000, DDP_FLOAT32, DDP_SUM);
	fprintf(stderr, "rank %d: late all_reduce: %d: %s\n", ddp_rank(ctx), rc,
		rc < 0 ? ddp_errmsg() : "");
	if (rc < 0) /* what a program that prints the code's text says */
		fprintf(stderr, "rank %d: late all_reduce strerror: %s\n", ddp_rank(ctx),
			ddp_strerror(rc));
	return rc < 0 ? 3 : 0;
}

/* Rank 1's buffer where no other process may read it (memfd_secret: not
 * even the kernel on the peers' behalf): the single copy must fall back. */
static int run_secret(struct ddp_ctx *ctx)
{
	size_t n = 300000, bytes = n * sizeof(float);
	char *b = NULL;
	int bad = 0;

	if (ddp_rank(ctx) == 1) {
		long fd = syscall(SYS_memfd_secret, 0);
		if (fd < 0 || ftruncate((int)fd, (off_t)bytes) != 0 ||
		    (b = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, (int)fd, 0)) ==
			    MAP_FAILED) {
			fprintf(stderr, "memfd_secret: %s\n", strerror(errno));
			return 1;
		}
	} else if (!(b = malloc(bytes))) {
		return 1;
	}
	for (int k = 0; k < 2; k++)
		bad |= check_all_reduce_in(ctx, b, DDP_FLOAT32, DDP_SUM, n) |
		       check_all_reduce_in(ctx, b, DDP_FLOAT32, DDP_MAX, n);
	if (ddp_rank(ctx) == 1)
		munmap(b, bytes);
	else
		free(b);
	return bad;
}

/* A rank that gave up on a collective reuses its buffer at once: a peer
 * that resumes later must not write into it (the single copy's transfers
 * and the direct paths' writes look at the abort flag). */
static int run_reuse(struct ddp_ctx *ctx, const char *gate, const char *op)
{
	size_t n = 16u << 20, bad = 0;
	int shared = op && strstr(op, "shared"), bcast = op && !strcmp(op, "bshared");
	int gather = op && !strcmp(op, "gshared");
	float *b = shared ? ddp_alloc(ctx, n * sizeof(float)) : malloc(n * sizeof(float));
	float *all =
		gather ? ddp_alloc(ctx, n * sizeof(float) * (size_t)ddp_world_size(ctx)) : NULL;
	int me = ddp_rank(ctx), rc;

	if (!b || (gather && !all))
		return 1;
	for (size_t i = 0; i < n; i++)
		b[i] = 1;
	rc = gather  ? ddp_all_gather(ctx, b, all, n * sizeof(float))
	     : bcast ? ddp_broadcast(ctx, b, n * sizeof(float), 0)
		     : ddp_all_reduce(ctx, b, n, DDP_FLOAT32, DDP_SUM);
	if (me == 1 || rc == 0) {
		fprintf(stderr, "rank %d: %s\n", me, rc < 0 ? ddp_errmsg() : "returned");
		rc = me == 1 && rc < 0 ? 3 : me == 1 ? 0 : 1;
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		b[i] = -7;
	printf("refilled\n");
	fflush(stdout);
	for (int k = 0; k < 12000 && access(gate, F_OK) != 0; k++)
		usleep(10000);
	for (size_t i = 0; i < n; i++)
		bad += b[i] != -7;
	printf("overwritten %zu\n", bad);
	fflush(stdout);
	rc = 3;
out:
	/* Freed, for the sanitizers' leak check (the shared memory: the
	 * context's anyway). */
	if (shared) {
		ddp_free(ctx, b);
		ddp_free(ctx, all);
	} else {
		free(b);
	}
	return rc;
}

/* A byte that tells rank r's byte i from any other's (not periodic in i). */
static unsigned char pattern(int r, size_t i)
{
	return (unsigned char)(((uint32_t)i * 2654435761u >> 11) + (uint32_t)r * 101u);
}

static int check_gathered(const unsigned char *recv, size_t bytes, int w, int me, const char *what)
{
	for (int r = 0; r < w; r++)
		for (size_t i = 0; i < bytes; i++)
			if (recv[(size_t)r * bytes + i] != pattern(r, i)) {
				fprintf(stderr,
					"rank %d: %s of %zu bytes: rank %d's part wrong at %zu\n",
					me, what, bytes, r, i);
				return 1;
			}
	return 0;
}

static void *big_alloc(struct ddp_ctx *ctx, int shared, size_t n)
{
	return shared ? ddp_alloc(ctx, n) : malloc(n);
}

static void big_free(struct ddp_ctx *ctx, int shared, void *p)
{
	if (shared)
		ddp_free(ctx, p);
	else
		free(p);
}

/* shared: the buffers come from ddp_alloc (the direct paths, shm_direct.c). */
static int run_big(struct ddp_ctx *ctx, int shared)
{
	/* Around the single copy's threshold (16 KiB), the direct all_gather's
	 * and broadcast's (32 KiB, on ddp_alloc buffers) and the direct
	 * all_reduce's (256 KiB), above a staging slot; the last is 32 MiB and
	 * more: results streamed (copy.c) by all_gather on any world size, by a
	 * staged broadcast from 3 ranks. */
	static const size_t sizes[] = {16383,  16387,	32767,	 32771,	  262143,
				       262147, 1048583, 3000005, 33554467};
	int w = ddp_world_size(ctx), me = ddp_rank(ctx), bad = 0;

	for (int round = 0; round < 2; round++)
		for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]) && !bad; k++) {
			size_t n = sizes[k];
			unsigned char *send = big_alloc(ctx, shared, n);
			unsigned char *recv = big_alloc(ctx, shared, n * (size_t)w);
			if (!send || !recv) {
				fprintf(stderr, "rank %d: out of memory\n", me);
				return 1;
			}
			for (size_t i = 0; i < n; i++)
				send[i] = pattern(me, i);
			memset(recv, 0, n * (size_t)w);
			CHECK(ctx, ddp_all_gather(ctx, send, recv, n));
			bad |= check_gathered(recv, n, w, me, "all_gather");
			memset(recv, 0, n * (size_t)w);
			memcpy(recv + (size_t)me * n, send, n);
			CHECK(ctx, ddp_all_gather(ctx, recv + (size_t)me * n, recv, n));
			bad |= check_gathered(recv, n, w, me, "in-place all_gather");
			/* send anywhere else in recv: refused on each rank before it
			 * talks to any other, so the next call goes on as usual */
			if (ddp_all_gather(ctx, recv + (size_t)me * n + 1, recv, n) != -EINVAL ||
			    !strstr(ddp_errmsg(), "send overlaps recv")) {
				fprintf(stderr, "rank %d: overlapping all_gather: %s\n", me,
					ddp_errmsg());
				bad = 1;
			}
			for (int root = 0; root < w && !bad; root++) {
				for (size_t i = 0; i < n; i++)
					send[i] = me == root ? pattern(root, i) : 0;
				CHECK(ctx, ddp_broadcast(ctx, send, n, root));
				for (size_t i = 0; i < n && !bad; i++)
					if (send[i] != pattern(root, i)) {
						fprintf(stderr,
							"rank %d: broadcast of %zu bytes from %d "
							"wrong at %zu\n",
							me, n, root, i);
						bad = 1;
					}
			}
			big_free(ctx, shared, send);
			big_free(ctx, shared, recv);
		}
	CHECK(ctx, ddp_barrier(ctx));
	return bad;
}

/* One collective of bytes, checked: all_reduce (float32 sum of small
 * integers, exact), all_gather or broadcast (from the last rank). Which path
 * moved it is what the test looks at (the single copy's test hooks). */
static int run_one(struct ddp_ctx *ctx, const char *op, size_t bytes)
{
	int w = ddp_world_size(ctx), me = ddp_rank(ctx), bad = 0;
	unsigned char *buf = malloc(bytes * (size_t)w + 1);

	if (!buf)
		return 1;
	if (!strcmp(op, "all_reduce")) {
		float *f = (float *)(void *)buf;
		size_t n = bytes / sizeof(float);
		for (size_t i = 0; i < n; i++)
			f[i] = (float)((i + (size_t)me) % 97);
		CHECK(ctx, ddp_all_reduce(ctx, f, n, DDP_FLOAT32, DDP_SUM));
		for (size_t i = 0; i < n && !bad; i++) {
			float want = 0;
			for (int r = 0; r < w; r++)
				want += (float)((i + (size_t)r) % 97);
			bad = f[i] != want;
		}
	} else if (!strcmp(op, "all_gather")) {
		unsigned char *send = buf + bytes * (size_t)(w - 1);
		unsigned char *recv = malloc(bytes * (size_t)w + 1);
		if (!recv) {
			free(buf);
			return 1;
		}
		for (size_t i = 0; i < bytes; i++)
			send[i] = pattern(me, i);
		CHECK(ctx, ddp_all_gather(ctx, send, recv, bytes));
		bad = check_gathered(recv, bytes, w, me, "all_gather");
		free(recv);
	} else if (!strcmp(op, "broadcast")) {
		for (size_t i = 0; i < bytes; i++)
			buf[i] = me == w - 1 ? pattern(w - 1, i) : 0;
		CHECK(ctx, ddp_broadcast(ctx, buf, bytes, w - 1));
		for (size_t i = 0; i < bytes && !bad; i++)
			bad = buf[i] != pattern(w - 1, i);
	} else {
		fprintf(stderr, "ddp_coll one: unknown op '%s'\n", op);
		bad = 2;
	}
	if (bad == 1 && strcmp(op, "all_gather")) /* check_gathered said where */
		fprintf(stderr, "rank %d: %s of %zu bytes: wrong result\n", me, op, bytes);
	free(buf);
	return bad;
}

/* FNV-1a of a buffer: what each rank's result is compared by. */
static uint64_t fnv(const void *p, size_t n)
{
	const unsigned char *c = p;
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ c[i]) * 1099511628211ull;
	return h;
}

static const size_t same_sizes[] = {5, 16385, 262147, 3000005};
static const enum ddp_dtype same_dts[] = {DDP_FLOAT32, DDP_FLOAT16, DDP_BFLOAT16};
#define NSAME	 (sizeof(same_sizes) / sizeof(same_sizes[0]))
#define NSAME_DT (sizeof(same_dts) / sizeof(same_dts[0]))

/* The buffers of "same": malloc'd, or (shared) the gradients of a reducer
 * with one parameter per dtype and size, which live in its buckets (on the
 * cpu backend, memory the node's ranks share). */
static int run_same(struct ddp_ctx *ctx, struct ddp_reducer *r)
{
	int w = ddp_world_size(ctx), me = ddp_rank(ctx), bad = 0;
	uint64_t *all = malloc((size_t)w * sizeof(uint64_t));

	for (size_t d = 0; d < NSAME_DT; d++)
		for (size_t k = 0; k < NSAME; k++) {
			const enum ddp_dtype dts[1] = {same_dts[d]};
			size_t n = same_sizes[k];
			char *buf = r ? ddp_reducer_grad(r, d * NSAME + k)
				      : malloc(n * ddp_dtype_size(dts[0]) + 1);
			/* sums of small integers are exact */
			bad |= check_all_reduce_in(ctx, buf, dts[0], DDP_SUM, n);
			if (r && dts[0] == DDP_FLOAT32)
				bad |= check_all_reduce_in(ctx, buf, dts[0], DDP_MAX, n) |
				       check_all_reduce_in(ctx, buf, dts[0], DDP_AVG, n);
			/* fractions round on the way: only the bits everywhere must agree */
			for (size_t i = 0; i < n; i++)
				put(buf, dts[0], i, (double)((me * 131 + i * 17) % 1000) / 7.0);
			CHECK(ctx, ddp_all_reduce(ctx, buf, n, dts[0], DDP_AVG));
			uint64_t h = fnv(buf, n * ddp_dtype_size(dts[0]));
			CHECK(ctx, ddp_all_gather(ctx, &h, all, sizeof(h)));
			for (int q = 0; q < w; q++)
				if (all[q] != h) {
					fprintf(stderr,
						"rank %d: avg of %zu x dtype %d differs on rank "
						"%d\n",
						me, n, dts[0], q);
					bad = 1;
				}
			if (!r)
				free(buf);
		}
	free(all);
	return bad;
}

/* How many memfd mappings of libddp's shared memory this process has (its
 * own buckets, and the peers' it mapped to read them directly). */
static int shared_maps(void)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[512];
	int n = 0;

	while (f && fgets(line, sizeof(line), f))
		n += strstr(line, "/memfd:libddp-shared") != NULL;
	if (f)
		fclose(f);
	return n;
}

/* libddp's own shared regions: it keeps each one's descriptor open (a
 * peer's it maps and closes). */
static int shared_own(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	while (d && (e = readdir(d)) != NULL) {
		char path[300], to[256];
		ssize_t k;

		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		k = readlink(path, to, sizeof(to) - 1);
		if (k > 0) {
			to[k] = '\0';
			n += strncmp(to, "/memfd:libddp-shared", 20) == 0;
		}
	}
	if (d)
		closedir(d);
	return n;
}

static int run_shared(struct ddp_ctx *ctx)
{
	struct ddp_param params[NSAME_DT * NSAME];
	struct ddp_reducer_options o;
	struct ddp_reducer *r;
	float *data = calloc(same_sizes[NSAME - 1], sizeof(double));
	int bad;

	for (size_t d = 0; d < NSAME_DT; d++)
		for (size_t k = 0; k < NSAME; k++)
			params[d * NSAME + k] =
				(struct ddp_param){NULL, data, same_sizes[k], same_dts[d]};
	ddp_reducer_options_init(&o);
	o.broadcast_params = 0;
	CHECK(ctx, ddp_reducer_create(ctx, params, NSAME_DT * NSAME, &o, &r));
	bad = run_same(ctx, r);
	/* And memory from ddp_alloc, which is the same kind. */
	size_t n = same_sizes[NSAME - 1];
	char *b = ddp_alloc(ctx, n * sizeof(float));
	if (!b) {
		fprintf(stderr, "ddp_alloc: %s\n", ddp_errmsg());
		return 1;
	}
	bad |= check_all_reduce_in(ctx, b, DDP_FLOAT32, DDP_SUM, n) |
	       check_all_reduce_in(ctx, b + 4096, DDP_FLOAT32, DDP_MIN, n - 4096);
	ddp_print_force(ctx, "shared maps %d\n", shared_maps());
	ddp_print_force(ctx, "shared own %d\n", shared_own());
	ddp_free(ctx, b);
	bad |= run_big(ctx, 1);
	/* Freed regions (b, big's): the next direct call makes the peers let
	 * go of them, keeping the live buckets. */
	bad |= check_all_reduce_in(ctx, ddp_reducer_grad(r, NSAME - 1), DDP_FLOAT32, DDP_SUM,
				   same_sizes[NSAME - 1]);
	ddp_print_force(ctx, "shared maps after %d\n", shared_maps());
	ddp_print_force(ctx, "shared own after %d\n", shared_own());
	ddp_reducer_destroy(r);
	/* Its buckets are gone; the peers' stay mapped until evicted or the end. */
	free(data);
	return bad;
}

/* Broadcasts of 300000 bytes from rank 0 (rounds below): never the direct
 * path while one buffer is private (staged, the root does not wait for its
 * readers), then every buffer from ddp_alloc, twice. */
static int run_zc_race(struct ddp_ctx *ctx)
{
	const size_t n = 300000;
	int me = ddp_rank(ctx), bad = 0;

	/* Round 0: the root's buffer is private, the others' shared; round 1:
	 * the root's shared, the last rank's private (the root holds its first
	 * chunk back until the agreement says staged); then all shared. */
	for (int round = 0; round < 4 && !bad; round++) {
		int shared = round == 0 ? me != 0 : round == 1 ? me != ddp_world_size(ctx) - 1 : 1;
		unsigned char *b = big_alloc(ctx, shared, n);
		if (!b)
			return 1;
		for (size_t i = 0; i < n; i++)
			b[i] = me == 0 ? pattern(round, i) : 0;
		CHECK(ctx, ddp_broadcast(ctx, b, n, 0));
		for (size_t i = 0; i < n && !bad; i++)
			if (b[i] != pattern(round, i)) {
				fprintf(stderr, "rank %d: broadcast %d wrong at %zu\n", me, round,
					i);
				bad = 1;
			}
		big_free(ctx, shared, b);
	}
	/* Then an all_reduce of fresh ddp_alloc memory, which every rank must
	 * still read in place: each then maps its own buffer and each peer's
	 * (the peers' freed ones let go), world size in all. */
	float *f = ddp_alloc(ctx, n * sizeof(float));
	if (!f)
		return 1;
	bad |= check_all_reduce_in(ctx, (char *)f, DDP_FLOAT32, DDP_SUM, n);
	ddp_print_force(ctx, "zc maps %d\n", shared_maps());
	ddp_free(ctx, f);
	CHECK(ctx, ddp_barrier(ctx));
	return bad;
}

/* process_vm_writev refused with EPERM, process_vm_readv allowed: a
 * profile that lets the peers read this rank but not write into it. */
static int refuse_writev(void)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_writev, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {sizeof(f) / sizeof(f[0]), f};

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
		perror("seccomp");
		return -1;
	}
	return 0;
}

/* Buckets whose reductions together take longer than the timeout, each of
 * them well inside it: finish must wait for progress, not for the sum. */
static int run_slow_buckets(struct ddp_ctx *ctx, int nb, int ms, size_t N)
{
	struct ddp_param *params = calloc((size_t)nb, sizeof(*params));
	float *data = calloc((size_t)nb * N, sizeof(float));
	struct ddp_reducer_options o;
	struct ddp_reducer *r;
	int me = ddp_rank(ctx), w = ddp_world_size(ctx), bad = 0, rc;

	if (!params || !data || nb < 1 || N < 1)
		return 1;
	for (int i = 0; i < nb; i++)
		params[i] = (struct ddp_param){NULL, data + (size_t)i * N, N, DDP_FLOAT32};
	ddp_reducer_options_init(&o);
	o.first_bucket_bytes = o.bucket_bytes = N * sizeof(float);
	o.broadcast_params = 0;
	CHECK(ctx, ddp_reducer_create(ctx, params, (size_t)nb, &o, &r));
	if (ddp_reducer_num_buckets(r) != (size_t)nb) {
		fprintf(stderr, "%zu buckets, not %d\n", ddp_reducer_num_buckets(r), nb);
		return 1;
	}
	for (int i = 0; i < nb; i++)
		for (size_t k = 0; k < N; k++)
			((float *)ddp_reducer_grad(r, (size_t)i))[k] = (float)(me + 1);
	/* Backward: the last parameters' gradients first (bucket 0). */
	for (int i = nb - 1; i >= 0; i--) {
		if (me == w - 1)
			usleep((useconds_t)ms * 1000);
		CHECK(ctx, ddp_reducer_mark_ready(r, (size_t)i));
	}
	if ((rc = ddp_reducer_finish(r)) < 0) {
		fprintf(stderr, "[rank%d] finish: %s\n", me, ddp_errmsg());
		ddp_reducer_destroy(r);
		return 1;
	}
	for (int i = 0; i < nb; i++)
		for (size_t k = 0; k < N; k++)
			bad |= ((float *)ddp_reducer_grad(r, (size_t)i))[k] != (float)(w + 1) / 2;
	if (bad)
		fprintf(stderr, "[rank%d] wrong mean\n", me);
	ddp_reducer_destroy(r);
	free(data);
	free(params);
	return bad;
}

static int worker(int rank, void *p)
{
	struct args *a = p;
	struct ddp_ctx *ctx;
	int rc;
	const char *mode = a->argc > 0 ? a->argv[0] : "check";

	if (getenv("DDP_COLL_UNDUMPABLE"))
		prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	if (getenv("DDP_COLL_NO_WRITEV") && refuse_writev() < 0)
		return 1;
	rc = ddp_init(NULL, &ctx);

	if (rc < 0) {
		fprintf(stderr, "%s\n", ddp_errmsg()); /* "ddp_init: ..." */
		return 1;
	}
	if (!strcmp(mode, "check"))
		rc = run_check(ctx, a->argc > 1 && !strcmp(a->argv[1], "shared"));
	else if (!strcmp(mode, "where"))
		rc = run_where(ctx);
	else if (!strcmp(mode, "wide"))
		rc = run_wide(ctx);
	else if (!strcmp(mode, "wideoom") && a->argc >= 2)
		rc = run_wideoom(ctx, atoi(a->argv[1]));
	else if (!strcmp(mode, "big"))
		rc = run_big(ctx, 0);
	else if (!strcmp(mode, "cc"))
		rc = run_cc(ctx, a->argc - 1, a->argv + 1);
	else if (!strcmp(mode, "same"))
		rc = run_same(ctx, NULL);
	else if (!strcmp(mode, "shared"))
		rc = run_shared(ctx);
	else if (!strcmp(mode, "zcrace"))
		rc = run_zc_race(ctx);
	else if (!strcmp(mode, "secret"))
		rc = run_secret(ctx);
	else if (!strcmp(mode, "reuse") && a->argc >= 2)
		rc = run_reuse(ctx, a->argv[1], a->argc >= 3 ? a->argv[2] : NULL);
	else if (!strcmp(mode, "slowbkt") && a->argc >= 3)
		rc = run_slow_buckets(ctx, atoi(a->argv[1]), atoi(a->argv[2]),
				      a->argc > 3 ? strtoull(a->argv[3], NULL, 0) : 1024);
	else if (!strcmp(mode, "one") && a->argc >= 3)
		rc = run_one(ctx, a->argv[1], strtoull(a->argv[2], NULL, 0));
	else if (!strcmp(mode, "bench") && a->argc >= 3)
		rc = run_bench(ctx, strtoull(a->argv[1], NULL, 0), atoi(a->argv[2]));
	else if (!strcmp(mode, "mismatch")) {
		static float buf[2000];
		int r = ddp_all_reduce(ctx, buf, ddp_rank(ctx) == 1 ? 2000 : 1000, DDP_FLOAT32,
				       DDP_SUM);
		fprintf(stderr, "rank %d: %s: %s\n", ddp_rank(ctx), ddp_strerror(r), ddp_errmsg());
		rc = r < 0 ? 3 : 0;
	} else if (!strcmp(mode, "diverge") && a->argc >= 3) {
		rc = run_diverge(ctx, a->argv[1], a->argv[2]);
	} else if (!strcmp(mode, "hold")) {
		ddp_print_force(ctx, "ready\n");
		sleep(1);
		rc = ddp_barrier(ctx) < 0;
	} else if (!strcmp(mode, "late") && a->argc >= 2) {
		rc = run_late(ctx, a->argv[1]);
	} else if (!strcmp(mode, "bcastcrash") && a->argc >= 4) {
		rc = run_bcastcrash(ctx, atoi(a->argv[1]), (size_t)atol(a->argv[2]),
				    atoi(a->argv[3]));
	} else if ((!strcmp(mode, "crash") || !strcmp(mode, "stop")) && a->argc >= 2)
		rc = run_fail(ctx, atoi(a->argv[1]), !strcmp(mode, "stop"), a->argc - 2,
			      a->argv + 2);
	else {
		fprintf(stderr, "ddp_coll: bad mode\n");
		rc = 2;
	}
	if (rc == 0)
		ddp_print_force(ctx, "ok rank %d\n", ddp_rank(ctx));
	ddp_finalize(ctx);
	return rc;
}

int main(int argc, char **argv)
{
	struct args a = {argc - 1, argv + 1};

	if (argc > 2 && !strcmp(argv[1], "--spawn")) {
		int n = atoi(argv[2]);
		a.argc -= 2;
		a.argv += 2;
		int rc = ddp_spawn(worker, &a, n, NULL, NULL);
		if (rc < 0) {
			fprintf(stderr, "%s\n", ddp_errmsg()); /* "ddp_spawn: ..." */
			return 1;
		}
		return 0;
	}
	return worker(0, &a);
}

static void put(void *buf, enum ddp_dtype dt, size_t i, double v)
{
	switch (dt) {
	case DDP_FLOAT32:
		((float *)buf)[i] = (float)v;
		break;
	case DDP_FLOAT64:
		((double *)buf)[i] = v;
		break;
	case DDP_INT32:
		((int *)buf)[i] = (int)v;
		break;
	case DDP_INT64:
		((long long *)buf)[i] = (long long)v;
		break;
	case DDP_FLOAT16: {
		/* small integers: exact half floats built by hand */
		float f = (float)v;
		unsigned u;
		memcpy(&u, &f, 4);
		unsigned s = (u >> 16) & 0x8000, e = (u >> 23) & 0xff, m = u & 0x7fffff;
		((unsigned short *)buf)[i] =
			f == 0 ? (unsigned short)s
			       : (unsigned short)(s | ((e - 112) << 10) | (m >> 13));
		break;
	}
	case DDP_BFLOAT16: {
		float f = (float)v;
		unsigned u;
		memcpy(&u, &f, 4);
		((unsigned short *)buf)[i] = (unsigned short)(u >> 16);
		break;
	}
	}
}

static double get(const void *buf, enum ddp_dtype dt, size_t i)
{
	switch (dt) {
	case DDP_FLOAT32:
		return ((const float *)buf)[i];
	case DDP_FLOAT64:
		return ((const double *)buf)[i];
	case DDP_INT32:
		return ((const int *)buf)[i];
	case DDP_INT64:
		return (double)((const long long *)buf)[i];
	case DDP_FLOAT16: {
		unsigned short h = ((const unsigned short *)buf)[i];
		unsigned s = (h >> 15) & 1, e = (h >> 10) & 0x1f, m = h & 0x3ff;
		double v = e ? ldexp(1024 + m, (int)e - 25) : ldexp(m, -24);
		return s ? -v : v;
	}
	case DDP_BFLOAT16: {
		unsigned u = (unsigned)((const unsigned short *)buf)[i] << 16;
		float f;
		memcpy(&f, &u, 4);
		return f;
	}
	}
	return 0;
}
