/* ddp_hello: init, print and exit, for the init/print/error-file tests.
 *   ddp_hello                 prints "hello from rank R" on stdout, a line on stderr,
 *                             and a forced line from every rank
 *   ddp_hello fatal MSG       ddp_fatal(MSG) on the last rank after a barrier
 *   ddp_hello info            prints rank/world/local/node/backend/device on every rank
 *   ddp_hello crash-once      in the first attempt (TORCHELASTIC_RESTART_COUNT=0) the last
 *                             rank exits 5 after a barrier; later attempts all_reduce and
 *                             print "attempt N sum S" on rank 0
 * Exits 1 with ddp_errmsg() when ddp_init fails. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ddp.h"

int main(int argc, char **argv)
{
	struct ddp_ctx *ctx;

	if (ddp_init(NULL, &ctx) < 0) {
		fprintf(stderr, "ddp_hello: %s\n", ddp_errmsg());
		return 1;
	}
	int r = ddp_rank(ctx), w = ddp_world_size(ctx);
	if (argc > 2 && !strcmp(argv[1], "fatal")) {
		ddp_barrier(ctx);
		if (r == w - 1)
			ddp_fatal(ctx, "%s", argv[2]);
		ddp_barrier(ctx); /* fails once the last rank is gone */
		return 3;
	}
	if (argc > 1 && !strcmp(argv[1], "crash-once")) {
		const char *a = getenv("TORCHELASTIC_RESTART_COUNT");
		int v = r;
		ddp_barrier(ctx);
		if (a && !strcmp(a, "0")) {
			if (r == w - 1)
				_exit(5);
			ddp_barrier(ctx); /* fails: the last rank is gone */
			return 3;
		}
		if (ddp_all_reduce(ctx, &v, 1, DDP_INT32, DDP_SUM) < 0)
			return 1;
		printf("attempt %s sum %d\n", a ? a : "?", v);
		return ddp_finalize(ctx) < 0;
	}
	if (argc > 1 && !strcmp(argv[1], "info")) {
		ddp_print_force(
			ctx, "info rank=%d world=%d local=%d/%d node=%d/%d backend=%s device=%d\n",
			r, w, ddp_local_rank(ctx), ddp_local_world_size(ctx), ddp_node_rank(ctx),
			ddp_num_nodes(ctx), ddp_backend_name(ddp_backend(ctx)), ddp_device(ctx));
		return ddp_finalize(ctx) < 0;
	}
	printf("hello from rank %d of %d\n", r, w);
	fflush(stdout);
	fprintf(stderr, "stderr from rank %d\n", r);
	ddp_print_force(ctx, "forced from rank %d\n", r);
	ddp_barrier(ctx);
	return ddp_finalize(ctx) < 0;
}
