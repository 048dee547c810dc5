/* ddp_hello: init, print and exit, for the init/print/error-file tests.
 *   ddp_hello                 prints "hello from rank R" on stdout, a line on stderr,
 *                             and a forced line from every rank
 *   ddp_hello fatal MSG       ddp_fatal(MSG) on the last rank after a barrier
 *   ddp_hello info            prints rank/world/local/node/backend/device on every rank
 *   ddp_hello crash-once      in the first attempt (TORCHELASTIC_RESTART_COUNT=0) the last
 *                             rank exits 5 after a barrier; later attempts all_reduce and
 *                             print "attempt N sum S" on rank 0
 *   ddp_hello members         rank 0 reads the join's records from the launcher's store
 *                             (MASTER_ADDR:MASTER_PORT) and prints "joined: R R ..." (the
 *                             ranks that published one, in store order)
 *   ddp_hello linger SEC      prints "lingering R" on stdout (printf, no fflush), sleeps SEC
 *                             seconds, then prints "done R"
 *   ddp_hello bufmode [full]  prints "linebuf R N" on stderr: N is 1 when stdout is line-
 *                             buffered after ddp_init; full: the program first sets
 *                             setvbuf(stdout, NULL, _IOFBF, 65536) itself
 *   ddp_hello errmsg          prints "errmsg R 'TEXT'" from every rank: ddp_errmsg() once
 *                             ddp_init succeeded
 * Exits 1 with ddp_errmsg() when ddp_init fails. */
#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ddp.h"
#include "store_client.h"

/* The ranks listed in join/members, where ddp_init's join left them. */
static int print_members(void)
{
	const char *run = getenv("TORCHELASTIC_RUN_ID"),
		   *restart = getenv("TORCHELASTIC_RESTART_COUNT");
	struct store_client *c;
	char prefix[256], *p;
	void *v;
	size_t len;

	if (store_client_connect(getenv("MASTER_ADDR"), atoi(getenv("MASTER_PORT")), 10000, 10000,
				 &c) < 0)
		return 1;
	snprintf(prefix, sizeof(prefix), "ddp/%s/r%s", run ? run : "none", restart ? restart : "0");
	store_client_set_prefix(c, prefix);
	if (store_client_try_get(c, "join/members", &v, &len) < 0) {
		store_client_close(c);
		return 1;
	}
	printf("joined:");
	for (p = v; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		printf(" %d", atoi(p));
	printf("\n");
	free(v);
	store_client_close(c);
	return 0;
}

int main(int argc, char **argv)
{
	struct ddp_ctx *ctx;

	if (argc > 2 && !strcmp(argv[1], "bufmode") && !strcmp(argv[2], "full"))
		setvbuf(stdout, NULL, _IOFBF, 65536);

	if (ddp_init(NULL, &ctx) < 0) {
		fprintf(stderr, "ddp_hello: %s\n", ddp_errmsg());
		return 1;
	}
	int r = ddp_rank(ctx), w = ddp_world_size(ctx);
	if (argc > 1 && !strcmp(argv[1], "errmsg")) {
		char msg[512];

		snprintf(msg, sizeof(msg), "%s", ddp_errmsg()); /* before any other call */
		ddp_print_force(ctx, "errmsg %d '%s'\n", r, msg);
		return ddp_finalize(ctx) < 0;
	}
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
	if (argc > 2 && !strcmp(argv[1], "linger")) {
		printf("lingering %d\n", r);
		sleep((unsigned)atoi(argv[2]));
		printf("done %d\n", r);
		return ddp_finalize(ctx) < 0;
	}
	if (argc > 1 && !strcmp(argv[1], "bufmode")) {
		fprintf(stderr, "linebuf %d %d\n", r, __flbf(stdout) != 0);
		return ddp_finalize(ctx) < 0;
	}
	if (argc > 1 && !strcmp(argv[1], "members")) {
		int rc = r == 0 ? print_members() : 0;
		return ddp_finalize(ctx) < 0 || rc;
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
