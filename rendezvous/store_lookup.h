/* store_lookup: a host name looked up for the event loop on a thread of its own,
 * which the loop never waits for.
 *
 * getaddrinfo cannot be interrupted, and a resolver that does not answer
 * takes its timeout for each try (resolv.conf: seconds, times attempts,
 * times servers). On libuv's thread pool (uv_queue_work, uv_getaddrinfo)
 * the loop cannot end before the call returns: a signal that stops the job
 * was heard at once, but ddprun's exit waited for the resolver. Here the
 * thread is detached; store_lookup_cancel leaves it to finish alone and free what
 * it holds, and the process may exit under it. */
#ifndef DDP_STORE_LOOKUP_H
#define DDP_STORE_LOOKUP_H

#include <stdbool.h>
#include <sys/socket.h>
#include <uv.h>

/* More addresses than a store host has (one per family, mostly); the rest
 * are left out. */
#define STORE_LOOKUP_MAX 16

struct store_lookup_result {
	int gai; /* getaddrinfo's: 0, or why the name did not resolve */
	int n;	 /* addresses (port 0), each once, in the resolver's order */
	struct sockaddr_storage addr[STORE_LOOKUP_MAX];
};

struct store_lookup;

/* Look host up for TCP, any family; done(arg, result) runs from loop
 * later, unless store_lookup_cancel came first (result lives for the call; the
 * handle is gone once done runs: forget *out there). 0 with *out set, or a
 * negative errno. */
int store_lookup_start(uv_loop_t *loop, const char *host,
		       void (*done)(void *arg, const struct store_lookup_result *r), void *arg,
		       struct store_lookup **out);
/* From the loop, before done ran: done never will. *l (NULL: nothing under
 * way) is set to NULL. */
void store_lookup_cancel(struct store_lookup **l);

#endif
