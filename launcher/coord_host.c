/* coord_host: which agent hosts the rendezvous store, the workers' store of
 * a dynamic round, and closing the rendezvous store only once its peers
 * have left (they read the round's end from it).
 *
 * Static: node 0 listens on every interface at --master-port. Dynamic: the
 * agent whose address is the endpoint's (or is_host=1) listens on every
 * interface at the endpoint's port; if that port is taken, another agent on
 * this machine hosts it and this one is a client (is_host=0: always), one
 * that tries to host again while nothing answers there. */
#include "coord_int.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "store_lookup.h"
#include "store_addr.h"
#include "store_proto.h"
#include "store_server.h"

/* Once every participant said it left (or the linger passed): how long the
 * host still waits for connections to close (late nodes, stragglers). */
#define HOST_CLOSE_MS 2000

static bool same_addr(const struct sockaddr *a, const struct sockaddr *b)
{
	if (a->sa_family != b->sa_family)
		return false;
	if (a->sa_family == AF_INET)
		return memcmp(&((const struct sockaddr_in *)a)->sin_addr,
			      &((const struct sockaddr_in *)b)->sin_addr,
			      sizeof(struct in_addr)) == 0;
	if (a->sa_family == AF_INET6)
		return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
			      &((const struct sockaddr_in6 *)b)->sin6_addr,
			      sizeof(struct in6_addr)) == 0;
	return false;
}

bool coord_host_is_local(const struct store_lookup_result *r)
{
	uv_interface_address_t *ifs = NULL;
	bool local = false;
	int n = 0, i, j;

	if (uv_interface_addresses(&ifs, &n) != 0)
		return false;
	for (j = 0; j < r->n && !local; j++)
		for (i = 0; i < n && !local; i++)
			local = same_addr((const struct sockaddr *)&r->addr[j],
					  (const struct sockaddr *)&ifs[i].address);
	uv_free_interface_addresses(ifs, n);
	return local;
}

int coord_host_start(struct coord *c, char *err, size_t errlen)
{
	struct store_server_opts so;
	bool forced = c->conf->is_host == 1;
	int rc;

	if (!c->job->dynamic && c->job->node_rank != 0)
		return 0;
	if (c->job->dynamic && c->conf->is_host == 0)
		return 0;
	/* Is the endpoint's host this one (its lookup's addresses)? */
	if (c->job->dynamic && !forced && !c->host_deferred && !c->store_local)
		return 0;
	store_server_opts_init(&so);
	so.io = c->job->store_io;
	so.conn_closed = coord_host_conn_closed;
	so.conn_closed_arg = c;
	rc = store_server_start(c->loop, &so, NULL, c->store_port, &c->server);
	c->host_deferred = false;
	if (rc == 0)
		return 0;
	c->server = NULL;
	if (c->job->dynamic && !forced && (rc == -EADDRINUSE || rc == UV_EADDRINUSE)) {
		/* Another agent here hosts it, or something else holds the
		 * port: coord_start.c tries again while nothing answers. */
		c->host_deferred = true;
		return 0;
	}
	if (rc == -EADDRINUSE || rc == UV_EADDRINUSE)
		snprintf(err, errlen,
			 "cannot listen on port %d for the rendezvous store: the port is in use "
			 "(pick another port in %s)",
			 c->store_port,
			 c->job->dynamic ? "--rdzv-endpoint" : c->job->master_port_src);
	else
		snprintf(err, errlen, "cannot listen on port %d for the rendezvous store: %s",
			 c->store_port, store_strerror(rc));
	return rc;
}

int coord_wstore_start(struct coord *c, bool first, int *port, char *err, size_t errlen)
{
	struct store_server_opts so;
	int want = first && c->job->master_port_given ? c->job->master_port : 0;
	int rc;

	if (c->wstore != NULL) { /* kept from an earlier round */
		/* A new round's workers find it empty (PyTorch 2.x's env:// has
		 * no per-attempt prefix: see agent.c rendezvous). The round closes
		 * only after this node joined, so no new worker wrote here yet. */
		if (store_server_clear(c->wstore, NULL) != 0) {
			snprintf(err, errlen, "out of memory");
			return -ENOMEM;
		}
		*port = store_server_port(c->wstore);
		return 0;
	}

	store_server_opts_init(&so);
	so.io = c->job->store_io;
	rc = store_server_start(c->loop, &so, c->job->local_addr, want, &c->wstore);
	if (rc == -EHOSTUNREACH) { /* only a name can fail so: --local-addr's */
		int gai = store_addr_gai(c->job->local_addr, want, true);

		c->wstore = NULL;
		snprintf(err, errlen, "node on host %.200s cannot resolve --local-addr %.200s: %s",
			 c->host, c->job->local_addr,
			 gai != 0 ? gai_strerror(gai) : "it resolves now (it failed for a while)");
		return rc;
	}
	if (rc != 0) {
		const char *h = c->job->local_addr ? c->job->local_addr : "*";

		c->wstore = NULL;
		snprintf(err, errlen,
			 strchr(h, ':')
				 ? "node on host %.200s cannot listen for its workers' store "
				   "([%s]:%d): %s"
				 : "node on host %.200s cannot listen for its workers' store "
				   "(%s:%d): %s",
			 c->host, h, want, store_strerror(rc));
		return rc;
	}
	*port = store_server_port(c->wstore);
	return 0;
}

void coord_wstore_close(struct coord *c, void (*done)(void *arg))
{
	struct store_server *s = c->wstore;

	c->wstore = NULL;
	if (s != NULL)
		store_server_close(s, done, c);
}

static void close_now(struct coord *c)
{
	struct store_server *s = c->server;

	if (s == NULL)
		return;
	c->server = NULL;
	c->closing_store = false;
	uv_timer_stop(&c->timer);
	c->open++;
	store_server_close(s, coord_closed_one, c);
}

static void on_linger_over(uv_timer_t *t)
{
	close_now(t->data);
}

void coord_host_conn_closed(void *arg)
{
	struct coord *c = arg;

	if (c->closing_store && c->server != NULL && store_server_num_conns(c->server) == 0)
		close_now(c);
	else
		coord_leave_recount(c);
}

void coord_host_close(struct coord *c)
{
	if (c->server == NULL)
		return;
	if (c->hurry || store_server_num_conns(c->server) == 0) {
		close_now(c);
		return;
	}
	c->closing_store = true;
	uv_timer_start(&c->timer, on_linger_over, HOST_CLOSE_MS, 0);
}
