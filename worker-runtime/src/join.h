/* join: every rank meets the others at the launcher's store during ddp_init,
 * so that a wrong launch fails at once with the culprit named instead of
 * hanging or computing garbage.
 *
 * Keys live under "ddp/<run id>/r<restart count>/" (one key space per job
 * attempt; the node leaders' "leader/<node>" entries of tcp.c live there too):
 *   join/members  every rank APPENDs one line: what it believes (record below)
 *   join/count    every rank ADDs 1 + (digest << DDPI_JOIN_COUNT_BITS), where the
 *                 digest hashes the beliefs all ranks must share, so the sum
 *                 tells any rank whether every rank so far agrees with it
 *   join/done     "ok" or "error <message>", set once (compare-and-set) by the
 *                 rank that completes the count or the first that sees a problem
 * A rank's round trips: APPEND, ADD, then WAIT + GET of join/done (the last
 * rank reads join/members instead and sets join/done). join/members is read
 * only by the last rank and on a failure, to name the ranks involved.
 *
 * join_check.c holds the pure part (records, checks, rank lists), join.c the
 * store conversation. */
#ifndef DDP_JOIN_H
#define DDP_JOIN_H

#include <stddef.h>
#include <stdint.h>

#include "ddp_internal.h"

struct store_client;

/* Internal: not exported from libddp.so. */
#pragma GCC visibility push(hidden)

#define DDPI_JOIN_COUNT_BITS 21 /* low bits of join/count: ranks joined */
#define DDPI_JOIN_MAX_WORLD  ((1 << DDPI_JOIN_COUNT_BITS) - 1)

/* One rank's view of the job, as published in join/members. */
struct ddpi_join_rec {
	int rank, world, local_rank, local_world, node, nnodes;
	char backend[8];
	char version[24];
	int pid;
	char host[64];
};

void ddpi_join_rec_init(struct ddpi_join_rec *r, const struct ddp_env *env, enum ddp_backend be);
/* One line "rank world local_rank local_world node nnodes backend version pid
 * host\n" into buf; its length, or -ENOSPC. */
int ddpi_join_rec_format(const struct ddpi_join_rec *r, char *buf, size_t len);
/* Parses join/members (lines as above) into a malloc'd array. -EPROTO on a
 * malformed line (with ddp_errmsg set), -ENOMEM. */
int ddpi_join_parse(const char *text, size_t len, struct ddpi_join_rec **out, size_t *n);
/* Hash of the beliefs every rank must share (WORLD_SIZE, GROUP_WORLD_SIZE,
 * backend, libddp version), below 2^DDPI_JOIN_COUNT_BITS. */
int64_t ddpi_join_digest(const struct ddpi_join_rec *r);

/* Checks records against each other: ranks claimed twice, shared beliefs
 * (the minority named against the majority), and, when complete (every rank
 * of world has joined), each node's ranks against its LOCAL_WORLD_SIZE and
 * GROUP_WORLD_SIZE against the nodes present. 0, or DDP_EENV with the reason
 * in msg ("rank 3 says WORLD_SIZE=8, ranks 0-2 say 4"). */
int ddpi_join_check(const struct ddpi_join_rec *recs, size_t n, int complete, char *msg,
		    size_t len);
/* Only the first check: a rank claimed twice ("rank 1 was started twice (pid
 * 12 on a, pid 34 on b)"). 0, DDP_EENV or -ENOMEM. */
int ddpi_join_duplicates(const struct ddpi_join_rec *recs, size_t n, char *msg, size_t len);
/* The ranks in [0, world) that no record claims, as "rank 2" / "ranks 2, 5" /
 * "ranks 2-9, 12" (long lists end with "... (N in all)"). Returns how many. */
int ddpi_join_missing(const struct ddpi_join_rec *recs, size_t n, int world, char *buf, size_t len);
/* "rank 3" / "ranks 0-2, 7" for a sorted list of ranks. */
void ddpi_join_format_ranks(const int *ranks, size_t n, char *buf, size_t len);

/* The join: connect to MASTER_ADDR:MASTER_PORT (retrying until deadline),
 * publish, agree or fail. timeout_ms is the init timeout (for messages);
 * waiting for the others ends a little before deadline so that the missing
 * ranks can still be named before it. On success *out is the connected
 * client, prefix set (the caller closes it), or NULL when the store turned
 * out to speak an older protocol on a single-node job (rank 0 says so once
 * and the ranks meet through shared memory alone). Errors: DDP_EENV
 * (inconsistent ranks), -ETIMEDOUT (missing ranks named), -ECONNREFUSED /
 * -ETIMEDOUT / -EHOSTUNREACH (store unreachable, address named), other
 * negative errnos when the store fails mid-way. */
int ddpi_join(const struct ddp_env *env, enum ddp_backend be, int64_t timeout_ms, int64_t deadline,
	      struct store_client **out);

#pragma GCC visibility pop

#endif
