/* util: small helpers shared by every part of ddprun (launcher, store, libddp).
 * Parsing is strict: a whole string must be consumed, ranges are checked, and a
 * failure returns a negative errno (-EINVAL, -ERANGE) without touching *out. */
#ifndef DDP_UTIL_H
#define DDP_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Monotonic clock in milliseconds / nanoseconds (CLOCK_MONOTONIC). */
int64_t util_now_ms(void);
uint64_t util_now_ns(void);
/* Sleep ms milliseconds, the whole time even when signals interrupt it. */
void util_sleep_ms(int64_t ms);

/* Decimal integer in [min, max]; leading/trailing spaces are errors. */
int util_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out);
int util_parse_int(const char *s, int min, int max, int *out);

/* Non-negative seconds, decimal fraction allowed ("0.5", "30"), at most
 * UTIL_SECONDS_MAX (-ERANGE above); converted to ms. */
#define UTIL_SECONDS_MAX 1000000000
#define UTIL_STR_(x)	 #x
#define UTIL_STR(x)	 UTIL_STR_(x) /* a macro's value as a string literal */
int util_parse_seconds_ms(const char *s, int64_t *out_ms);

/* A TCP port's bound, and torchrun's default --master-port (TCPStore's
 * MASTER_PORT), which ddpstore serve also listens on by default. */
#define UTIL_PORT_MAX	 65535
#define UTIL_MASTER_PORT 29500

/* "host", "host:port", "[v6addr]" or "[v6addr]:port". A bare IPv6 address without
 * brackets ("::1") is accepted as a host without port. host is copied without
 * brackets into buf (size hostlen); *port is default_port when none is given.
 * -EINVAL on malformed input, -ENAMETOOLONG when the host does not fit. */
int util_parse_hostport(const char *s, char *host, size_t hostlen, int default_port, int *port);
/* The same for an endpoint (--rdzv-endpoint, a store's address), which
 * torchrun splits at the last colon: without brackets, an IPv6 address and a
 * port ("::1:29400") where the split leaves them, else a bare address. Not
 * for --master-addr, which has no port ("2001:db8::1:2" is one address). */
int util_parse_endpoint(const char *s, char *host, size_t hostlen, int default_port, int *port);

/* Keep a message that quotes user input on one line: every control
 * character in s (newline, escape, ...) becomes '?'. */
void util_one_line(char *s);

/* Make *s (malloc'd, NUL-terminated) valid UTF-8: each byte that starts no
 * valid sequence becomes U+FFFD (Python's errors="replace" gives one for a
 * cut-short sequence where this gives one per byte; both are valid). JSON
 * that others parse (error files: Python's json.load fails on the first bad
 * byte, and torchrun with it) quotes messages in whatever bytes a program
 * gave them. *s is replaced by a new string only when it had such bytes (the
 * old one freed). 0, or -ENOMEM with *s freed and NULL. */
int util_utf8_repair(char **s);

/* Write all of buf to fd, retrying on EINTR and short writes. 0 or -errno. */
int util_write_all(int fd, const void *buf, size_t len);

/* Yama's ptrace_scope (kernel/yama/ptrace_scope): 1, a process may ptrace
 * only its descendants and the processes that named it (PR_SET_PTRACER);
 * 0 where Yama is absent or unrestricted. */
int util_yama_ptrace_scope(void);

#endif
