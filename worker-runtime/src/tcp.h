/* tcp: the ring between node leaders (local rank 0 of every node) for the cpu
 * backend of a multi-node job.
 *
 * Discovery goes through the agent's store (the connection ddp_init's join
 * opened, keys under "ddp/<run id>/r<restart>/"): each leader listens on the address it uses to
 * reach the store, publishes "addr port nranks rank..." for its node, reads
 * every other node's entry, connects to its right neighbour and accepts its
 * left one. Collectives are ring algorithms (all_reduce: reduce-scatter then
 * all-gather, so each leader sends 2(M-1)/M of the buffer), streamed: a byte
 * goes on as soon as its step has it; a small all_reduce instead travels with
 * the calls' gather, once around the ring. Every socket wait
 * has the caller's deadline; a neighbour that closes gives DDP_EPEER, one
 * that failed first and said why (an abort record) gives its reason. */
#ifndef DDP_TCP_H
#define DDP_TCP_H

#include <stddef.h>
#include <stdint.h>

#include "coll_call.h"
#include "ddp_internal.h"

/* Internal: not exported from libddp.so. */
#pragma GCC visibility push(hidden)

struct ddpi_tcp;

struct store_client;

/* local_ranks: the global ranks of this node (env->local_world entries); sc:
 * the joined store, its key prefix set (used during the call only). */
int ddpi_tcp_open(const struct ddp_env *env, const int *local_ranks, struct store_client *sc,
		  int64_t deadline, struct ddpi_tcp **out);
void ddpi_tcp_close(struct ddpi_tcp *t);

/* Before a collective's data: the leaders gather their calls around the ring
 * (nnodes - 1 steps of one fixed-size descriptor) and every leader compares
 * them all, so that all fail alike, naming the nodes and ranks of each side,
 * when any differs (-EINVAL). */
int ddpi_tcp_agree(struct ddpi_tcp *t, const struct ddpi_call *mine, int64_t deadline,
		   const char *what);
/* Agrees on call first (as ddpi_tcp_agree; a small one with its data). */
int ddpi_tcp_all_reduce(struct ddpi_tcp *t, const struct ddpi_call *call, void *buf, size_t count,
			enum ddp_dtype dt, enum ddp_op op, int64_t deadline);
/* root is a global rank; its node's leader must already hold the data. */
int ddpi_tcp_broadcast(struct ddpi_tcp *t, void *buf, size_t bytes, int root, int64_t deadline);
/* recv (world * bytes) holds this node's ranks' pieces; fills in every other's. */
int ddpi_tcp_all_gather(struct ddpi_tcp *t, void *recv, size_t bytes, int64_t deadline);
/* This node's communicator failed for good (code, with the reason why, in
 * its call seq: ddpi_call.seq):
 * shut the ring down now, so the other leaders fail at once rather than at
 * their deadline while this process lives on, and fail with this reason
 * rather than "the leader is gone": an abort record goes to the next leader
 * (passed on around the ring) where it reads a frame next, and to the
 * previous one, which reads it if its sends here fail. A record read from a
 * neighbour is passed on instead of this node's own reason. Later ring
 * operations fail. */
void ddpi_tcp_abort(struct ddpi_tcp *t, int code, const char *why, uint64_t seq);
/* This node's ranks called ddp_finalize after ncalls collective calls: the
 * same record, marked finished, so that a leader that makes another call
 * fails at once naming this node (-EINVAL, the nodes made different numbers
 * of calls, or, refused not NULL, the leader's call refused for its
 * arguments) rather than "the leader is gone". Unread where every node
 * finishes alike. Nothing after a failure (its record went already). */
void ddpi_tcp_finish(struct ddpi_tcp *t, uint64_t ncalls, const char *refused);

#pragma GCC visibility pop

#endif
