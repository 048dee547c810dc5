/* agent_store: host the workers' store in the agent's loop (see
 * agent_store.h). PyTorch workers reach it through env:// with
 * TORCHELASTIC_USE_AGENT_STORE=True, exactly as under torchrun. */
#include "agent_store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_addr.h"
#include "store_proto.h"
#include "store_server.h"
#include "util.h"

/* The lookup of the store's host, off the loop: a resolver that does not
 * answer takes seconds a try, which the loop (signals) must not wait. */
struct lookup {
	uv_work_t req;
	struct agent *a;
	void (*done)(struct agent *a, int gai, const char *numeric);
	char host[256];
	int gai;	   /* getaddrinfo's */
	char numeric[512]; /* its addresses, "a,b": store_server's list */
};

/* Whether item is one of list's ("a,b"), whole (10.0.0.1 is not 10.0.0.11). */
static bool listed(const char *list, const char *item)
{
	size_t n = strlen(item);

	for (const char *p = list; (p = strstr(p, item)) != NULL; p++)
		if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == '\0'))
			return true;
	return false;
}

static void lookup_work(uv_work_t *req)
{
	struct lookup *l = req->data;
	struct addrinfo hints, *ai = NULL, *p;
	size_t n = 0;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE;
	l->gai = getaddrinfo(l->host, NULL, &hints, &ai);
	for (p = l->gai == 0 ? ai : NULL; p != NULL; p = p->ai_next) {
		char one[64];

		if (store_addr_format(p->ai_addr, false, one, sizeof(one)) != 0 ||
		    listed(l->numeric, one) || n + strlen(one) + 2 > sizeof(l->numeric))
			continue; /* (a repeat, as for each socket type: once) */
		n += (size_t)snprintf(l->numeric + n, sizeof(l->numeric) - n, "%s%s",
				      n > 0 ? "," : "", one);
	}
	if (ai != NULL)
		freeaddrinfo(ai);
	if (l->gai == 0 && n == 0)
		l->gai = EAI_NONAME;
}

static void lookup_done(uv_work_t *req, int status)
{
	struct lookup *l = req->data;

	l->done(l->a, status == 0 ? l->gai : EAI_SYSTEM, l->numeric);
	free(l);
}

int agent_store_lookup(struct agent *a, void (*done)(struct agent *a, int gai, const char *numeric))
{
	struct lookup *l;
	unsigned char bin[16];
	int port;

	l = calloc(1, sizeof(*l));
	if (l == NULL)
		return -ENOMEM;
	if (util_parse_hostport(a->job->master_addr, l->host, sizeof(l->host), 0, &port) != 0 ||
	    inet_pton(AF_INET, l->host, bin) == 1 || inet_pton(AF_INET6, l->host, bin) == 1) {
		free(l); /* an address, or what agent_store_open names as wrong */
		return 1;
	}
	l->a = a;
	l->done = done;
	l->req.data = l;
	if (uv_queue_work(a->loop, &l->req, lookup_work, lookup_done) != 0) {
		free(l);
		return -EAGAIN;
	}
	return 0;
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

int agent_store_open(struct agent *a, const char *addrs, char *err, size_t errlen)
{
	struct store_server_opts so;
	char host[256], numeric[64];
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
	rc = store_server_start(a->loop, &so, addrs != NULL ? addrs : host, port, &a->store);
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
