/* ddp_badframe: a node whose leader breaks the TCP ring's protocol, for the
 * tests that every node then fails with the reason (tests/e2e/test_ddp_badframe.py).
 *   ddp_badframe len NODE      node NODE's leader sends its first call's frame
 *                              with a length no call has (1 GiB of data)
 *   ddp_badframe record NODE   it sends an abort record that names no node
 *                              in place of its first call's frame
 *   ddp_badframe ... NODE last the same in its last frame of the first call's
 *                              gather (2 nodes: its first), and the calls are
 *                              broadcasts of 16 bytes from rank 0, whose data
 *                              follows the gather
 * Every rank then makes two small all_reduces (or broadcasts; a node can
 * finish the first before the failure reaches it) and prints "badframe rc:
 * RC" and "badframe failed: ERROR" for the first that fails (exit 1), or
 * "badframe returned" (exit 0, and "badframe data: ok" or "badframe data:
 * bad" for a broadcast); SIGTERM is held until then.
 *
 * The bad frame is made here, not in libddp: this program's sendmsg takes
 * the place of libc's for the library linked into it, and changes the first
 * frame the ring sends after ddp_init. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ddp.h"
#include "tcp_int.h"

static enum { NONE, LEN, RECORD } armed;
static int skip; /* frames to let go first */

ssize_t sendmsg(int fd, const struct msghdr *mh, int flags)
{
	struct ddpi_tcp_frame bad;
	struct iovec v[16];
	struct msghdr m = *mh;

	if (armed != NONE && mh->msg_iovlen >= 1 && mh->msg_iovlen <= 16 &&
	    mh->msg_iov[0].iov_len == sizeof(bad)) {
		memcpy(&bad, mh->msg_iov[0].iov_base, sizeof(bad));
		if (bad.call.kind != DDPI_TCP_ABORT && skip > 0) {
			skip--;
		} else if (bad.call.kind != DDPI_TCP_ABORT) {
			if (armed == LEN) {
				bad.len = 1ull << 30;
			} else {
				bad = (struct ddpi_tcp_frame){
					.call = {.kind = DDPI_TCP_ABORT, .root = 1000}};
			}
			armed = NONE;
			memcpy(v, mh->msg_iov, mh->msg_iovlen * sizeof(v[0]));
			v[0].iov_base = &bad;
			m.msg_iov = v;
			if (bad.call.kind == DDPI_TCP_ABORT) /* the header alone */
				m.msg_iovlen = 1;
		}
	}
	return syscall(SYS_sendmsg, fd, &m, flags);
}

int main(int argc, char **argv)
{
	struct ddp_ctx *ctx;
	float x[4] = {1, 2, 3, 4};
	const char *node = getenv("GROUP_RANK"), *local = getenv("LOCAL_RANK");
	int last = argc == 4 && !strcmp(argv[3], "last"), nnodes = atoi(getenv("GROUP_WORLD_SIZE"));
	char b[16];

	if (argc < 3 || argc > 4 || (strcmp(argv[1], "len") && strcmp(argv[1], "record")) ||
	    (argc == 4 && !last)) {
		fprintf(stderr, "usage: ddp_badframe len|record NODE [last]\n");
		return 2;
	}
	/* A launcher stops the others when one rank fails: SIGTERM waits until
	 * this rank has said how its calls ended. */
	sigset_t term;
	sigemptyset(&term);
	sigaddset(&term, SIGTERM);
	sigprocmask(SIG_BLOCK, &term, NULL);
	if (ddp_init(NULL, &ctx) < 0) {
		fprintf(stderr, "ddp_badframe: %s\n", ddp_errmsg());
		return 1;
	}
	if (node && local && !strcmp(node, argv[2]) && !strcmp(local, "0"))
		armed = strcmp(argv[1], "len") ? RECORD : LEN;
	skip = last ? nnodes - 2 : 0; /* the gather's steps: nnodes - 1 frames */
	memset(b, ddp_rank(ctx) == 0 ? 7 : 0, sizeof(b));
	for (int i = 0; i < 2; i++) {
		int rc = last ? ddp_broadcast(ctx, b, sizeof(b), 0)
			      : ddp_all_reduce(ctx, x, 4, DDP_FLOAT32, DDP_SUM);
		if (rc < 0) {
			fprintf(stderr, "badframe rc: %d\nbadframe failed: %s\n", rc, ddp_errmsg());
			ddp_finalize(ctx);
			return 1;
		}
	}
	fprintf(stderr, "badframe returned\n");
	if (last) {
		int ok = 1;
		for (size_t i = 0; i < sizeof(b); i++)
			ok &= b[i] == 7;
		fprintf(stderr, "badframe data: %s\n", ok ? "ok" : "bad");
	}
	return ddp_finalize(ctx) < 0;
}
