/* util: strict number/address parsing and a monotonic clock (see util.h). */
#include "util.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int64_t util_now_ms(void)
{
	return (int64_t)(util_now_ns() / 1000000u);
}

uint64_t util_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void util_sleep_ms(int64_t ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

int util_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out)
{
	char *end;
	long long v;

	/* strtoll would skip any leading white space ("\n5", "\r7"). */
	if (s == NULL || *s == '\0' || isspace((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (*end != '\0')
		return -EINVAL;
	if (errno == ERANGE || v < min || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

int util_parse_int(const char *s, int min, int max, int *out)
{
	int64_t v;
	int rc = util_parse_i64(s, min, max, &v);

	if (rc == 0)
		*out = (int)v;
	return rc;
}

int util_parse_seconds_ms(const char *s, int64_t *out_ms)
{
	char *end;
	double v;

	/* strtod also reads hexadecimal ("0x10" is 16 s), which Python's
	 * float(), and so torchrun, refuses. */
	if (s == NULL || *s == '\0' || isspace((unsigned char)*s) || *s == '-' || *s == '+' ||
	    strpbrk(s, "xX") != NULL)
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (*end != '\0' || v != v) /* trailing junk or NaN */
		return -EINVAL;
	if (errno == ERANGE || v < 0 || v > UTIL_SECONDS_MAX)
		return -ERANGE;
	*out_ms = (int64_t)(v * 1000.0 + 0.5);
	/* Above 0 stays above 0: 0 means "never" or "none" to several options
	 * (--hang-timeout 0.0001 turned hang detection off). */
	if (*out_ms == 0 && v > 0)
		*out_ms = 1;
	return 0;
}

static int copy_host(const char *s, size_t n, char *host, size_t hostlen)
{
	if (n == 0)
		return -EINVAL;
	if (n >= hostlen)
		return -ENAMETOOLONG;
	memcpy(host, s, n);
	host[n] = '\0';
	return 0;
}

static int parse_port(const char *s, int *port)
{
	return util_parse_int(s, 0, UTIL_PORT_MAX, port) == 0 ? 0 : -EINVAL;
}

int util_parse_hostport(const char *s, char *host, size_t hostlen, int default_port, int *port)
{
	const char *colon;
	int p = default_port;
	int rc;

	if (s == NULL || *s == '\0')
		return -EINVAL;
	if (s[0] == '[') {
		const char *close = strchr(s, ']');

		if (close == NULL)
			return -EINVAL;
		if (close[1] != '\0') {
			if (close[1] != ':' || parse_port(close + 2, &p) != 0)
				return -EINVAL;
		}
		rc = copy_host(s + 1, (size_t)(close - s - 1), host, hostlen);
		if (rc == 0)
			*port = p;
		return rc;
	}
	colon = strchr(s, ':');
	if (colon != NULL && strchr(colon + 1, ':') != NULL) {
		/* Two or more colons and no brackets: a bare IPv6 address. */
		rc = copy_host(s, strlen(s), host, hostlen);
		if (rc == 0)
			*port = p;
		return rc;
	}
	if (colon != NULL && parse_port(colon + 1, &p) != 0)
		return -EINVAL;
	rc = copy_host(s, colon ? (size_t)(colon - s) : strlen(s), host, hostlen);
	if (rc == 0)
		*port = p;
	return rc;
}

int util_parse_endpoint(const char *s, char *host, size_t hostlen, int default_port, int *port)
{
	const char *first = s ? strchr(s, ':') : NULL, *last = s ? strrchr(s, ':') : NULL;
	char v6[INET6_ADDRSTRLEN + 32], *zone;
	struct in6_addr a;
	int p, v6ok;

	/* Two or more colons, no brackets: torchrun splits at the last one
	 * ("::1:29400" is ::1, port 29400, "fe80::1%eth0:29400" too) where that
	 * leaves an IPv6 address and a number, which must then be a port;
	 * else ("::1", "fe80::1", which torchrun would cut into nonsense) it is
	 * a bare address, as util_parse_hostport takes it. */
	if (first && first != last && s[0] != '[' && (size_t)(last - s) < sizeof(v6) &&
	    last[1] != '\0' && strspn(last + 1, "0123456789") == strlen(last + 1)) {
		memcpy(v6, s, (size_t)(last - s));
		v6[last - s] = '\0';
		zone = strchr(v6, '%'); /* a scope (fe80::1%eth0): not inet_pton's */
		if (zone)
			*zone = '\0';
		v6ok = inet_pton(AF_INET6, v6, &a) == 1;
		if (zone)
			*zone = '%';
		if (v6ok) {
			int rc = parse_port(last + 1, &p);
			if (rc == 0)
				rc = copy_host(v6, strlen(v6), host, hostlen);
			if (rc == 0)
				*port = p;
			return rc;
		}
	}
	return util_parse_hostport(s, host, hostlen, default_port, port);
}

void util_one_line(char *s)
{
	for (; *s != '\0'; s++)
		if ((unsigned char)*s < ' ' || *s == 0x7f)
			*s = '?';
}

/* The length of the valid UTF-8 sequence at p (1-4), or 0 (RFC 3629: no
 * overlong forms, no surrogates, nothing above U+10FFFF). */
static size_t utf8_seq(const unsigned char *p)
{
	unsigned char lo = 0x80, hi = 0xbf;
	size_t n, i;

	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		n = 2;
	else if (p[0] >= 0xe0 && p[0] <= 0xef)
		n = 3;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		n = 4;
	else
		return 0;
	if (p[0] == 0xe0)
		lo = 0xa0;
	else if (p[0] == 0xed)
		hi = 0x9f;
	else if (p[0] == 0xf0)
		lo = 0x90;
	else if (p[0] == 0xf4)
		hi = 0x8f;
	if (p[1] < lo || p[1] > hi) /* a NUL ends it here too */
		return 0;
	for (i = 2; i < n; i++)
		if (p[i] < 0x80 || p[i] > 0xbf)
			return 0;
	return n;
}

int util_utf8_repair(char **s)
{
	const unsigned char *in = (const unsigned char *)*s;
	size_t bad = 0, i, n, len = 0;
	char *out;

	for (i = 0; in[i] != '\0'; i += n ? n : 1)
		bad += (n = utf8_seq(in + i)) == 0;
	if (bad == 0)
		return 0;
	out = malloc(i + 2 * bad + 1); /* each bad byte: 3 bytes for 1 */
	if (out == NULL) {
		free(*s);
		*s = NULL;
		return -ENOMEM;
	}
	for (i = 0; in[i] != '\0'; i += n ? n : 1) {
		if ((n = utf8_seq(in + i)) == 0) {
			memcpy(out + len, "\xef\xbf\xbd", 3);
			len += 3;
		} else {
			memcpy(out + len, in + i, n);
			len += n;
		}
	}
	out[len] = '\0';
	free(*s);
	*s = out;
	return 0;
}

int util_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = write(fd, p, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int util_yama_ptrace_scope(void)
{
	FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "re");
	int v = 0;

	if (f == NULL)
		return 0;
	if (fscanf(f, "%d", &v) != 1)
		v = 0;
	fclose(f);
	return v;
}
