/* coll_call: what a collective call is, as every rank must agree on it.
 *
 * A call is (kind, element count or bytes, dtype, op, root as a global rank,
 * sequence number). Before any data moves, the ranks compare their calls: inside
 * a node through the shared segment (shm.c: every rank's descriptor), between
 * nodes by a gather of the leaders' calls around the TCP ring (tcp.c). A
 * mismatch (another op, size, dtype or root, a call skipped on some rank) fails
 * every rank with the disagreeing ranks named, instead of mixing unrelated
 * buffers. This file holds the one definition of the descriptor and its text. */
#ifndef DDP_COLL_CALL_H
#define DDP_COLL_CALL_H

#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

enum ddpi_coll_kind { DDPI_ALL_REDUCE = 1, DDPI_BROADCAST, DDPI_ALL_GATHER, DDPI_BARRIER };

/* Fixed size and layout, no padding holes: compared with memcmp and sent as is
 * (every rank of a job runs on one architecture). */
struct ddpi_call {
	uint32_t kind; /* enum ddpi_coll_kind; 0: none */
	uint32_t dt, op;
	int32_t root;	/* global rank of a broadcast's root, else -1 */
	uint64_t count; /* elements (all_reduce) or bytes (broadcast, all_gather per rank) */
	uint64_t seq;	/* which collective call of this rank, from 0 */
};

/* "all_reduce(1000 x float32, sum) #7": the number counts from 1 (seq + 1), as
 * ddprun's hang verdict numbers the same call (progress.c's entered). */
void ddpi_call_describe(const struct ddpi_call *c, char *buf, size_t len);
/* The call's name as the program called it ("all_reduce"); NULL if unknown. */
const char *ddpi_call_name(const struct ddpi_call *c);

#pragma GCC visibility pop

#endif
