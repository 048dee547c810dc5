/* rdzv_msg: encode and decode the rendezvous values (see rdzv_msg.h). */
#include "rdzv_msg.h"

#include <cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define RDZV_MSG_MAX (64 * 1024) /* no value of ours is longer */

static char *print_free(cJSON *o)
{
	char *s = o ? cJSON_PrintUnformatted(o) : NULL;

	cJSON_Delete(o);
	return s;
}

static cJSON *parse(const void *v, size_t len)
{
	cJSON *o;

	if (v == NULL || len == 0 || len > RDZV_MSG_MAX)
		return NULL;
	o = cJSON_ParseWithLength(v, len);
	if (o != NULL && !cJSON_IsObject(o)) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

static int get_int(const cJSON *o, const char *name, int min, int *out)
{
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);

	if (!cJSON_IsNumber(f) || f->valuedouble < min || f->valuedouble > INT_MAX)
		return -EINVAL;
	*out = (int)f->valuedouble;
	return 0;
}

static int get_str(const cJSON *o, const char *name, char *buf, size_t len)
{
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);

	if (!cJSON_IsString(f) || strlen(f->valuestring) >= len)
		return -EINVAL;
	strcpy(buf, f->valuestring);
	return 0;
}

char *rdzv_node_encode(const struct rdzv_node *n)
{
	cJSON *o = cJSON_CreateObject();

	if (o == NULL)
		return NULL;
	cJSON_AddStringToObject(o, "host", n->host);
	cJSON_AddStringToObject(o, "addr", n->addr);
	cJSON_AddNumberToObject(o, "nproc", n->nproc);
	cJSON_AddNumberToObject(o, "pid", n->pid);
	cJSON_AddNumberToObject(o, "node_rank", n->node_rank);
	cJSON_AddNumberToObject(o, "worker_port", n->worker_port);
	return print_free(o);
}

int rdzv_node_decode(const void *v, size_t len, struct rdzv_node *n)
{
	cJSON *o = parse(v, len);
	int rc = o ? 0 : -EINVAL;

	if (rc == 0)
		rc = get_str(o, "host", n->host, sizeof(n->host));
	if (rc == 0)
		rc = get_str(o, "addr", n->addr, sizeof(n->addr));
	if (rc == 0)
		rc = get_int(o, "nproc", 1, &n->nproc);
	if (rc == 0)
		rc = get_int(o, "pid", 0, &n->pid);
	if (rc == 0)
		rc = get_int(o, "node_rank", 0, &n->node_rank);
	if (rc == 0)
		rc = get_int(o, "worker_port", 0, &n->worker_port);
	if (rc == 0 && n->worker_port > 65535)
		rc = -EINVAL;
	cJSON_Delete(o);
	return rc;
}

char *rdzv_config_encode(const struct rdzv_config *c)
{
	cJSON *o = cJSON_CreateObject();
	char nn[32];

	if (o == NULL)
		return NULL;
	snprintf(nn, sizeof(nn), "%d:%d", c->min_nodes, c->max_nodes);
	cJSON_AddStringToObject(o, "backend", c->backend);
	cJSON_AddStringToObject(o, "nnodes", nn);
	cJSON_AddNumberToObject(o, "max_restarts", c->max_restarts);
	cJSON_AddStringToObject(o, "version", c->version);
	cJSON_AddNumberToObject(o, "node_rank", c->node_rank);
	cJSON_AddStringToObject(o, "host", c->host);
	return print_free(o);
}

int rdzv_config_decode(const void *v, size_t len, struct rdzv_config *c)
{
	cJSON *o = parse(v, len);
	char nn[32];
	int rc = o ? 0 : -EINVAL;

	if (rc == 0)
		rc = get_str(o, "backend", c->backend, sizeof(c->backend));
	if (rc == 0)
		rc = get_str(o, "nnodes", nn, sizeof(nn));
	if (rc == 0 && sscanf(nn, "%d:%d", &c->min_nodes, &c->max_nodes) != 2)
		rc = -EINVAL;
	if (rc == 0)
		rc = get_int(o, "max_restarts", 0, &c->max_restarts);
	if (rc == 0)
		rc = get_str(o, "version", c->version, sizeof(c->version));
	if (rc == 0)
		rc = get_int(o, "node_rank", -1, &c->node_rank);
	if (rc == 0)
		rc = get_str(o, "host", c->host, sizeof(c->host));
	cJSON_Delete(o);
	return rc;
}

/* "node 1 (host a)", or "host a" when ranks come by arrival. */
static void who(const struct rdzv_config *c, char *buf, size_t len)
{
	if (c->node_rank >= 0)
		snprintf(buf, len, "node %d (host %s)", c->node_rank, c->host);
	else
		snprintf(buf, len, "host %s", c->host);
}

int rdzv_config_diff(const struct rdzv_config *mine, const struct rdzv_config *theirs, char *msg,
		     size_t len)
{
	char a[64], b[64], wa[RDZV_HOST_MAX + 32], wb[RDZV_HOST_MAX + 32];
	const char *what;

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
	} else if (strcmp(mine->version, theirs->version) != 0) {
		what = "ddprun version";
		snprintf(a, sizeof(a), "%s", mine->version);
		snprintf(b, sizeof(b), "%s", theirs->version);
	} else {
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

int rdzv_closed_members(const void *v, size_t len, int *arrivals, int n)
{
	const char *p = v, *end = p + len, *colon;
	int i = 0, a, b, last = 0;
	char buf[24];

	colon = v != NULL && len <= RDZV_MSG_MAX ? memchr(p, ':', len) : NULL;
	if (colon == NULL) { /* "<N>": arrivals 1..N */
		for (i = 0; i < n; i++)
			arrivals[i] = i + 1;
		return 0;
	}
	for (p = colon + 1; p < end && i <= n;) {
		const char *q = p, *dash;
		size_t l;

		while (q < end && *q != ',')
			q++;
		dash = memchr(p, '-', (size_t)(q - p));
		l = (size_t)((dash ? dash : q) - p);
		if (l == 0 || l >= sizeof(buf))
			return -EINVAL;
		memcpy(buf, p, l);
		buf[l] = '\0';
		if (util_parse_int(buf, last + 1, INT_MAX, &a) != 0)
			return -EINVAL;
		b = a;
		if (dash != NULL) {
			l = (size_t)(q - dash - 1);
			if (l == 0 || l >= sizeof(buf))
				return -EINVAL;
			memcpy(buf, dash + 1, l);
			buf[l] = '\0';
			if (util_parse_int(buf, a, INT_MAX, &b) != 0)
				return -EINVAL;
		}
		for (; a <= b && i < n; a++)
			arrivals[i++] = a;
		if (a <= b)
			return -EINVAL; /* more arrivals than N */
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
	cJSON *o = cJSON_CreateObject();

	if (o == NULL)
		return NULL;
	cJSON_AddNumberToObject(o, "restart_count", restart_count);
	return print_free(o);
}

int rdzv_meta_decode(const void *v, size_t len, int *restart_count)
{
	cJSON *o = parse(v, len);
	int rc = o ? get_int(o, "restart_count", 0, restart_count) : -EINVAL;

	cJSON_Delete(o);
	return rc;
}

char *rdzv_end_encode(const struct rdzv_end *e)
{
	cJSON *o, *f;
	char *s;
	size_t n;

	switch (e->kind) {
	case RDZV_END_OK:
		return strdup("ok");
	case RDZV_END_REJOIN:
		return strdup("rejoin");
	case RDZV_END_LOST:
		n = strlen(e->why) + 32;
		s = malloc(n);
		if (s != NULL)
			snprintf(s, n, "lost:%d:%s", e->node, e->why);
		return s;
	case RDZV_END_FAIL:
		break;
	}
	o = cJSON_CreateObject();
	f = o ? cJSON_AddObjectToObject(o, "fail") : NULL;
	if (f == NULL) {
		cJSON_Delete(o);
		return NULL;
	}
	cJSON_AddNumberToObject(f, "node", e->node);
	cJSON_AddStringToObject(f, "host", e->host);
	cJSON_AddNumberToObject(f, "rank", e->rank);
	cJSON_AddNumberToObject(f, "local_rank", e->local_rank);
	cJSON_AddNumberToObject(f, "pid", e->pid);
	cJSON_AddNumberToObject(f, "status", e->status);
	cJSON_AddNumberToObject(f, "signal", e->signal);
	cJSON_AddBoolToObject(f, "final", e->final);
	cJSON_AddNumberToObject(f, "time_us", (double)e->time_us);
	if (e->caused_by[0] != '\0')
		cJSON_AddStringToObject(f, "caused_by", e->caused_by);
	return print_free(o);
}

static int decode_fail(const cJSON *f, struct rdzv_end *e)
{
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(f, "time_us");
	const cJSON *fin = cJSON_GetObjectItemCaseSensitive(f, "final");
	int rc = 0;

	if (!cJSON_IsObject(f) || !cJSON_IsNumber(t) || !cJSON_IsBool(fin))
		return -EINVAL;
	e->time_us = (int64_t)t->valuedouble;
	if (cJSON_GetObjectItemCaseSensitive(f, "caused_by") != NULL)
		rc = get_str(f, "caused_by", e->caused_by, sizeof(e->caused_by));
	e->final = cJSON_IsTrue(fin);
	if (rc == 0)
		rc = get_int(f, "node", 0, &e->node);
	if (rc == 0)
		rc = get_str(f, "host", e->host, sizeof(e->host));
	if (rc == 0)
		rc = get_int(f, "rank", -1, &e->rank);
	if (rc == 0)
		rc = get_int(f, "local_rank", -1, &e->local_rank);
	if (rc == 0)
		rc = get_int(f, "pid", 0, &e->pid);
	if (rc == 0)
		rc = get_int(f, "status", 1, &e->status);
	if (rc == 0)
		rc = get_int(f, "signal", 0, &e->signal);
	if (rc == 0 && e->status > 255)
		rc = -EINVAL;
	return rc;
}

int rdzv_end_decode(const void *v, size_t len, struct rdzv_end *e)
{
	const char *p = v;
	cJSON *o;
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
		return 0;
	}
	if (len > 5 && memcmp(p, "lost:", 5) == 0) {
		const char *colon = memchr(p + 5, ':', len - 5);
		char num[16];

		if (colon == NULL || colon == p + 5 || (size_t)(colon - p - 5) >= sizeof(num))
			return -EINVAL;
		memcpy(num, p + 5, (size_t)(colon - p - 5));
		num[colon - p - 5] = '\0';
		if (util_parse_int(num, 0, INT_MAX, &e->node) != 0)
			return -EINVAL;
		snprintf(e->why, sizeof(e->why), "%.*s", (int)(len - (size_t)(colon + 1 - p)),
			 colon + 1);
		e->kind = RDZV_END_LOST;
		return 0;
	}
	o = parse(v, len);
	if (o == NULL)
		return -EINVAL;
	rc = decode_fail(cJSON_GetObjectItemCaseSensitive(o, "fail"), e);
	if (rc == 0)
		e->kind = RDZV_END_FAIL;
	cJSON_Delete(o);
	return rc;
}
