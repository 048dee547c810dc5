/* tcp_int: what the ring's files share: the communicator's state, the
 * neighbours' node numbers, the frames on the wire and how an error names the
 * leader that caused it. tcp.c streams and runs the collectives; tcp_setup.c
 * opens (discovery through the store, connect, hello) and closes the ring;
 * tcp_abort.c carries a failure's reason around it. */
#ifndef DDP_TCP_INT_H
#define DDP_TCP_INT_H

#include <stddef.h>
#include <stdint.h>

#include "tcp.h"

#pragma GCC visibility push(hidden)

/* A call on the wire: the descriptor, then len bytes of the node's data (a
 * small all_reduce's buffer; nothing for every other call). A frame whose
 * call.kind is DDPI_TCP_ABORT is an abort record instead (tcp_abort.c):
 * call.root is the node whose failure it reports, call.dt that failure's
 * code negated, call.op 1 where that node finished instead (ddpi_tcp_finish),
 * call.seq the call it failed in (or the calls it made, finished), and len
 * bytes of its text (at most DDPI_TCP_ABORT_TEXT) follow. */
struct ddpi_tcp_frame {
	struct ddpi_call call;
	uint64_t len;
};

#define DDPI_TCP_ABORT	    0x41424f52u /* "ABOR": not a collective's kind */
#define DDPI_TCP_ABORT_TEXT 512		/* the most text an abort record carries */

/* The failure an abort record reports. */
struct ddpi_tcp_why {
	int from;     /* the node that failed (-1: no record read) */
	int finished; /* it did not fail: it called ddp_finalize (call.op 1) */
	int code;
	uint64_t seq; /* the call it failed in (call.seq) */
	size_t len;
	char text[DDPI_TCP_ABORT_TEXT + 1];
};

struct ddpi_tcp {
	int nnodes, me, world, restart;
	int left_fd, right_fd;
	int *node_of;		/* global rank -> node */
	int **ranks;		/* node -> its global ranks, ascending */
	int *nranks;		/* node -> count */
	void *tmp;		/* receive scratch for reductions and packed blocks */
	int spin_fails, nospin; /* spins failed in a row; waits left without one */
	size_t tmp_len;
	char cc[2][16]; /* congestion control for small and large calls */
	int cc_now;	/* which of them the sockets have (-1: the host's, left alone) */
	/* The next bytes this leader sends to the right start a frame (between
	 * calls, or once abort_read has sent this node's whole frame of the
	 * calls' gather): only then may an abort record follow, for there the
	 * next leader reads a frame. */
	int at_frame;
	int aborted;  /* ddpi_tcp_abort ran */
	uint64_t seq; /* the current call's sequence number (gather_calls) */
	/* The right socket is watched for abort records from this call on
	 * (ddpi_tcp_why_watch; UINT64_MAX: never again). */
	uint64_t watch_from;
	struct ddpi_tcp_why why; /* the abort record read, to pass on */
};

/* Before a call of this many bytes (an all_reduce's or broadcast's buffer,
 * an all_gather's whole result): the ring's sockets get the congestion
 * control for its size (tcp_setup.c says why). */
void ddpi_tcp_cc_for(struct ddpi_tcp *t, size_t bytes);

static inline int left_of(const struct ddpi_tcp *t)
{
	return (t->me - 1 + t->nnodes) % t->nnodes;
}

static inline int right_of(const struct ddpi_tcp *t)
{
	return (t->me + 1) % t->nnodes;
}

/* The current error was caused by node g's leader (it did what): name it,
 * with its global rank once the node entries are read. Returns code. */
int ddpi_tcp_leader_cause(const struct ddpi_tcp *t, int code, int g, const char *did);

/* "ranks 4-7" or "ranks 4,6,9" (node g's ranks, ascending), at most len bytes. */
void ddpi_tcp_node_ranks(const struct ddpi_tcp *t, int g, char *buf, size_t len);

/* An abort record's header f came from the left in place of a call: checks
 * it (-EPROTO, no error set: the caller says what was wrong) and notes whose
 * failure it reports; its text, f->len bytes, goes to t->why.text. */
int ddpi_tcp_why_begin(struct ddpi_tcp *t, const struct ddpi_tcp_frame *f);
/* The record's text is in: the call (what) fails with its reason, this
 * node's ranks told which node failed and why. Returns its code. */
int ddpi_tcp_why_fail(struct ddpi_tcp *t, const char *what);
/* Sending to the right failed with rc (the next leader closed), or, waiting
 * up to wait_ms for it, receiving from the left did (the previous leader
 * closed mid-call, where no record could follow on that stream; its record
 * goes left, and round the ring to this node's right): if an abort record
 * lies on the right socket, the call fails with its reason instead.
 * Returns rc or the record's code. */
int ddpi_tcp_why_peek(struct ddpi_tcp *t, int rc, int wait_ms, const char *what);
/* The right socket, which the next leader only writes abort records to, is
 * readable while this one waits in a call: where it holds a whole abort
 * record of a failure in this call or before, the call fails with its
 * reason at once (the failure goes round the ring backwards too, so a
 * leader whose previous one cannot tell it, its data cut, learns it). A
 * failure in a later call (the next leader is ahead: this call may still
 * end well) waits for the next call; a finished leader, or one closed after
 * its last call, is watched no more. 0 where the call goes on. */
int ddpi_tcp_why_watch(struct ddpi_tcp *t, const char *what);

#pragma GCC visibility pop

#endif
