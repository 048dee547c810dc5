/* agent_store: the TCP store a single-node agent hosts for its workers.
 *
 * The store listens at --master-addr:--master-port. With one node and no
 * explicit --master-port / PET_MASTER_PORT it takes a free port (port 0) and
 * exports that, rather than torchrun's fixed 29500, so two jobs on one machine
 * never race for a port (pytorch#126510); an explicit port that is taken is a
 * clear error. Workers get MASTER_ADDR/MASTER_PORT of the store. */
#ifndef DDP_AGENT_STORE_H
#define DDP_AGENT_STORE_H

#include <stddef.h>

#include "agent_int.h"
#include "store_lookup.h"

/* Look --master-addr's name up off the loop (a->lookup, store_lookup.h):
 * done(a, result) runs from the loop later. 1: an address (or no valid
 * host): no lookup, done does not run; 0; or a negative errno. */
int agent_store_lookup(struct agent *a, void (*done)(void *a, const struct store_lookup_result *r));
/* The message for a lookup that failed with gai. */
void agent_store_gai_error(struct agent *a, int gai, char *err, size_t errlen);
/* Pick the address and port and listen, on r's addresses
 * (agent_store_lookup's) when not NULL, else on --master-addr itself. 0 or a negative errno
 * with a message in err. */
int agent_store_open(struct agent *a, const struct store_lookup_result *r, char *err,
		     size_t errlen);
/* Fill the store part of w: master_addr, master_port, use_agent_store. */
void agent_store_world(struct agent *a, struct workenv_world *w);
/* Close the store; done(arg) runs from the loop. */
void agent_store_close(struct store_server *s, void (*done)(void *arg), void *arg);

#endif
