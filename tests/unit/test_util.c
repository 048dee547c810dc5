/* Unit tests for rendezvous/util.c: strict parsing of numbers, durations, addresses; UTF-8
 * repair. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* Valid UTF-8 stays the same string; each byte that starts no valid
 * sequence (a lone continuation, a truncated sequence, an overlong form, a
 * surrogate, a code point above U+10FFFF) becomes U+FFFD. */
static void test_utf8_repair(void **state)
{
	static const struct {
		const char *in, *out;
	} cases[] = {
		{"", ""},
		{"plain ascii\n", "plain ascii\n"},
		{"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
		 "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"},
		{"caf\xe9.bin", "caf\xef\xbf\xbd.bin"},
		{"\xff\xfe", "\xef\xbf\xbd\xef\xbf\xbd"},
		{"\x80x", "\xef\xbf\xbdx"},
		{"ab\xe2\x82", "ab\xef\xbf\xbd\xef\xbf\xbd"},		  /* cut short at the end */
		{"\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd"},		  /* overlong '/' */
		{"\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* U+D800 */
		{"\xf4\x90\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
		{"\xf4\x8f\xbf\xbf", "\xf4\x8f\xbf\xbf"}, /* U+10FFFF */
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *s = strdup(cases[i].in);

		assert_non_null(s);
		assert_int_equal(util_utf8_repair(&s), 0);
		assert_string_equal(s, cases[i].out);
		free(s);
	}
}

static void test_parse_i64(void **state)
{
	int64_t v = 42;

	assert_int_equal(util_parse_i64("17", 0, 100, &v), 0);
	assert_int_equal(v, 17);
	assert_int_equal(util_parse_i64("-5", -10, 10, &v), 0);
	assert_int_equal(v, -5);
	assert_int_equal(util_parse_i64("", 0, 100, &v), -EINVAL);
	assert_int_equal(util_parse_i64(" 1", 0, 100, &v), -EINVAL);
	assert_int_equal(util_parse_i64("1 ", 0, 100, &v), -EINVAL);
	/* Any leading white space, not only ' ' and '\t' (fuzz_util: "\r7"). */
	assert_int_equal(util_parse_i64("\r7", 0, 100, &v), -EINVAL);
	assert_int_equal(util_parse_i64("\n7", 0, 100, &v), -EINVAL);
	assert_int_equal(util_parse_i64("\v7", 0, 100, &v), -EINVAL);
	assert_int_equal(util_parse_i64("1x", 0, 100, &v), -EINVAL);
	assert_int_equal(util_parse_i64("101", 0, 100, &v), -ERANGE);
	assert_int_equal(util_parse_i64("99999999999999999999", 0, INT64_MAX, &v), -ERANGE);
	assert_int_equal(v, -5); /* untouched on failure */
}

static void test_parse_seconds(void **state)
{
	int64_t ms = 0;

	assert_int_equal(util_parse_seconds_ms("30", &ms), 0);
	assert_int_equal(ms, 30000);
	assert_int_equal(util_parse_seconds_ms("0.1", &ms), 0);
	assert_int_equal(ms, 100);
	/* Below half a millisecond is still more than 0 (1 ms), not 0. */
	assert_int_equal(util_parse_seconds_ms("0.0001", &ms), 0);
	assert_int_equal(ms, 1);
	assert_int_equal(util_parse_seconds_ms("0.0", &ms), 0);
	assert_int_equal(ms, 0);
	assert_int_equal(util_parse_seconds_ms("-1", &ms), -EINVAL);
	assert_int_equal(util_parse_seconds_ms("abc", &ms), -EINVAL);
	assert_int_equal(util_parse_seconds_ms("nan", &ms), -EINVAL);
	assert_int_equal(util_parse_seconds_ms("0x10", &ms), -EINVAL);
	assert_int_equal(util_parse_seconds_ms("0X1p3", &ms), -EINVAL);
	assert_int_equal(util_parse_seconds_ms("1e12", &ms), -ERANGE);
	assert_int_equal(util_parse_seconds_ms("\t5", &ms), -EINVAL);
	assert_int_equal(util_parse_seconds_ms("\n5", &ms), -EINVAL);
}

static void test_parse_hostport(void **state)
{
	char host[64];
	int port = -1;

	assert_int_equal(util_parse_hostport("node1:29400", host, sizeof(host), 1, &port), 0);
	assert_string_equal(host, "node1");
	assert_int_equal(port, 29400);
	assert_int_equal(util_parse_hostport("node1", host, sizeof(host), 29500, &port), 0);
	assert_int_equal(port, 29500);
	assert_int_equal(util_parse_hostport("[::1]:80", host, sizeof(host), 1, &port), 0);
	assert_string_equal(host, "::1");
	assert_int_equal(port, 80);
	assert_int_equal(util_parse_hostport("[fe80::1]", host, sizeof(host), 7, &port), 0);
	assert_string_equal(host, "fe80::1");
	assert_int_equal(port, 7);
	assert_int_equal(util_parse_hostport("::1", host, sizeof(host), 9, &port), 0);
	assert_string_equal(host, "::1");
	assert_int_equal(port, 9);
	/* A master address has no port: every colon is the address's. */
	assert_int_equal(util_parse_hostport("2001:db8::5:80", host, sizeof(host), 9, &port), 0);
	assert_string_equal(host, "2001:db8::5:80");
	assert_int_equal(port, 9);
	/* An endpoint: torchrun's last-colon split, where it leaves an address
	 * and a port, else a bare address */
	assert_int_equal(util_parse_endpoint("::1:29781", host, sizeof(host), 9, &port), 0);
	assert_string_equal(host, "::1");
	assert_int_equal(port, 29781);
	assert_int_equal(util_parse_endpoint("2001:db8::5:80", host, sizeof(host), 9, &port), 0);
	assert_string_equal(host, "2001:db8::5");
	assert_int_equal(port, 80);
	assert_int_equal(util_parse_endpoint("fe80::1", host, sizeof(host), 9, &port), 0);
	assert_string_equal(host, "fe80::1");
	assert_int_equal(port, 9);
	assert_int_equal(util_parse_endpoint("fe80::abcd", host, sizeof(host), 9, &port), 0);
	assert_string_equal(host, "fe80::abcd");
	assert_int_equal(port, 9);
	assert_int_equal(util_parse_endpoint("fe80::1%eth0:29400", host, sizeof(host), 9, &port),
			 0);
	assert_string_equal(host, "fe80::1%eth0");
	assert_int_equal(port, 29400);
	assert_int_equal(util_parse_endpoint("::1:99999", host, sizeof(host), 9, &port), -EINVAL);
	assert_int_equal(util_parse_endpoint("[::1]:80", host, sizeof(host), 9, &port), 0);
	assert_int_equal(port, 80);
	assert_int_equal(util_parse_endpoint("node1:29400", host, sizeof(host), 9, &port), 0);
	assert_string_equal(host, "node1");
	assert_int_equal(util_parse_endpoint("", host, sizeof(host), 9, &port), -EINVAL);
	assert_int_equal(util_parse_endpoint(NULL, host, sizeof(host), 9, &port), -EINVAL);
	assert_int_equal(util_parse_hostport("h:70000", host, sizeof(host), 1, &port), -EINVAL);
	assert_int_equal(util_parse_hostport("h:", host, sizeof(host), 1, &port), -EINVAL);
	assert_int_equal(util_parse_hostport(":80", host, sizeof(host), 1, &port), -EINVAL);
	assert_int_equal(util_parse_hostport("[::1", host, sizeof(host), 1, &port), -EINVAL);
	assert_int_equal(util_parse_hostport("[::1]x", host, sizeof(host), 1, &port), -EINVAL);
	assert_int_equal(util_parse_hostport("", host, sizeof(host), 1, &port), -EINVAL);
	assert_int_equal(util_parse_hostport("averyveryverylonghostname", host, 8, 1, &port),
			 -ENAMETOOLONG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_utf8_repair),
		cmocka_unit_test(test_parse_i64),
		cmocka_unit_test(test_parse_seconds),
		cmocka_unit_test(test_parse_hostport),
	};

	return cmocka_run_group_tests_name("util", tests, NULL, NULL);
}
