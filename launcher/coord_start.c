/* coord_start: before the first rendezvous. Resolve the store's host name
 * (a name that does not resolve is said at once, naming it and why; only a
 * temporary failure, EAI_AGAIN, is retried, within join_timeout), host the
 * store if this node is its host, and find out who holds its port when
 * that is taken: another ddprun that is node rank 0 of this very job (then
 * both end with 2, the rank claimed twice) or anything else (1, port in
 * use). Then connect. */
#include "coord_int.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "store_lookup.h"
#include "store_async.h"
#include "store_proto.h"
#include "store_server.h"
#include "util.h"

/* How long a node 0 whose port is taken looks for this job's store there. */
#define PROBE_MS 3000
/* The first "nothing answers" line; then every COORD_WATCH_MS. */
#define CONNECT_SAY_MS 3000
/* A dynamic agent whose endpoint port was taken here: how often it tries to
 * host while nothing answers there (the holder is no store). */
#define HOST_RETRY_MS 1000

static void resolve(struct coord *c);
static void after_resolve(void *arg, const struct store_lookup_result *r);

static void on_resolve_retry(uv_timer_t *t)
{
	struct coord *c = t->data;

	if (c->phase == CP_START)
		resolve(c);
}

static void resolve(struct coord *c)
{
	int rc = store_lookup_start(c->loop, c->store_host, after_resolve, c, &c->lookup);

	if (rc != 0)
		coord_fail(c, 1, "error: cannot look %s up: %s", c->store_host, strerror(-rc));
}

/* ---- a taken port --------------------------------------------------------------- */

/* Can this host bind the wildcard address of family at port (is it free)?
 * 0, -EADDRINUSE, or another negative errno (the family is missing here). */
static int family_free(int family, int port)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0), on = 1, rc = 0;

	if (fd < 0)
		return -errno;
	memset(&ss, 0, sizeof(ss));
	if (family == AF_INET) {
		struct sockaddr_in *in = (struct sockaddr_in *)&ss;

		in->sin_family = AF_INET;
		in->sin_port = htons((uint16_t)port);
		len = sizeof(*in);
	} else {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;

		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)port);
		len = sizeof(*in6);
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof(on));
	}
	/* As the server binds: a connection in TIME_WAIT does not count. */
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
	if (bind(fd, (struct sockaddr *)&ss, len) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

/* Ends the round this node's peers wait in on the store it reached (a round
 * that runs goes on): they stop with msg at once, not after join_timeout. */
static void tell_round(struct coord *c, int status, const char *msg)
{
	char key[64], *v = rdzv_closed_error(status, msg);

	if (v != NULL) {
		snprintf(key, sizeof(key), RDZV_KEY_ROUND_FMT RDZV_R_CLOSED, 0);
		store_async_compare_set(c->A, key, "", 0, v, strlen(v), NULL, NULL);
	}
	free(v);
}

/* tell: the port's holder is a store where ddprun jobs meet (another run
 * id's), where this job's other nodes may already wait, and no dynamic job
 * of this run id meets. Never into a store that holds no ddprun job (a bare
 * ddpstore serve, another program's): it would keep this run id's round
 * closed for the jobs it serves later. */
static void port_in_use(struct coord *c, const char *why, bool tell)
{
	char msg[700];

	c->probing = false;
	snprintf(msg, sizeof(msg),
		 "cannot listen on port %d for the rendezvous store: the port is in use%s%s "
		 "(pick another port in %s)",
		 c->store_port, c->probe_why, why,
		 c->job->dynamic ? "--rdzv-endpoint" : c->job->master_port_src);
	if (tell)
		tell_round(c, 1, msg);
	coord_fail(c, 1, "error: %s", msg);
}

static void on_probe_timeout(uv_timer_t *t)
{
	struct coord *c = t->data;

	if (c->probing)
		port_in_use(c, " (by a process that does not answer as a rendezvous store)", false);
}

static void on_probe(int status, size_t n, const void *const *vals, const size_t *lens, void *arg)
{
	struct coord *c = arg;
	struct rdzv_node other;
	char msg[700];

	if (!c->probing)
		return;
	uv_timer_stop(&c->timer);
	if (status != 0 || n != 4) {
		port_in_use(c, "", false);
		return;
	}
	if (lens[0] > 0) {
		port_in_use(c, " (by the store of a job with this --rdzv-id that has just ended)",
			    false);
		return;
	}
	if (lens[1] == 0 || rdzv_node_decode(vals[1], lens[1], &other) != 0) {
		struct rdzv_config cfg;
		/* Not where a dynamic job of this run id meets (a ddpstore serve
		 * that jobs share): it would end with this error. Where none
		 * wrote its settings yet, this job's other nodes may be on their
		 * way (the round's closed value stops them as they come). */
		bool dynamic = lens[3] > 0 && rdzv_config_decode(vals[3], lens[3], &cfg) == 0 &&
			       cfg.node_rank < 0;

		snprintf(msg, sizeof(msg),
			 " (by a store that holds no node 0 of --rdzv-id %.200s%s)", c->job->run_id,
			 c->probe_rdzv ? ": another job's rendezvous store, another --rdzv-id, "
					 "or a ddpstore serve that jobs share"
				       : ", nor any ddprun job: a ddpstore serve, or another "
					 "program's store");
		port_in_use(c, msg, c->probe_rdzv && !dynamic);
		return;
	}
	snprintf(msg, sizeof(msg),
		 "node rank 0 is claimed twice: by host %.200s (pid %d), whose store holds port "
		 "%d, and by host %.200s (pid %d), which found that port in use",
		 other.host, other.pid, c->store_port, c->host, (int)getpid());
	c->probing = false;
	/* Tell the other node 0 while its round is open (only this node is
	 * wrong), as any node that cannot join does. */
	coord_publish_error(c, 2, true, msg);
}

/* First answer: have ddprun jobs met on that store? (on_probe follows: one
 * connection answers in order.) */
static void on_probe_runs(int status, size_t n, const void *const *vals, const size_t *lens,
			  void *arg)
{
	struct coord *c = arg;

	(void)vals;
	c->probe_rdzv = status == 0 && n == 1 && lens[0] > 0;
}

/* Connected to whatever holds the port: this job's store? Only reads. */
void coord_probe(struct coord *c)
{
	char k1[64], k2[64];
	const char *keys[4] = {RDZV_KEY_ENDED, k1, k2, RDZV_KEY_CONFIG}, *runs = RDZV_KEY_RUNS_N;
	int rc;

	snprintf(k1, sizeof(k1), RDZV_KEY_ROUND_FMT RDZV_R_NODE, 0, 0);
	snprintf(k2, sizeof(k2), RDZV_KEY_ROUND_FMT RDZV_R_CLOSED, 0);
	c->probe_rdzv = false;
	rc = store_async_set_prefix(c->A, RDZV_KEY_ROOT);
	if (rc == 0)
		rc = store_async_multi_get(c->A, &runs, 1, on_probe_runs, c);
	if (store_async_set_prefix(c->A, c->prefix) != 0 || rc != 0 ||
	    store_async_multi_get(c->A, keys, 4, on_probe, c) != 0)
		port_in_use(c, "", false);
}

void coord_probe_failed(struct coord *c)
{
	if (c->probing)
		port_in_use(c, "", false);
}

/* ---- hosting, then connecting ---------------------------------------------------------- */

/* While nothing answers at the store's address (its host not up yet, a
 * wrong port, a firewall), say so: the client retries until join_timeout,
 * and a silent wait of minutes looks like a hang. The join's own waiting
 * lines take this timer over once connected. */
static void on_connect_wait(uv_timer_t *t)
{
	struct coord *c = t->data;
	int64_t left = c->connect_deadline_ms - util_now_ms();
	char why[200] = "";

	if (c->phase != CP_START || c->a_up) {
		/* Connected: the join's lines, if any, restart this timer
		 * with their own callback, so a call here is this one's. */
		uv_timer_stop(t);
		return;
	}
	if (c->host_deferred)
		snprintf(why, sizeof(why),
			 ", and the port is taken on this host by something that does not "
			 "answer (this agent tries to host the store again)");
	else if (c->A != NULL && store_async_unanswered(c->A))
		snprintf(why, sizeof(why),
			 ": something there accepts connections but does not answer as a store "
			 "(another program on that port?)");
	else if (c->server != NULL) /* its own store silent for seconds: a wrong address,
				      * mostly (the I/O said for the rest) */
		snprintf(why, sizeof(why),
			 ", though this agent hosts the store on every address of this host (is "
			 "%.60s one, or routed to one? store I/O: %s)",
			 c->store_host, store_server_io(c->server));
	/* A node that failed before it started only waits a while to tell the
	 * others (COORD_BAD_RANK_CONNECT_MS), not join_timeout. */
	agent_say("waiting for the rendezvous store at %s:%d (%s): nothing answers there yet%s; "
		  "retrying for up to %.0f s more (%s)",
		  c->store_host, c->store_port, job_store_host_source(c->job), why,
		  left > 0 ? (double)left / 1000.0 : 0.0,
		  c->connect_timeout_ms < c->conf->join_timeout_ms
			  ? "only to tell the other nodes of this node's error"
			  : "join_timeout");
}

/* A dynamic agent that found the endpoint's port taken here became a client
 * of whoever holds it. While nothing answers there, the holder is no store
 * (an unrelated socket, or a connection that took the port as its own and
 * lingers in TIME_WAIT): were nobody to try again, no agent would host and
 * every one would wait out join_timeout. */
static void on_host_retry(uv_timer_t *t)
{
	struct coord *c = t->data;
	char err[512];
	int rc;

	if (c->phase != CP_START || c->a_up || !c->host_deferred) {
		/* Connected: the join may start this timer with its own
		 * callback, so a call here is this one's. */
		uv_timer_stop(t);
		return;
	}
	rc = coord_host_start(c, err, sizeof(err));
	if (rc != 0) {
		coord_fail(c, 1, "%s", err);
		return;
	}
	if (c->server != NULL) {
		uv_timer_stop(t);
		agent_say("the rendezvous store's port %d is free here now: this agent hosts the "
			  "store",
			  c->store_port);
	}
}

static void host_and_connect(struct coord *c, unsigned fams)
{
	char err[512], fam[200] = "";
	bool check = !c->job->dynamic && c->job->node_rank == 0;
	int rc = 0, f;

	/* The store listens on every interface, each family on its own: a
	 * family that --master-addr names but that another process holds
	 * would leave our own client talking to that process. */
	for (f = 0; check && f < 2 && rc == 0; f++) {
		int family = f == 0 ? AF_INET : AF_INET6;

		if (!(fams & (1u << f)))
			continue;
		rc = family_free(family, c->store_port);
		if (rc == -EADDRINUSE)
			snprintf(fam, sizeof(fam), " for %s, the family of %.100s %.60s",
				 family == AF_INET ? "IPv4" : "IPv6", job_store_host_source(c->job),
				 c->store_host);
		else
			rc = 0;
	}
	if (rc == 0)
		rc = coord_host_start(c, err, sizeof(err));
	if (!c->job->dynamic && (rc == -EADDRINUSE || rc == UV_EADDRINUSE)) {
		/* Who holds it? Another node 0 of this job is told. */
		c->probing = true;
		c->connect_timeout_ms = PROBE_MS;
		snprintf(c->probe_why, sizeof(c->probe_why), "%s", fam);
		uv_timer_start(&c->timer, on_probe_timeout, PROBE_MS, 0);
	} else if (rc != 0) {
		coord_fail(c, 1, "%s", err);
		return;
	}
	rc = coord_connect(c);
	if (rc != 0) {
		coord_fail(c, 1, "cannot connect to the rendezvous store at %s:%d: %s",
			   c->store_host, c->store_port, store_strerror(rc));
		return;
	}
	if (!c->probing) {
		c->connect_deadline_ms = util_now_ms() + c->connect_timeout_ms;
		uv_timer_start(&c->watch_timer, on_connect_wait, CONNECT_SAY_MS, COORD_WATCH_MS);
	}
	if (c->host_deferred)
		uv_timer_start(&c->timer, on_host_retry, HOST_RETRY_MS, HOST_RETRY_MS);
}

static void after_resolve(void *arg, const struct store_lookup_result *r)
{
	struct coord *c = arg;
	int rc = r->gai;
	unsigned fams = 0;
	int64_t left;

	c->lookup = NULL;
	if (c->phase != CP_START) /* cancelled when leaving: not seen here */
		return;
	if (rc == 0) {
		for (int i = 0; i < r->n; i++)
			fams |= r->addr[i].ss_family == AF_INET ? 1u : 2u;
		c->store_local = coord_host_is_local(r);
		host_and_connect(c, fams);
		return;
	}
	left = c->resolve_deadline_ms - util_now_ms();
	if (rc == EAI_AGAIN && left > 0) {
		/* No answer now (no resolver reachable, a DNS server down): keep
		 * trying for join_timeout, but say so at once. */
		if (!c->resolve_said)
			agent_say("cannot resolve %s (%s) yet: %s; retrying for up to %.0f s "
				  "(join_timeout)",
				  c->store_host, job_store_host_source(c->job), gai_strerror(rc),
				  (double)left / 1000.0);
		c->resolve_said = true;
		uv_timer_start(
			&c->timer, on_resolve_retry,
			(uint64_t)(left < JOB_RESOLVE_RETRY_MS ? left : JOB_RESOLVE_RETRY_MS), 0);
		return;
	}
	if (c->resolve_said)
		coord_fail(c, 1,
			   "error: cannot resolve the rendezvous store's host %s (%s): %s, for "
			   "%.0f s (join_timeout)",
			   c->store_host, job_store_host_source(c->job), gai_strerror(rc),
			   (double)c->conf->join_timeout_ms / 1000.0);
	else
		coord_fail(c, 1, "error: cannot resolve the rendezvous store's host %s (%s): %s",
			   c->store_host, job_store_host_source(c->job), gai_strerror(rc));
}

void coord_start(struct coord *c)
{
	c->resolve_deadline_ms = util_now_ms() + c->conf->join_timeout_ms;
	resolve(c);
}
