/* store_addr: address formatting and resolution (see store_addr.h). */
#include "store_addr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>

int store_addr_format(const struct sockaddr *sa, bool with_port, char *buf, size_t len)
{
	char host[INET6_ADDRSTRLEN];
	int port, n;

	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;

		inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
		port = ntohs(in->sin_port);
		n = with_port ? snprintf(buf, len, "%s:%d", host, port)
			      : snprintf(buf, len, "%s", host);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;

		inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
		port = ntohs(in6->sin6_port);
		n = with_port ? snprintf(buf, len, "[%s]:%d", host, port)
			      : snprintf(buf, len, "%s", host);
	} else {
		return -EAFNOSUPPORT;
	}
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int store_addr_resolve(const char *host, int port, bool passive, struct addrinfo **out,
		       int *gai_err)
{
	struct addrinfo hints;
	char ports[16];
	int rc;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_protocol = IPPROTO_TCP;
	hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
	snprintf(ports, sizeof(ports), "%d", port);
	rc = getaddrinfo(host, ports, &hints, out);
	if (gai_err)
		*gai_err = rc;
	if (rc != 0)
		return rc == EAI_MEMORY ? -ENOMEM : -EHOSTUNREACH;
	return 0;
}

int store_addr_gai(const char *host, int port, bool passive)
{
	struct addrinfo *ai;
	int gai = 0;

	if (store_addr_resolve(host, port, passive, &ai, &gai) == 0)
		freeaddrinfo(ai);
	return gai;
}

int store_sock_keepalive(int fd, int idle_s)
{
	int on = 1, intvl = idle_s / 3 > 0 ? idle_s / 3 : 1, cnt = 3;

	if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on)) < 0 ||
	    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof(idle_s)) < 0 ||
	    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl)) < 0 ||
	    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt)) < 0)
		return -errno;
	return 0;
}

bool store_sock_is_self(int fd)
{
	struct sockaddr_storage me, peer;
	socklen_t ml = sizeof(me), pl = sizeof(peer);
	struct linger now = {.l_onoff = 1, .l_linger = 0};

	if (getsockname(fd, (struct sockaddr *)&me, &ml) != 0 ||
	    getpeername(fd, (struct sockaddr *)&peer, &pl) != 0 || me.ss_family != peer.ss_family)
		return false;
	if (me.ss_family == AF_INET) {
		const struct sockaddr_in *a = (const void *)&me, *b = (const void *)&peer;

		if (a->sin_port != b->sin_port || a->sin_addr.s_addr != b->sin_addr.s_addr)
			return false;
	} else if (me.ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const void *)&me, *b = (const void *)&peer;

		if (a->sin6_port != b->sin6_port ||
		    memcmp(&a->sin6_addr, &b->sin6_addr, sizeof(a->sin6_addr)) != 0)
			return false;
	} else {
		return false;
	}
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &now, sizeof(now));
	return true;
}

bool store_addr_is_loopback(const char *addr)
{
	struct in_addr a4;
	struct in6_addr a6;

	if (inet_pton(AF_INET, addr, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	if (inet_pton(AF_INET6, addr, &a6) != 1)
		return false;
	return IN6_IS_ADDR_LOOPBACK(&a6) || (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
}
