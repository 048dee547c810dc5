/* libFuzzer target for rendezvous/util.h's parsers of user input: the first
 * byte picks util_parse_hostport (and the host buffer's size),
 * util_parse_seconds_ms or util_parse_i64; the rest is the string (cut at its
 * first NUL). util.h: strict parsing, the whole string, no spaces around. */
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "util.h"

static int has_space(const char *s)
{
	for (; *s != '\0'; s++)
		if (isspace((unsigned char)*s))
			return 1;
	return 0;
}

static void hostport(const char *s, size_t hostlen)
{
	char *host = malloc(hostlen);
	int port = -7, rc;

	if (host == NULL)
		return;
	rc = util_parse_hostport(s, host, hostlen, 29500, &port);
	CHECK(rc == 0 || rc == -EINVAL || rc == -ENAMETOOLONG);
	if (rc == 0) {
		CHECK(memchr(host, '\0', hostlen) != NULL && host[0] != '\0');
		CHECK(strlen(host) < strlen(s) + 1);
		CHECK(port >= 0 && port <= 65535);
	} else {
		CHECK(port == -7);
	}
	free(host);
}

static void seconds(const char *s)
{
	int64_t ms = -7;
	int rc = util_parse_seconds_ms(s, &ms);

	CHECK(rc == 0 || rc == -EINVAL || rc == -ERANGE);
	if (rc == 0) {
		CHECK(ms >= 0 && ms <= (int64_t)1e12);
		CHECK(!has_space(s));
	} else {
		CHECK(ms == -7);
	}
}

static void integer(const char *s)
{
	int64_t v = -7;
	int rc = util_parse_i64(s, -1000, INT64_MAX, &v);

	CHECK(rc == 0 || rc == -EINVAL || rc == -ERANGE);
	if (rc == 0) {
		CHECK(v >= -1000);
		CHECK(!has_space(s));
	} else {
		CHECK(v == -7);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s;

	if (size < 1)
		return 0;
	s = malloc(size);
	if (s == NULL)
		return 0;
	memcpy(s, data + 1, size - 1);
	s[size - 1] = '\0';
	switch (data[0] % 3) {
	case 0:
		hostport(s, 1 + data[0] / 3 * 4);
		break;
	case 1:
		seconds(s);
		break;
	default:
		integer(s);
		break;
	}
	free(s);
	return 0;
}
