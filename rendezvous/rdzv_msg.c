/* rdzv_msg: encode and decode the rendezvous values (see rdzv_msg.h). */
#include "rdzv_msg.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv_codec.h"
#include "util.h"

/* Each JSON value is a table of its fields, in the order they are written. */
static const struct rdzv_field node_fields[] = {
	RDZV_STR(struct rdzv_node, host, 0),
	RDZV_STR(struct rdzv_node, addr, 0),
	RDZV_INT(struct rdzv_node, nproc, 1, INT_MAX),
	RDZV_INT(struct rdzv_node, pid, 0, INT_MAX),
	RDZV_INT(struct rdzv_node, node_rank, 0, INT_MAX),
	RDZV_INT(struct rdzv_node, worker_port, 0, UTIL_PORT_MAX),
	RDZV_STR(struct rdzv_node, role, RDZV_F_OPTIONAL),
	RDZV_STR(struct rdzv_node, protocol, RDZV_F_OPTIONAL),
};
static const struct rdzv_msgdef node_msg = RDZV_MSGDEF(NULL, node_fields);

static const struct rdzv_field config_fields[] = {
	RDZV_STR(struct rdzv_config, backend, 0),
	RDZV_INT_PAIR("nnodes", struct rdzv_config, min_nodes, max_nodes, 1, INT_MAX),
	RDZV_INT(struct rdzv_config, max_restarts, 0, INT_MAX),
	RDZV_STR(struct rdzv_config, version, 0),
	RDZV_INT(struct rdzv_config, node_rank, -1, INT_MAX),
	RDZV_STR(struct rdzv_config, host, 0),
	RDZV_STR(struct rdzv_config, hang_timeout, RDZV_F_OPTIONAL),
	RDZV_STR(struct rdzv_config, shutdown_timeout, RDZV_F_OPTIONAL),
	RDZV_STR(struct rdzv_config, keep_alive_interval, RDZV_F_OPTIONAL),
	RDZV_STR(struct rdzv_config, heartbeat_timeout, RDZV_F_OPTIONAL),
	RDZV_STR(struct rdzv_config, protocol, RDZV_F_OPTIONAL),
};
static const struct rdzv_msgdef config_msg = RDZV_MSGDEF(NULL, config_fields);

struct meta {
	int restart_count;
};
static const struct rdzv_field meta_fields[] = {RDZV_INT(struct meta, restart_count, 0, INT_MAX)};
static const struct rdzv_msgdef meta_msg = RDZV_MSGDEF(NULL, meta_fields);

/* time_us: a double holds integers exactly up to 2^53. */
#define EXACT_MAX ((int64_t)1 << 53)
static const struct rdzv_field fail_fields[] = {
	RDZV_INT(struct rdzv_end, node, 0, INT_MAX),
	RDZV_STR(struct rdzv_end, host, 0),
	RDZV_INT(struct rdzv_end, rank, -1, INT_MAX),
	RDZV_INT(struct rdzv_end, local_rank, -1, INT_MAX),
	RDZV_INT(struct rdzv_end, pid, 0, INT_MAX),
	RDZV_INT(struct rdzv_end, status, 1, 255),
	RDZV_INT(struct rdzv_end, signal, 0, INT_MAX),
	RDZV_BOOL(struct rdzv_end, final),
	RDZV_I64(struct rdzv_end, time_us, -EXACT_MAX, EXACT_MAX),
	RDZV_STR(struct rdzv_end, caused_by, RDZV_F_OPTIONAL),
	RDZV_STR(struct rdzv_end, culprit, RDZV_F_OPTIONAL),
};
static const struct rdzv_msgdef fail_msg = RDZV_MSGDEF("fail", fail_fields);

char *rdzv_node_encode(const struct rdzv_node *n)
{
	return rdzv_codec_encode(&node_msg, n);
}

int rdzv_node_decode(const void *v, size_t len, struct rdzv_node *n)
{
	return rdzv_codec_decode(&node_msg, v, len, n);
}

char *rdzv_config_encode(const struct rdzv_config *c)
{
	return rdzv_codec_encode(&config_msg, c);
}

int rdzv_config_decode(const void *v, size_t len, struct rdzv_config *c)
{
	return rdzv_codec_decode(&config_msg, v, len, c);
}

/* "node 1 (host a)", or "host a" when ranks come by arrival. */
static void who(const struct rdzv_config *c, char *buf, size_t len)
{
	if (c->node_rank >= 0)
		snprintf(buf, len, "node %d (host %s)", c->node_rank, c->host);
	else
		snprintf(buf, len, "host %s", c->host);
}

/* The settings kept as text, in the order a difference is named, with what
 * an empty one means ("" an older ddprun's, or the default). */
static const struct {
	const char *what;
	size_t off;
	const char *empty;
} config_strs[] = {
	{"ddprun version", offsetof(struct rdzv_config, version), ""},
	{"ddprun rendezvous protocol (run the same ddprun build on every node)",
	 offsetof(struct rdzv_config, protocol), "1 (older)"},
	{"--hang-timeout", offsetof(struct rdzv_config, hang_timeout), "off"},
	{"--shutdown-timeout", offsetof(struct rdzv_config, shutdown_timeout), "the default"},
	{"--rdzv-conf keep_alive_interval", offsetof(struct rdzv_config, keep_alive_interval),
	 "the default"},
	{"--rdzv-conf heartbeat_timeout", offsetof(struct rdzv_config, heartbeat_timeout),
	 "the default"},
};

int rdzv_config_diff(const struct rdzv_config *mine, const struct rdzv_config *theirs, char *msg,
		     size_t len)
{
	char a[64], b[64], wa[RDZV_HOST_MAX + 32], wb[RDZV_HOST_MAX + 32];
	const char *what = NULL;
	size_t i;

	if (strcmp(mine->backend, theirs->backend) != 0) {
		what = "--rdzv-backend";
		snprintf(a, sizeof(a), "%s", mine->backend);
		snprintf(b, sizeof(b), "%s", theirs->backend);
	} else if (mine->min_nodes != theirs->min_nodes || mine->max_nodes != theirs->max_nodes) {
		what = "--nnodes";
		if (mine->min_nodes == mine->max_nodes)
			snprintf(a, sizeof(a), "%d", mine->min_nodes);
		else
			snprintf(a, sizeof(a), "%d:%d", mine->min_nodes, mine->max_nodes);
		if (theirs->min_nodes == theirs->max_nodes)
			snprintf(b, sizeof(b), "%d", theirs->min_nodes);
		else
			snprintf(b, sizeof(b), "%d:%d", theirs->min_nodes, theirs->max_nodes);
	} else if (mine->max_restarts != theirs->max_restarts) {
		what = "--max-restarts";
		snprintf(a, sizeof(a), "%d", mine->max_restarts);
		snprintf(b, sizeof(b), "%d", theirs->max_restarts);
	} else {
		for (i = 0; what == NULL && i < sizeof(config_strs) / sizeof(config_strs[0]); i++) {
			const char *m = (const char *)mine + config_strs[i].off;
			const char *t = (const char *)theirs + config_strs[i].off;

			if (strcmp(m, t) == 0)
				continue;
			what = config_strs[i].what;
			snprintf(a, sizeof(a), "%s", m[0] ? m : config_strs[i].empty);
			snprintf(b, sizeof(b), "%s", t[0] ? t : config_strs[i].empty);
		}
		if (what == NULL)
			return 0;
	}
	who(mine, wa, sizeof(wa));
	who(theirs, wb, sizeof(wb));
	snprintf(msg, len, "%s differs: %s on %s, %s on %s", what, a, wa, b, wb);
	return 1;
}

int rdzv_closed_decode(const void *v, size_t len, int *n, int *status, char *msg, size_t msglen)
{
	char buf[32];
	const char *p = v, *colon;

	if (v == NULL || len == 0 || len > RDZV_MSG_MAX)
		return -EINVAL;
	if (len > 6 && memcmp(p, "error:", 6) == 0) {
		colon = memchr(p + 6, ':', len - 6);
		if (colon == NULL || (size_t)(colon - p - 6) >= sizeof(buf))
			return -EINVAL;
		memcpy(buf, p + 6, (size_t)(colon - p - 6));
		buf[colon - p - 6] = '\0';
		if (util_parse_int(buf, 0, 255, status) != 0)
			return -EINVAL;
		snprintf(msg, msglen, "%.*s", (int)(len - (size_t)(colon + 1 - p)), colon + 1);
		return 1;
	}
	colon = memchr(p, ':', len); /* "<N>:<arrivals>": the count is first */
	if (colon != NULL)
		len = (size_t)(colon - p);
	if (len >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, p, len);
	buf[len] = '\0';
	return util_parse_int(buf, 1, INT_MAX, n) == 0 ? 0 : -EINVAL;
}

/* Append sep and "a" or "a-b". */
static int put_range(char *s, size_t cap, size_t *at, char sep, int a, int b)
{
	int w = a == b ? snprintf(s + *at, cap - *at, "%c%d", sep, a)
		       : snprintf(s + *at, cap - *at, "%c%d-%d", sep, a, b);

	if (w < 0 || (size_t)w >= cap - *at)
		return -ENAMETOOLONG;
	*at += (size_t)w;
	return 0;
}

char *rdzv_closed_encode(const int *arrivals, int n)
{
	size_t cap = RDZV_MSG_MAX, at;
	char *s = malloc(cap);
	int i, j;

	if (s == NULL)
		return NULL;
	at = (size_t)snprintf(s, cap, "%d", n);
	for (i = 0; i < n && arrivals[i] == i + 1; i++)
		;
	if (i == n)
		return s;
	for (i = 0; i < n; i = j + 1) {
		for (j = i; j + 1 < n && arrivals[j + 1] == arrivals[j] + 1; j++)
			;
		if (put_range(s, cap, &at, i == 0 ? ':' : ',', arrivals[i], arrivals[j]) != 0) {
			free(s);
			return NULL;
		}
	}
	return s;
}

/* One number of a range, the text p[0..l), in [lo, INT_MAX]. */
static int arrival(const char *p, size_t l, int64_t lo, int64_t *out)
{
	char buf[24];

	if (l == 0 || l >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, p, l);
	buf[l] = '\0';
	return util_parse_i64(buf, lo, INT_MAX, out) == 0 ? 0 : -EINVAL;
}

int rdzv_closed_members(const void *v, size_t len, int *arrivals, int n)
{
	const char *p = v, *end = p + len, *colon;
	int i = 0;
	/* 64 bits: the next arrival after INT_MAX must not wrap. */
	int64_t a, b, last = 0;

	colon = v != NULL && len <= RDZV_MSG_MAX ? memchr(p, ':', len) : NULL;
	if (colon == NULL) { /* "<N>": arrivals 1..N */
		for (i = 0; i < n; i++)
			arrivals[i] = i + 1;
		return 0;
	}
	for (p = colon + 1; p < end && i <= n;) {
		const char *q = p, *dash;

		while (q < end && *q != ',')
			q++;
		dash = memchr(p, '-', (size_t)(q - p));
		if (arrival(p, (size_t)((dash ? dash : q) - p), last + 1, &a) != 0)
			return -EINVAL;
		b = a;
		if (dash != NULL && arrival(dash + 1, (size_t)(q - dash - 1), a, &b) != 0)
			return -EINVAL;
		if (b - a >= (int64_t)n - i)
			return -EINVAL; /* more arrivals than N */
		for (; a <= b; a++)
			arrivals[i++] = (int)a;
		last = b;
		p = q < end ? q + 1 : q;
	}
	return i == n ? 0 : -EINVAL;
}

char *rdzv_closed_error(int status, const char *msg)
{
	size_t n = strlen(msg) + 24;
	char *s = malloc(n);

	if (s != NULL)
		snprintf(s, n, "error:%d:%s", status, msg);
	return s;
}

char *rdzv_meta_encode(int restart_count)
{
	struct meta m = {restart_count};

	return rdzv_codec_encode(&meta_msg, &m);
}

int rdzv_meta_decode(const void *v, size_t len, int *restart_count)
{
	struct meta m;
	int rc = rdzv_codec_decode(&meta_msg, v, len, &m);

	if (rc == 0)
		*restart_count = m.restart_count;
	return rc;
}

char *rdzv_end_encode(const struct rdzv_end *e)
{
	char *s;
	size_t n;

	switch (e->kind) {
	case RDZV_END_OK:
		return strdup("ok");
	case RDZV_END_REJOIN:
		if (e->node < 0)
			return strdup("rejoin");
		break;
	case RDZV_END_LOST:
		break;
	case RDZV_END_FAIL:
	default:
		return rdzv_codec_encode(&fail_msg, e);
	}
	/* "<kind>:<R>:<why>" */
	n = strlen(e->why) + 32;
	s = malloc(n);
	if (s != NULL)
		snprintf(s, n, "%s:%d:%s", e->kind == RDZV_END_LOST ? "lost" : "rejoin", e->node,
			 e->why);
	return s;
}

/* "<R>:<why>" (len bytes at p) into e->node and e->why. */
static int node_why_decode(const char *p, size_t len, struct rdzv_end *e)
{
	const char *colon = memchr(p, ':', len);
	char num[16];

	if (colon == NULL || colon == p || (size_t)(colon - p) >= sizeof(num))
		return -EINVAL;
	memcpy(num, p, (size_t)(colon - p));
	num[colon - p] = '\0';
	if (util_parse_int(num, 0, INT_MAX, &e->node) != 0)
		return -EINVAL;
	snprintf(e->why, sizeof(e->why), "%.*s", (int)(len - (size_t)(colon + 1 - p)), colon + 1);
	return 0;
}

int rdzv_end_decode(const void *v, size_t len, struct rdzv_end *e)
{
	const char *p = v;
	int rc;

	memset(e, 0, sizeof(*e));
	e->rank = e->local_rank = -1;
	if (v == NULL || len == 0 || len > RDZV_MSG_MAX)
		return -EINVAL;
	if (len == 2 && memcmp(p, "ok", 2) == 0) {
		e->kind = RDZV_END_OK;
		return 0;
	}
	if (len == 6 && memcmp(p, "rejoin", 6) == 0) {
		e->kind = RDZV_END_REJOIN;
		e->node = -1;
		return 0;
	}
	if (len > 7 && memcmp(p, "rejoin:", 7) == 0) {
		e->kind = RDZV_END_REJOIN;
		return node_why_decode(p + 7, len - 7, e);
	}
	if (len > 5 && memcmp(p, "lost:", 5) == 0) {
		e->kind = RDZV_END_LOST;
		return node_why_decode(p + 5, len - 5, e);
	}
	rc = rdzv_codec_decode(&fail_msg, v, len, e);
	if (rc == 0)
		e->kind = RDZV_END_FAIL;
	return rc;
}
