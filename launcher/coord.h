/* coord: the node rendezvous of a multi-node job, plugged into the agent
 * through struct agent_coord (agent.h) and run on the agent's loop.
 *
 * Static (default): node 0's agent hosts the store at --master-port; every
 * node joins with its --node-rank, and the job's ranks follow node-rank
 * order, each node taking its own --nproc-per-node. Dynamic (--rdzv-backend
 * c10d): the agent at the --rdzv-endpoint's address hosts the store; nodes
 * get their rank by arrival; a round closes at MAX nodes, or MIN plus
 * last_call_timeout; late nodes get the next round.
 *
 * Failure everywhere, fast: every agent parks a WAIT on its round's "end"
 * key; a worker failure, a signal, an agent that dies (its connection's
 * ON_CLOSE_SET) or stops heartbeating (the store host watches) sets it once,
 * and every agent stops (or, with restarts left, restarts) its workers at
 * once. An agent that loses the store stops its workers. Exit statuses: the
 * root cause's on every node (not the end's first writer: every node reads
 * every node's failures and applies report.h's rule, see coord_report.c);
 * 75 for a lost node or store, unless a worker failed on its own; 2 for
 * settings that differ between nodes (node rank 0 twice included); 1 when
 * the rendezvous cannot complete (a store host that does not resolve, a
 * port in use, a run id taken by a job that ended). The store's key layout is rdzv_keys.h's. */
#ifndef DDP_COORD_H
#define DDP_COORD_H

#include <stddef.h>
#include <uv.h>

#include "agent.h"
#include "job.h"

#define COORD_EXIT_LOST 75 /* EX_TEMPFAIL: a node or the store was lost */

struct coord;

/* The coordinator of job (job.h), which must outlive it. 0 or a negative
 * errno with one line in err. */
int coord_create(uv_loop_t *loop, const struct job *job, struct coord **out, char *err,
		 size_t errlen);
/* The hooks to give agent_create. */
void coord_hooks(struct coord *c, struct agent_coord *hooks);
/* After the loop has returned. */
void coord_destroy(struct coord *c);

#endif
