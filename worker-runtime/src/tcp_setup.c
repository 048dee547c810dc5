/* tcp_setup: opening the ring between node leaders (see tcp.h): each leader
 * listens, publishes its entry in the store, reads every other node's, connects
 * to its right neighbour with a hello and accepts its left one; and closing it
 * (an abort is tcp_abort.c's). */
#include <errno.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "store_addr.h"
#include "store_client.h"
#include "tcp_int.h"
#include "util.h"

#define HELLO_MAGIC 0x44445054u /* "DDPT" */

struct hello {
	uint32_t magic;
	uint32_t node;
	uint32_t restart;
	uint32_t world;
};

/* Listen on addr, a numeric address, on a port the kernel picks: 0, or a
 * negative errno with the reason in why. It sets no ddp_errmsg: the caller
 * may yet succeed another way (no IPv6 here), and a success must leave the
 * last failure's text as it was (ddp.h). */
static int listen_on(const char *addr, int *fd_out, int *port_out, char *why, size_t whylen)
{
	struct addrinfo hints = {.ai_flags = AI_NUMERICHOST | AI_PASSIVE,
				 .ai_socktype = SOCK_STREAM};
	struct addrinfo *ai = NULL;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int fd, rc;

	if ((rc = getaddrinfo(addr, "0", &hints, &ai)) != 0) {
		snprintf(why, whylen, "bad local address '%s': %s", addr, gai_strerror(rc));
		return -EINVAL;
	}
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd >= 0 && ai->ai_family == AF_INET6) { /* "::" takes IPv4 too */
		int off = 0;

		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
	}
	if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 16) < 0 ||
	    getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
		rc = -errno;
		snprintf(why, whylen, "cannot listen on %s: %s", addr, strerror(-rc));
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		return rc;
	}
	freeaddrinfo(ai);
	*port_out = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
						   : ((struct sockaddr_in *)&ss)->sin_port);
	*fd_out = fd;
	return 0;
}

/* The kernel's list in /proc/sys/net/ipv4/NAME, one line, into buf. */
static void sysctl_line(const char *name, char *buf, size_t len)
{
	char path[96];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/sys/net/ipv4/%s", name);
	snprintf(buf, len, "unreadable");
	if ((f = fopen(path, "re"))) {
		if (fgets(buf, (int)len, f))
			buf[strcspn(buf, "\n")] = '\0';
		fclose(f);
	}
}

/* The ring's congestion control. A collective is a burst each way between
 * two leaders, then a pause as long as the compute between calls; what
 * suits it depends on the burst's size. Measured on veth between network
 * namespaces (bench/allreduce/ring.py, 2 nodes, all_reduce, medians of 4,
 * Open MPI on the host's bbr beside it):
 *            1 MiB     4 MiB     16 MiB    64 MiB
 *   reno     289 us    1.22 ms   12.3 ms   98.9 ms (runs 66-104 ms)
 *   bbr      698 us    2.92 ms   14.2 ms   66.1 ms
 *   Open MPI 475 us    4.13 ms   16.7 ms   74.8 ms
 * (cubic, the usual default, was slower than both at every size.) The link
 * reorders, and every run had thousands of spurious retransmits (ss's
 * dsack_dups): a burst that fits in reno's window goes out at once, while
 * bbr paces it; over a long flow each spurious loss halves reno's window,
 * which bbr ignores. So by default (auto) calls of TCP_CC_LARGE or more run
 * bbr, where the kernel has it and lets this process use it, and the rest
 * reno, which every kernel has and allows. DDP_TCP_CONGESTION=NAME runs NAME
 * for every call, system the host's default. A default the kernel refuses
 * (a sandbox without TCP_CONGESTION) keeps the host's; a chosen one it
 * refuses is an error naming what the kernel offers. */
#define TCP_CC_LARGE (8u << 20)

static int cc_set(int fd, const char *name)
{
	return setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, (socklen_t)strlen(name)) < 0
		       ? -errno
		       : 0;
}

/* The error for a chosen congestion control the kernel refused (errno e). */
static int cc_refused(const char *name, int e)
{
	char list[256];

	if (e == ENOENT) {
		sysctl_line("tcp_available_congestion_control", list, sizeof(list));
		return ddpi_err(DDP_EENV,
				"DDP_TCP_CONGESTION='%s': this kernel has no such TCP congestion "
				"control (it has: %s)",
				name, list);
	}
	if (e == EPERM) {
		sysctl_line("tcp_allowed_congestion_control", list, sizeof(list));
		return ddpi_err(DDP_EENV,
				"DDP_TCP_CONGESTION='%s' is not allowed for this process "
				"(net.ipv4.tcp_allowed_congestion_control: %s)",
				name, list);
	}
	return ddpi_err(DDP_EENV, "DDP_TCP_CONGESTION='%s': %s", name, strerror(e));
}

/* Whether the kernel already has congestion control name: 1, 0, or -1 when
 * /proc does not say. Asking for one it lacks would make it try to load a
 * module on root's behalf, a change to the machine: only listed ones are
 * asked for. */
static int cc_listed(const char *name)
{
	char list[256], *save = NULL;

	sysctl_line("tcp_available_congestion_control", list, sizeof(list));
	if (!strcmp(list, "unreadable"))
		return -1;
	for (char *w = strtok_r(list, " \t", &save); w; w = strtok_r(NULL, " \t", &save))
		if (!strcmp(w, name))
			return 1;
	return 0;
}

/* The choices for small and large calls from DDP_TCP_CONGESTION (want),
 * tried on the ring's sockets, which are left with the small calls' one. */
static int cc_setup(struct ddpi_tcp *t, const char *want)
{
	int chosen = strcmp(want, "auto") != 0, fds[2] = {t->left_fd, t->right_fd};
	const char *small = chosen ? want : "reno";

	t->cc_now = -1;
	if (!strcmp(want, "system"))
		return 0;
	if (chosen && cc_listed(want) == 0)
		return cc_refused(want, ENOENT);
	for (int i = 0; i < 2; i++) {
		int rc = cc_set(fds[i], small);
		if (rc < 0)
			return chosen ? cc_refused(want, -rc) : 0; /* a sandbox: the host's */
	}
	snprintf(t->cc[0], sizeof(t->cc[0]), "%s", small);
	snprintf(t->cc[1], sizeof(t->cc[1]), "%s", small);
	t->cc_now = 0;
	if (!chosen && cc_listed("bbr") == 1 && cc_set(t->right_fd, "bbr") == 0) {
		snprintf(t->cc[1], sizeof(t->cc[1]), "bbr");
		cc_set(t->right_fd, small);
	}
	return 0;
}

void ddpi_tcp_cc_for(struct ddpi_tcp *t, size_t bytes)
{
	int k = bytes >= TCP_CC_LARGE;

	if (t->cc_now < 0 || k == t->cc_now)
		return;
	/* Names the sockets took at setup: a refusal now would change nothing. */
	if (strcmp(t->cc[k], t->cc[t->cc_now])) {
		cc_set(t->left_fd, t->cc[k]);
		cc_set(t->right_fd, t->cc[k]);
	}
	t->cc_now = k;
}

static void tune(int fd)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

static int connect_to(const char *host, int port, int64_t deadline, int *out)
{
	struct addrinfo hints = {.ai_flags = AI_NUMERICHOST, .ai_socktype = SOCK_STREAM};
	struct addrinfo *ai = NULL;
	char ps[16];
	int fd = -1, rc;

	snprintf(ps, sizeof(ps), "%d", port);
	if ((rc = getaddrinfo(host, ps, &hints, &ai)) != 0)
		return ddpi_err(-EINVAL, "tcp: bad peer address '%s': %s", host, gai_strerror(rc));
	for (;;) {
		fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (fd < 0)
			break;
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
			break;
		if (errno == EINPROGRESS) {
			struct pollfd p = {.fd = fd, .events = POLLOUT};
			int64_t left = deadline - util_now_ms();
			int err = 0;
			socklen_t el = sizeof(err);
			if (left > 0 && poll(&p, 1, (int)(left > 60000 ? 60000 : left)) == 1 &&
			    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0)
				break;
			errno = err ? err : ETIMEDOUT;
		}
		rc = errno;
		close(fd);
		fd = -1;
		if (util_now_ms() >= deadline || (rc != ECONNREFUSED && rc != ETIMEDOUT)) {
			errno = rc;
			break;
		}
		usleep(20000);
	}
	freeaddrinfo(ai);
	if (fd < 0)
		return ddpi_err(-errno,
				"tcp: cannot connect to the next node's leader at %s:%d: %s", host,
				port, strerror(errno));
	*out = fd;
	return 0;
}

static int accept_left(int lfd, const struct ddpi_tcp *t, int64_t deadline, int *out)
{
	int want = (t->me - 1 + t->nnodes) % t->nnodes;

	for (;;) {
		struct pollfd p = {.fd = lfd, .events = POLLIN};
		int64_t left = deadline - util_now_ms();
		struct hello h;
		int fd;

		if (left <= 0)
			return ddpi_tcp_leader_cause(
				t,
				ddpi_err(-ETIMEDOUT,
					 "tcp: node %d's leader did not connect in time", want),
				want, "timed out");
		if (poll(&p, 1, (int)(left > 1000 ? 1000 : left)) <= 0)
			continue;
		fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		/* A short blocking read of the hello; a stranger gets dropped. */
		struct timeval tv = {2, 0};
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		if (recv(fd, &h, sizeof(h), MSG_WAITALL) == (ssize_t)sizeof(h) &&
		    h.magic == HELLO_MAGIC && (int)h.node == want && (int)h.restart == t->restart &&
		    (int)h.world == t->world) {
			*out = fd;
			return 0;
		}
		close(fd);
	}
}

/* "addr port nranks r0 r1 ..." for node g, into the rank tables. */
static int parse_entry(struct ddpi_tcp *t, int g, const char *v, char *addr, size_t alen, int *port)
{
	char fmt[32];
	int n, used = 0;

	snprintf(fmt, sizeof(fmt), "%%%zus %%d %%d%%n", alen - 1);
	if (sscanf(v, fmt, addr, port, &n, &used) != 3 || n < 1 || n > t->world)
		return ddpi_err(-EPROTO, "tcp: bad leader entry for node %d: '%s'", g, v);
	t->nranks[g] = n;
	t->ranks[g] = calloc((size_t)n, sizeof(int));
	if (!t->ranks[g])
		return ddpi_err(-ENOMEM, "tcp: out of memory");
	v += used;
	for (int i = 0; i < n; i++) {
		int r, k = 0;
		if (sscanf(v, "%d%n", &r, &k) != 1 || r < 0 || r >= t->world || t->node_of[r] != -1)
			return ddpi_err(-EPROTO, "tcp: bad or duplicate rank in node %d's entry",
					g);
		t->ranks[g][i] = r;
		t->node_of[r] = g;
		v += k;
	}
	return 0;
}

/* A name that is a container or VM bridge's, local to this host (as NCCL
 * passes over docker*): another host does not reach this one there. */
static bool bridge_name(const char *name)
{
	return strncmp(name, "docker", 6) == 0 || strncmp(name, "virbr", 5) == 0;
}

/* An address of this host's for the ring, into out: of interface ifname if
 * given, else of the first that is not loopback nor a bridge's (up; not
 * IPv6 link-local, which needs its interface named); of like's family
 * first, then of the other; running first (with a carrier: a freshly
 * raised link has none for up to a second), then only up. -ENOENT where
 * there is none. */
static int host_addr(const char *like, const char *ifname, char *out, size_t len)
{
	int fam0 = strchr(like, ':') ? AF_INET6 : AF_INET, rc = -ENOENT, pass;
	struct ifaddrs *ifs = NULL, *i;
	char buf[INET6_ADDRSTRLEN];

	if (getifaddrs(&ifs) < 0)
		return -errno;
	for (pass = 0; pass < 4 && rc != 0; pass++) {
		int fam = pass % 2 == 0 ? fam0 : fam0 == AF_INET ? AF_INET6 : AF_INET;
		unsigned want = pass < 2 ? IFF_UP | IFF_RUNNING : IFF_UP;

		for (i = ifs; i != NULL && rc != 0; i = i->ifa_next) {
			const void *a;

			if (i->ifa_addr == NULL || i->ifa_addr->sa_family != fam ||
			    (i->ifa_flags & want) != want ||
			    (ifname != NULL
				     ? strcmp(i->ifa_name, ifname) != 0
				     : (i->ifa_flags & IFF_LOOPBACK) || bridge_name(i->ifa_name)))
				continue;
			if (fam == AF_INET) {
				a = &((const struct sockaddr_in *)(const void *)i->ifa_addr)
					     ->sin_addr;
			} else {
				a = &((const struct sockaddr_in6 *)(const void *)i->ifa_addr)
					     ->sin6_addr;
				if (IN6_IS_ADDR_LINKLOCAL((const struct in6_addr *)a))
					continue;
			}
			if (inet_ntop(fam, a, buf, sizeof(buf)) != NULL &&
			    (ifname != NULL || !store_addr_is_loopback(buf)) && strlen(buf) < len) {
				memcpy(out, buf, strlen(buf) + 1);
				rc = 0;
			}
		}
	}
	freeifaddrs(ifs);
	return rc;
}

static int cmp_int(const void *a, const void *b)
{
	return *(const int *)a - *(const int *)b;
}

int ddpi_tcp_open(const struct ddp_env *env, const int *local_ranks, struct store_client *sc,
		  int64_t deadline, struct ddpi_tcp **out)
{
	struct ddpi_tcp *t = calloc(1, sizeof(*t));
	char myaddr[128], key[32], *entry = NULL, rightaddr[128];
	char why[256], why6[256]; /* listen_on's reasons */
	int lfd = -1, port = 0, right_port = 0, rc = -ENOMEM;
	size_t elen = 0;
	bool lo;

	if (!t)
		return ddpi_err(rc, "tcp: out of memory");
	t->nnodes = env->nnodes;
	t->me = env->node;
	t->world = env->world;
	t->restart = env->restart;
	t->left_fd = t->right_fd = -1;
	t->why.from = -1;
	t->node_of = malloc((size_t)env->world * sizeof(int));
	t->ranks = calloc((size_t)env->nnodes, sizeof(int *));
	t->nranks = calloc((size_t)env->nnodes, sizeof(int));
	entry = malloc(64 + (size_t)env->local_world * 12);
	if (!t->node_of || !t->ranks || !t->nranks || !entry) {
		rc = ddpi_err(rc, "tcp: out of memory");
		goto fail;
	}
	for (int r = 0; r < env->world; r++)
		t->node_of[r] = -1;

	/* Listen where this host reaches the store: the other nodes can reach
	 * it too. Not where that is a loopback address (the store's own host,
	 * whose name it resolves to 127.0.1.1 as Debian's /etc/hosts has it,
	 * or --master-addr localhost there): there on every address, of both
	 * families (another node may reach the store over either), as the
	 * store itself listens, and the others connect where they reach the
	 * store (below). The right neighbour waited DDP_TIMEOUT for a
	 * connection that could not come. The listener cannot know whether
	 * the other nodes share this host (all on loopback): it listens so
	 * there too, during the ring's setup only. */
	if ((rc = store_client_local_addr(sc, myaddr, sizeof(myaddr))) < 0) {
		rc = ddpi_err(rc, "store: %s", store_strerror(rc));
		goto fail;
	}
	if (env->socket_ifname[0] &&
	    (rc = host_addr(myaddr, env->socket_ifname, myaddr, sizeof(myaddr))) < 0) {
		rc = ddpi_err(DDP_EENV,
			      "DDP_SOCKET_IFNAME=%s: no interface of that name is up with an "
			      "address",
			      env->socket_ifname);
		goto fail;
	}
	lo = store_addr_is_loopback(myaddr);
	if (lo && env->nnodes > 1 && !env->socket_ifname[0]) {
		/* "::" takes both families; a host without IPv6 has 0.0.0.0. */
		rc = listen_on("::", &lfd, &port, why6, sizeof(why6));
		if (rc < 0 && (rc = listen_on("0.0.0.0", &lfd, &port, why, sizeof(why))) < 0)
			rc = ddpi_err(rc, "tcp: %s; %s", why6, why);
		/* The store's host is node 0 (the agent of node rank, or group
		 * rank, 0 hosts the workers' store): another node that reaches it
		 * on loopback does so through a port forward (ssh -L), and the
		 * others reach it at an address of its own. */
		if (rc == 0 && env->node != 0)
			(void)host_addr(myaddr, NULL, myaddr, sizeof(myaddr)); /* or none */
	} else if ((rc = listen_on(myaddr, &lfd, &port, why, sizeof(why))) < 0) {
		rc = ddpi_err(rc, "tcp: %s", why);
	}
	if (rc < 0)
		goto fail;

	/* Publish this node's address and ranks, then read everyone's. */
	int *sorted = malloc((size_t)env->local_world * sizeof(int));
	if (!sorted) {
		rc = ddpi_err(-ENOMEM, "tcp: out of memory");
		goto fail;
	}
	memcpy(sorted, local_ranks, (size_t)env->local_world * sizeof(int));
	qsort(sorted, (size_t)env->local_world, sizeof(int), cmp_int);
	elen = (size_t)snprintf(entry, 64, "%s %d %d", myaddr, port, env->local_world);
	for (int i = 0; i < env->local_world; i++)
		elen += (size_t)sprintf(entry + elen, " %d", sorted[i]);
	free(sorted);
	snprintf(key, sizeof(key), "leader/%d", env->node);
	store_client_set_timeout(sc, deadline - util_now_ms() > 0 ? deadline - util_now_ms() : 1);
	if ((rc = store_client_set(sc, key, entry, elen)) < 0) {
		rc = ddpi_err(rc, "store set %s: %s", key, store_strerror(rc));
		goto fail;
	}
	for (int g = 0; g < env->nnodes; g++) {
		void *v = NULL;
		size_t vlen = 0;
		char a[128];
		int p;
		snprintf(key, sizeof(key), "leader/%d", g);
		store_client_set_timeout(sc, deadline - util_now_ms() > 0 ? deadline - util_now_ms()
									  : 1);
		if ((rc = store_client_get(sc, key, &v, &vlen)) < 0) {
			rc = ddpi_err(rc, "node %d's leader did not show up in the store: %s", g,
				      store_strerror(rc));
			if (rc == -ETIMEDOUT)
				ddpi_tcp_leader_cause(t, rc, g, "timed out");
			goto fail;
		}
		rc = parse_entry(t, g, v, a, sizeof(a), &p);
		if (rc == 0 && g == (t->me + 1) % t->nnodes) {
			snprintf(rightaddr, sizeof(rightaddr), "%s", a);
			right_port = p;
			/* A loopback address from another host: the store's (above),
			 * where this node reaches the store. Another node's had no
			 * other address up: no one elsewhere can reach it. */
			if (store_addr_is_loopback(a) && !lo && g != 0)
				rc = ddpi_tcp_leader_cause(
					t,
					ddpi_err(DDP_EPEER,
						 "tcp: node %d's leader reaches the store on "
						 "loopback (%s: a port forward?) and has no other "
						 "address up (DDP_SOCKET_IFNAME names one there), "
						 "so no other host can reach it",
						 g, a),
					g, "has only a loopback address");
			else if (store_addr_is_loopback(a) && !lo &&
				 store_client_peer_addr(sc, rightaddr, sizeof(rightaddr)) < 0)
				snprintf(rightaddr, sizeof(rightaddr), "%s", a);
		}
		free(v);
		if (rc < 0)
			goto fail;
	}
	for (int r = 0; r < env->world; r++)
		if (t->node_of[r] < 0) {
			rc = ddpi_err(DDP_EENV,
				      "rank %d belongs to no node (check GROUP_RANK and "
				      "LOCAL_WORLD_SIZE on every node)",
				      r);
			goto fail;
		}
	/* Connect right, then accept left: the listen backlog lets both happen. */
	if ((rc = connect_to(rightaddr, right_port, deadline, &t->right_fd)) < 0) {
		/* It published its address: it was there, and is no more. */
		if (rc == -ECONNREFUSED || rc == -ETIMEDOUT)
			ddpi_tcp_leader_cause(t, rc, right_of(t), "could not be reached");
		goto fail;
	}
	struct hello h = {HELLO_MAGIC, (uint32_t)t->me, (uint32_t)t->restart, (uint32_t)t->world};
	if (send(t->right_fd, &h, sizeof(h), MSG_NOSIGNAL) != (ssize_t)sizeof(h)) {
		rc = ddpi_tcp_leader_cause(t,
					   ddpi_err(DDP_EPEER,
						    "tcp: hello to the next node failed: %s",
						    strerror(errno)),
					   right_of(t), "disconnected");
		goto fail;
	}
	if ((rc = accept_left(lfd, t, deadline, &t->left_fd)) < 0)
		goto fail;
	tune(t->left_fd);
	tune(t->right_fd);
	if ((rc = cc_setup(t, env->tcp_cc)) < 0)
		goto fail;
	close(lfd);
	free(entry);
	t->at_frame = 1; /* the next leader reads the first call's frame next */
	*out = t;
	return 0;
fail:
	if (lfd >= 0)
		close(lfd);
	free(entry);
	ddpi_tcp_close(t);
	return rc;
}

void ddpi_tcp_close(struct ddpi_tcp *t)
{
	if (!t)
		return;
	if (t->left_fd >= 0)
		close(t->left_fd);
	if (t->right_fd >= 0)
		close(t->right_fd);
	for (int g = 0; t->ranks && g < t->nnodes; g++)
		free(t->ranks[g]);
	free(t->ranks);
	free(t->nranks);
	free(t->node_of);
	free(t->tmp);
	free(t);
}
