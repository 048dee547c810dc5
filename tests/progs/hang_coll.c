/* hang_coll: a libddp job where one rank stops taking part, for the hang
 * tests (tests/e2e/test_launch_hang.py).
 *   hang_coll N R        N all_reduces, "rank X did N" on stdout, then rank R
 *                        sleeps forever in hang_coll_sleeping_rank() while
 *                        the others block in all_reduce number N+1
 *   hang_coll N wait F   the same, then every rank waits (quietly, sleeping)
 *                        until file F exists, does one more all_reduce and
 *                        exits 0
 *   hang_coll N slow     N all_reduces 0.2 s apart, printing nothing and
 *                        using no CPU in between, then exits 0
 *   hang_coll N compute S  after N all_reduces rank 0 computes S seconds
 *                        (printing nothing) while the others wait in
 *                        all_reduce N+1; then every rank exits 0
 *   hang_coll N stop R   after N all_reduces rank R stops itself (SIGSTOP,
 *                        as ^Z would) while the others wait in all_reduce
 *                        N+1
 *   hang_coll N late R   rank R (its RANK) sleeps forever in
 *                        hang_coll_sleeping_rank() before ddp_init, while
 *                        the others wait in ddp_init for it to join
 *   hang_coll N early R  rank R (R+: every rank from R on) exits 0 before
 *                        ddp_init, while the others wait in ddp_init */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ddp.h"

/* Not inlined, so a native stack names it. */
__attribute__((noinline)) static void hang_coll_sleeping_rank(int r)
{
	for (;;)
		sleep(1000 + (unsigned)r);
}

static int all_reduce(struct ddp_ctx *ctx)
{
	float x = 1.0f;

	if (ddp_all_reduce(ctx, &x, 1, DDP_FLOAT32, DDP_SUM) < 0) {
		fprintf(stderr, "hang_coll: %s\n", ddp_errmsg());
		exit(1);
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct ddp_ctx *ctx;
	int n = argc > 1 ? atoi(argv[1]) : 3;
	const char *mode = argc > 2 ? argv[2] : "1";
	bool slow = strcmp(mode, "slow") == 0;
	int i, r;

	if ((strcmp(mode, "late") == 0 || strcmp(mode, "early") == 0) && argc > 3 &&
	    getenv("RANK") &&
	    (atoi(getenv("RANK")) == atoi(argv[3]) ||
	     (strchr(argv[3], '+') && atoi(getenv("RANK")) > atoi(argv[3])))) {
		if (strcmp(mode, "early") == 0)
			return 0;
		hang_coll_sleeping_rank(atoi(argv[3]));
	}
	if (ddp_init(NULL, &ctx) < 0) {
		fprintf(stderr, "hang_coll: %s\n", ddp_errmsg());
		return 1;
	}
	r = ddp_rank(ctx);
	for (i = 0; i < n; i++) {
		if (slow)
			usleep(200 * 1000);
		all_reduce(ctx);
	}
	if (slow) {
		ddp_finalize(ctx);
		return 0;
	}
	ddp_print_force(ctx, "rank %d did %d\n", r, n);
	if (strcmp(mode, "compute") == 0 && argc > 3) {
		if (r == 0) {
			struct timespec t0, t;
			volatile double x = 0;

			clock_gettime(CLOCK_MONOTONIC, &t0);
			do {
				for (int k = 0; k < 100000; k++)
					x += k;
				clock_gettime(CLOCK_MONOTONIC, &t);
			} while (t.tv_sec - t0.tv_sec < atoi(argv[3]));
			(void)x; /* busy work, kept by volatile */
		}
	} else if (strcmp(mode, "wait") == 0 && argc > 3) {
		while (access(argv[3], F_OK) != 0)
			usleep(50 * 1000);
	} else if (strcmp(mode, "stop") == 0 && argc > 3) {
		if (r == atoi(argv[3]))
			raise(SIGSTOP);
	} else if (r == atoi(mode)) {
		hang_coll_sleeping_rank(r);
	}
	all_reduce(ctx);
	ddp_finalize(ctx);
	return 0;
}
