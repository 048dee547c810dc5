/* agent_store: address and port of the workers' store (see agent_store.h).
 * Until the store server is available the workers' rank 0 hosts PyTorch's own
 * TCPStore on the port chosen here (TORCHELASTIC_USE_AGENT_STORE=False). */
#include "agent_store.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util.h"

/* A port nobody listens on right now (bind to port 0, read it, close). */
static int free_port(const char *host, int *port)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
	struct addrinfo *res, *ai;
	int rc = -EADDRNOTAVAIL;

	if (getaddrinfo(host, "0", &hints, &res) != 0)
		return -EADDRNOTAVAIL;
	for (ai = res; ai != NULL; ai = ai->ai_next) {
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);
		int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);

		if (fd < 0)
			continue;
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
		    getsockname(fd, (struct sockaddr *)&ss, &len) == 0) {
			*port = ss.ss_family == AF_INET6
					? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
					: ntohs(((struct sockaddr_in *)&ss)->sin_port);
			rc = 0;
		}
		close(fd);
		if (rc == 0)
			break;
	}
	freeaddrinfo(res);
	return rc;
}

int agent_store_open(struct agent *a, char *err, size_t errlen)
{
	char host[256];
	int port, rc;

	rc = util_parse_hostport(a->o->master_addr, host, sizeof(host), a->o->master_port, &port);
	if (rc != 0) {
		snprintf(err, errlen, "invalid --master-addr '%.200s'", a->o->master_addr);
		return rc;
	}
	a->store_host = strdup(host);
	if (a->store_host == NULL)
		return -ENOMEM;
	a->store_port = a->o->master_port;
	if (!a->o->master_port_given && a->o->max_nodes == 1) {
		rc = free_port(host, &a->store_port);
		if (rc != 0) {
			snprintf(err, errlen, "cannot find a free port on %.200s", host);
			return rc;
		}
	}
	return 0;
}

void agent_store_world(struct agent *a, struct agent_world *w)
{
	w->master_addr = a->store_host;
	w->master_port = a->store_port;
	w->use_agent_store = a->store != NULL;
}

void agent_store_close(struct store_server *s, void (*done)(void *arg), void *arg)
{
	(void)s;
	if (done != NULL)
		done(arg);
}
