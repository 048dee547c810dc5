/* shmsweep: remove the shared-memory segments a node's workers left behind.
 *
 * libddp unlinks its node segment once every local rank has mapped it, but
 * if every local rank dies during init (before all attached), the name stays
 * in /dev/shm. ddprun gives its workers DDP_SHM_NONCE, a random token of its
 * own (one per ddprun process, so per node and job), and libddp ends the
 * segment's name with "-a<nonce>": a name "ddp-...-a<nonce>" is certainly
 * this agent's, whatever the run id (two jobs may share one, e.g. "none"),
 * and no other job's segment ever matches. The agent sweeps after each
 * attempt, once all its workers have exited; the watchdog sweeps when ddprun
 * died (kill -9), so shmsweep_remove makes system calls only (procsweep.h). */
#ifndef DDP_SHMSWEEP_H
#define DDP_SHMSWEEP_H

#include <stddef.h>

/* Hex digits in a nonce (libddp accepts 1 to 32 letters or digits). */
#define SHMSWEEP_NONCE_LEN 16

/* Remove every entry of dir (normally "/dev/shm") named "ddp-*-a<nonce>";
 * removed(name, arg) is told each one (may be NULL; the watchdog passes
 * NULL). Returns how many were removed, or a negative errno when dir cannot
 * be read (a missing dir: 0). */
int shmsweep_remove(const char *dir, const char *nonce, void (*removed)(const char *, void *),
		    void *arg);

#endif
