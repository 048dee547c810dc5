/* progress_slot: the collective-progress file both sides of the worker
 * contract map: libddp writes its rank's slot (worker-runtime/src/progress.c),
 * the launcher reads every slot for its hang detection (ddprun --hang-timeout,
 * launcher/hang.c). Here, the layer both use, so that neither includes the
 * other's headers.
 *
 * The launcher gives every worker DDP_PROGRESS_FILE, a small file that holds
 * one slot of DDPI_PROGRESS_SLOT bytes per local rank (slot LOCAL_RANK is
 * this rank's). libddp maps it once, when ddp_init begins, and from then
 * on marks each collective's entry and completion with plain atomic stores
 * into the mapping: no system call per collective. The launcher reads the
 * slots whenever it wants (it maps the same file). Collectives are numbered
 * 1, 2, ... in the order this process issues them (public collectives and
 * gradient-bucket all-reduces alike; libddp issues them in the same order on
 * every rank, so equal numbers are the same collective on every rank).
 * It also marks the time inside ddp_init where a rank waits for its peers
 * to join (phase): a rank waiting there is told from one that never called
 * ddp_init. Without the variable, or when the file cannot be mapped, nothing
 * is recorded and nothing fails. */
#ifndef DDP_PROGRESS_SLOT_H
#define DDP_PROGRESS_SLOT_H

#include <stdint.h>

#include "workenv.h" /* the file's variable: WORKENV_DDP_PROGRESS_FILE */

#define DDPI_PROGRESS_MAGIC 0x44445050u /* "DDPP": the slot is in use */
/* "DDPE": in use by a libddp that has entered no collective yet (ddp_init
 * marks its phase): an older ddprun, which knows only DDPP, reads the rank
 * as it always did until its first collective, not as a libddp rank in no
 * collective. */
#define DDPI_PROGRESS_MAGIC_EARLY 0x44445045u
#define DDPI_PROGRESS_SLOT	  64 /* bytes per slot: one cache line */

/* What the latest entered collective is. */
enum ddpi_progress_op {
	DDPI_PROG_NONE = 0,
	DDPI_PROG_ALL_REDUCE,
	DDPI_PROG_BROADCAST,
	DDPI_PROG_ALL_GATHER,
	DDPI_PROG_BARRIER,
	DDPI_PROG_BUCKET, /* a gradient bucket's all_reduce (reducer) */
	DDPI_PROG_NOPS
};

/* What a rank inside a collective waits for, where its backend can tell: on
 * the GPU, a collective waits behind the work the program queued before it,
 * and only then for its peers (NCCL). 0 until the backend has looked (it
 * looks only once a wait has lasted a second), and for the cpu backend. */
enum ddpi_progress_wait {
	DDPI_WAIT_UNKNOWN = 0,
	DDPI_WAIT_OWN_GPU_WORK, /* its own GPU work, queued before the collective, runs on */
	DDPI_WAIT_GPU_PEERS,	/* the collective runs on the GPU: it waits for its peers */
	DDPI_WAIT_NKINDS
};

/* What a rank does outside its collectives, where it may wait for its peers
 * (older libddp: always 0, and its slot is mapped only at the first
 * collective). */
enum ddpi_progress_phase {
	DDPI_PHASE_NONE = 0,
	DDPI_PHASE_INIT, /* inside ddp_init, joining its peers (the store's join, the
			    node's segment and the ring between nodes; not NCCL's
			    init, whose CPU time is work) */
	DDPI_PHASE_NKINDS
};

/* One slot. The writer stores op (and wait 0) before entered, and completed
 * last; the reader reads completed, then entered, then op and wait. entered >
 * completed: the rank is inside collective number entered. */
struct ddpi_progress_slot {
	uint32_t magic;
	int32_t pid;
	uint32_t op;	    /* enum ddpi_progress_op of collective number entered */
	uint32_t wait;	    /* enum ddpi_progress_wait, inside collective number entered */
	uint64_t entered;   /* number of the latest collective entered (0: none) */
	uint64_t completed; /* number of the latest collective completed */
	uint32_t phase;	    /* enum ddpi_progress_phase (was spare: older libddp leaves 0) */
	uint32_t spare32;
	uint64_t spare[3];
};

_Static_assert(sizeof(struct ddpi_progress_slot) == DDPI_PROGRESS_SLOT, "one cache line");

/* Names of the ops ("all_reduce", ...; "?" out of range). */
static inline const char *ddpi_progress_op_name(uint32_t op)
{
	static const char *const names[DDPI_PROG_NOPS] = {
		"none", "all_reduce", "broadcast", "all_gather", "barrier", "all_reduce (bucket)",
	};

	return op < DDPI_PROG_NOPS ? names[op] : "?";
}

/* What a wait means, for a hang report ("" when unknown). */
static inline const char *ddpi_progress_wait_text(uint32_t wait)
{
	static const char *const texts[DDPI_WAIT_NKINDS] = {
		"",
		"its own GPU work queued before the collective has not finished",
		"the collective runs on the GPU, waiting for its peers",
	};

	return wait < DDPI_WAIT_NKINDS ? texts[wait] : "";
}

#endif
