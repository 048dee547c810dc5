/* hang_coll: a libddp job where one rank stops taking part, for the hang
 * tests (tests/e2e/test_launch_hang.py).
 *   hang_coll N [HANG_RANK]
 * Every rank does N all_reduces and prints "rank R did N"; then HANG_RANK
 * (default 1) sleeps forever in hang_coll_sleeping_rank() while the others
 * block in all_reduce number N+1. With HANG_RANK -1 nobody hangs and every
 * rank does one more all_reduce and exits 0 (after sleeping 2 s, printing
 * nothing, so SIGUSR2 can be sent meanwhile). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "ddp.h"

/* Not inlined, so a native stack names it. */
__attribute__((noinline)) static void hang_coll_sleeping_rank(int r)
{
	for (;;)
		sleep(1000 + (unsigned)r);
}

int main(int argc, char **argv)
{
	struct ddp_ctx *ctx;
	int n = argc > 1 ? atoi(argv[1]) : 3;
	int hang = argc > 2 ? atoi(argv[2]) : 1;
	float x = 1.0f;
	int i, r;

	if (ddp_init(NULL, &ctx) < 0) {
		fprintf(stderr, "hang_coll: %s\n", ddp_errmsg());
		return 1;
	}
	r = ddp_rank(ctx);
	for (i = 0; i < n; i++)
		if (ddp_all_reduce(ctx, &x, 1, DDP_FLOAT32, DDP_SUM) < 0) {
			fprintf(stderr, "hang_coll: %s\n", ddp_errmsg());
			return 1;
		}
	ddp_print_force(ctx, "rank %d did %d\n", r, n);
	if (hang < 0)
		sleep(2);
	else if (r == hang)
		hang_coll_sleeping_rank(r);
	if (ddp_all_reduce(ctx, &x, 1, DDP_FLOAT32, DDP_SUM) < 0) {
		fprintf(stderr, "hang_coll: %s\n", ddp_errmsg());
		return 1;
	}
	ddp_finalize(ctx);
	return 0;
}
