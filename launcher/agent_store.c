/* agent_store: host the workers' store in the agent's loop (see
 * agent_store.h). PyTorch workers reach it through env:// with
 * TORCHELASTIC_USE_AGENT_STORE=True, exactly as under torchrun. */
#include "agent_store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_addr.h"
#include "store_proto.h"
#include "store_server.h"
#include "util.h"

int agent_store_lookup(struct agent *a, void (*done)(void *a, const struct store_lookup_result *r))
{
	char host[256];
	unsigned char bin[16];
	int port;

	if (util_parse_hostport(a->job->master_addr, host, sizeof(host), 0, &port) != 0 ||
	    inet_pton(AF_INET, host, bin) == 1 || inet_pton(AF_INET6, host, bin) == 1)
		return 1; /* an address, or what agent_store_open names as wrong */
	return store_lookup_start(a->loop, host, done, a, &a->lookup);
}

void agent_store_gai_error(struct agent *a, int gai, char *err, size_t errlen)
{
	char host[256];
	int port;

	if (util_parse_hostport(a->job->master_addr, host, sizeof(host), 0, &port) != 0)
		snprintf(host, sizeof(host), "%s", a->job->master_addr);
	snprintf(err, errlen, "cannot resolve the rendezvous store's host %.200s (%s): %s", host,
		 job_store_host_source(a->job), gai_strerror(gai));
}

/* The addresses of r as store_server_start's list, "a,b". */
static int addr_list(const struct store_lookup_result *r, char *list, size_t size)
{
	size_t n = 0;

	list[0] = '\0';
	for (int i = 0; i < r->n; i++) {
		char one[64];

		if (store_addr_format((const struct sockaddr *)&r->addr[i], false, one,
				      sizeof(one)) != 0 ||
		    n + strlen(one) + 2 > size)
			continue;
		n += (size_t)snprintf(list + n, size - n, "%s%s", n > 0 ? "," : "", one);
	}
	return n > 0 ? 0 : -EADDRNOTAVAIL;
}

int agent_store_open(struct agent *a, const struct store_lookup_result *r, char *err, size_t errlen)
{
	struct store_server_opts so;
	char host[256], numeric[64], addrs[STORE_LOOKUP_MAX * 48];
	int port, rc;

	rc = util_parse_hostport(a->job->master_addr, host, sizeof(host), a->job->master_port,
				 &port);
	if (rc != 0) {
		snprintf(err, errlen, "invalid --master-addr '%.200s'", a->job->master_addr);
		return rc;
	}
	/* One node and no port asked for: any free port, never a collision on
	 * torchrun's 29500. Several nodes must agree on it: keep it. */
	port = a->job->master_port;
	if (!a->job->master_port_given && a->job->max_nodes == 1)
		port = 0;
	store_server_opts_init(&so);
	so.io = a->job->store_io;
	rc = r != NULL ? addr_list(r, addrs, sizeof(addrs)) : 0;
	if (rc == 0)
		rc = store_server_start(a->loop, &so, r != NULL ? addrs : host, port, &a->store);
	if (rc != 0) {
		a->store = NULL;
		if (rc == -EADDRINUSE || rc == UV_EADDRINUSE)
			snprintf(err, errlen,
				 "cannot listen on %.200s:%d: the port is in use (pick another "
				 "port in %s, or leave it out to use a free one)",
				 host, port, a->job->master_port_src);
		else if (rc == -EADDRNOTAVAIL || rc == UV_EADDRNOTAVAIL)
			snprintf(err, errlen,
				 "cannot listen on %.200s: not an address of this machine (this "
				 "node hosts the store: give an address of its own as "
				 "--master-addr, or leave it out)",
				 host);
		else
			snprintf(err, errlen, "cannot listen on %.200s:%d: %s", host, port,
				 store_strerror(rc));
		return rc;
	}
	a->store_port = store_server_port(a->store);
	/* The workers get the numeric address the name came to (ddprun(1),
	 * --master-addr), never a name of --master-addr or Slurm's node list
	 * that they would resolve again. */
	if (store_server_addr(a->store, numeric, sizeof(numeric)) == 0)
		a->store_host = strdup(numeric);
	else
		a->store_host = strdup(host);
	return a->store_host != NULL ? 0 : -ENOMEM;
}

void agent_store_world(struct agent *a, struct workenv_world *w)
{
	w->master_addr = a->store_host;
	w->master_port = a->store_port;
	w->use_agent_store = a->store != NULL;
}

void agent_store_close(struct store_server *s, void (*done)(void *arg), void *arg)
{
	store_server_close(s, done, arg);
}
