/* rdzv_conf: parse --rdzv-conf (see rdzv_conf.h). */
#include "rdzv_conf.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "util.h"

void rdzv_conf_default(struct rdzv_conf *c)
{
	c->join_timeout_ms = 600000;
	c->last_call_timeout_ms = 30000;
	c->close_timeout_ms = 30000;
	c->heartbeat_timeout_ms = 5000;
	c->keep_alive_interval_ms = 1000;
	c->keep_alive_max_attempt = 3;
	c->read_timeout_ms = 60000;
	c->timeout_ms = 900000;
	c->exit_barrier_timeout_ms = 300000;
	c->is_host = -1;
	c->heartbeat_timeout_given = false;
	c->keep_alive_interval_given = false;
	c->keep_alive_max_attempt_given = false;
	c->unknown[0] = '\0';
}

/* torchrun's boolean spellings (RendezvousParameters.get_as_bool), in any
 * case; the refusal lists them (BOOL_WORDS). */
static const char *const yes[] = {"1", "true", "t", "yes", "y"};
static const char *const no[] = {"0", "false", "f", "no", "n"};
#define BOOL_WORDS "1, true, t, yes, y (on) or 0, false, f, no, n (off), in any case"

static int parse_bool(const char *v, int *out)
{
	size_t i;

	for (i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		if (strcasecmp(v, yes[i]) == 0) {
			*out = 1;
			return 0;
		}
		if (strcasecmp(v, no[i]) == 0) {
			*out = 0;
			return 0;
		}
	}
	return -EINVAL;
}

/* One key: its field (ms or int) and whether 0 is allowed. 1: not a key ddprun uses. */
static int set_key(struct rdzv_conf *c, const char *k, const char *v, char *err, size_t errlen)
{
	static const struct {
		const char *name;
		size_t off;
		bool positive;
	} secs[] = {
		{"join_timeout", offsetof(struct rdzv_conf, join_timeout_ms), true},
		{"last_call_timeout", offsetof(struct rdzv_conf, last_call_timeout_ms), false},
		{"close_timeout", offsetof(struct rdzv_conf, close_timeout_ms), false},
		{"heartbeat_timeout", offsetof(struct rdzv_conf, heartbeat_timeout_ms), true},
		{"keep_alive_interval", offsetof(struct rdzv_conf, keep_alive_interval_ms), true},
		{"read_timeout", offsetof(struct rdzv_conf, read_timeout_ms), true},
		{"timeout", offsetof(struct rdzv_conf, timeout_ms), true},
		{"exit_barrier_timeout", offsetof(struct rdzv_conf, exit_barrier_timeout_ms),
		 false},
	};
	size_t i;
	int64_t ms;

	for (i = 0; i < sizeof(secs) / sizeof(secs[0]); i++) {
		if (strcmp(k, secs[i].name) != 0)
			continue;
		if (util_parse_seconds_ms(v, &ms) != 0 || (secs[i].positive && ms <= 0)) {
			snprintf(err, errlen,
				 "--rdzv-conf %s=%.100s: expected a number of seconds %s " UTIL_STR(
					 UTIL_SECONDS_MAX),
				 k, v, secs[i].positive ? "above 0, at most" : "from 0 to");
			return -EINVAL;
		}
		*(int64_t *)((char *)c + secs[i].off) = ms;
		if (secs[i].off == offsetof(struct rdzv_conf, heartbeat_timeout_ms))
			c->heartbeat_timeout_given = true;
		if (secs[i].off == offsetof(struct rdzv_conf, keep_alive_interval_ms))
			c->keep_alive_interval_given = true;
		return 0;
	}
	if (strcmp(k, "keep_alive_max_attempt") == 0) {
		if (util_parse_int(v, 1, 1000000, &c->keep_alive_max_attempt) != 0) {
			snprintf(err, errlen, "--rdzv-conf %s=%.100s: expected a positive integer",
				 k, v);
			return -EINVAL;
		}
		c->keep_alive_max_attempt_given = true;
		return 0;
	}
	if (strcmp(k, "is_host") == 0) {
		if (parse_bool(v, &c->is_host) != 0) {
			snprintf(err, errlen, "--rdzv-conf %s=%.100s: expected " BOOL_WORDS, k, v);
			return -EINVAL;
		}
		return 0;
	}
	return 1;
}

bool rdzv_conf_has_key(const char *k)
{
	struct rdzv_conf scratch;
	char err[8];

	rdzv_conf_default(&scratch);
	return set_key(&scratch, k, "1", err, sizeof(err)) != 1;
}

/* Note an unknown key once (the list is cut, never overflowed). */
static void note_unknown(struct rdzv_conf *c, const char *k)
{
	size_t n = strlen(c->unknown);

	if (n + strlen(k) + 3 >= sizeof(c->unknown)) {
		if (n + strlen(", ...") < sizeof(c->unknown) && strstr(c->unknown, "...") == NULL)
			strcat(c->unknown, ", ...");
		return;
	}
	snprintf(c->unknown + n, sizeof(c->unknown) - n, "%s%s", n > 0 ? ", " : "", k);
}

static void trim(char *s)
{
	size_t n = strlen(s), i = 0;

	while (n > 0 && s[n - 1] == ' ')
		s[--n] = '\0';
	while (s[i] == ' ')
		i++;
	memmove(s, s + i, n - i + 1);
}

static int parse_items(const char *s, struct rdzv_conf *c, char *err, size_t errlen)
{
	char item[256];

	while (s != NULL && *s != '\0') {
		const char *comma = strchr(s, ',');
		size_t len = comma ? (size_t)(comma - s) : strlen(s);
		char *eq;
		int rc;

		if (len >= sizeof(item)) {
			snprintf(err, errlen, "--rdzv-conf: item '%.40s...' is too long", s);
			return -EINVAL;
		}
		memcpy(item, s, len);
		item[len] = '\0';
		eq = strchr(item, '=');
		if (eq == NULL) {
			snprintf(err, errlen, "--rdzv-conf: '%s' is not KEY=VALUE", item);
			return -EINVAL;
		}
		*eq = '\0';
		trim(item);
		trim(eq + 1);
		if (item[0] == '\0' || eq[1] == '\0') {
			snprintf(err, errlen, "--rdzv-conf: '%.*s' is not KEY=VALUE", (int)len, s);
			return -EINVAL;
		}
		rc = set_key(c, item, eq + 1, err, errlen);
		if (rc < 0)
			return rc;
		if (rc > 0)
			note_unknown(c, item);
		s = comma ? comma + 1 : s + len;
	}
	return 0;
}

/* How long a node may go without a heartbeat. torchrun drops a node after
 * keep_alive_max_attempt intervals without one (5 s x 3); ddprun calls that
 * time heartbeat_timeout, and keeps its own 5 s (five beats of 1 s) when
 * none of the three is given. A torchrun config that sets
 * keep_alive_interval=5 then waits 15 s, as torchrun does: the 5 s it
 * waited took every healthy node for lost. */
static int settle_heartbeat(struct rdzv_conf *c, char *err, size_t errlen)
{
	int64_t i = c->keep_alive_interval_ms, n = c->keep_alive_max_attempt;

	if (!c->heartbeat_timeout_given) {
		if (c->keep_alive_interval_given || c->keep_alive_max_attempt_given)
			c->heartbeat_timeout_ms = i * n;
	} else if (c->keep_alive_max_attempt_given && c->heartbeat_timeout_ms != i * n) {
		snprintf(err, errlen,
			 "--rdzv-conf heartbeat_timeout=%g contradicts keep_alive_max_attempt=%d: "
			 "keep_alive_interval (%g s) times keep_alive_max_attempt is %g s; give "
			 "one of heartbeat_timeout and keep_alive_max_attempt",
			 (double)c->heartbeat_timeout_ms / 1000.0, c->keep_alive_max_attempt,
			 (double)i / 1000.0, (double)(i * n) / 1000.0);
		return -EINVAL;
	}
	/* A node that beats every interval is seen beating up to an interval
	 * apart (and late by the store host's sampling): one timeout shorter
	 * than two intervals takes a late beat for a lost node. */
	if (c->heartbeat_timeout_ms >= 2 * i)
		return 0;
	if (c->heartbeat_timeout_given)
		snprintf(err, errlen,
			 "--rdzv-conf heartbeat_timeout=%g is below two keep_alive_intervals (%g s "
			 "each): a healthy node would be taken for lost after one late heartbeat; "
			 "leave heartbeat_timeout out (it is then keep_alive_interval times "
			 "keep_alive_max_attempt, %g s, as in torchrun) or make it at least %g",
			 (double)c->heartbeat_timeout_ms / 1000.0, (double)i / 1000.0,
			 (double)(i * n) / 1000.0, (double)(2 * i) / 1000.0);
	else
		snprintf(err, errlen,
			 "--rdzv-conf keep_alive_max_attempt=%d: a healthy node would be taken for "
			 "lost after one late heartbeat; expected at least 2",
			 c->keep_alive_max_attempt);
	return -EINVAL;
}

int rdzv_conf_parse(const char *s, struct rdzv_conf *c, char *err, size_t errlen)
{
	int rc = parse_items(s, c, err, errlen);

	if (rc == 0)
		rc = settle_heartbeat(c, err, errlen);

	/* The message quotes the item: one line, whatever the item holds. */
	if (rc < 0 && errlen > 0)
		util_one_line(err);
	return rc;
}
