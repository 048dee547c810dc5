/* progress: where each rank is in its sequence of collectives, marked in the
 * launcher's progress file for its hang detection. The file's format is the
 * worker contract's (rendezvous/progress_slot.h); this is libddp's writer. */
#ifndef DDP_PROGRESS_H
#define DDP_PROGRESS_H

#include "progress_slot.h"

#pragma GCC visibility push(hidden)
/* Mark the entry into / completion of a collective. Cheap; thread-safe as
 * long as collectives are serialised (the context lock). */
void ddpi_progress_enter(enum ddpi_progress_op op);
void ddpi_progress_leave(void);
/* Mark the time inside ddp_init (DDPI_PHASE_INIT), and its end
 * (DDPI_PHASE_NONE); the first call maps the slot. */
void ddpi_progress_phase(enum ddpi_progress_phase ph);
/* What the collective now entered waits for (backends that can tell). */
void ddpi_progress_wait(enum ddpi_progress_wait w);
#pragma GCC visibility pop

#endif
