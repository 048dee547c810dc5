/* tcp_int: what the ring's two files share: the communicator's state, the
 * neighbours' node numbers and how an error names the leader that caused it.
 * tcp.c streams and runs the collectives; tcp_setup.c opens (discovery through
 * the store, connect, hello) and closes the ring. */
#ifndef DDP_TCP_INT_H
#define DDP_TCP_INT_H

#include <stddef.h>

#include "tcp.h"

#pragma GCC visibility push(hidden)

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

#pragma GCC visibility pop

#endif
