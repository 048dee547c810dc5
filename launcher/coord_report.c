/* coord_report: after a failure that ends the job, each node publishes its
 * local failures (r<r>/failures/<rank>, a JSON list of torchelastic report
 * entries with their host) and prints them in torchrun's layout; the node of
 * rank 0 waits (bounded) for every other node's list and prints the combined
 * summary instead, root cause (the round's end) first. */
#include "coord_int.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_async.h"

/* Extra seconds the report waits beyond the others' shutdown timeout. */
#define REPORT_SLACK_MS 5000

static char *entries_json(const struct report_entry *e, size_t n, const char *host)
{
	cJSON *list = cJSON_CreateArray();
	size_t i;
	char *s;

	for (i = 0; list != NULL && i < n; i++) {
		cJSON *o = cJSON_CreateObject();

		if (o == NULL)
			break;
		cJSON_AddNumberToObject(o, "rank", e[i].global_rank);
		cJSON_AddNumberToObject(o, "local_rank", e[i].local_rank);
		cJSON_AddNumberToObject(o, "pid", (double)e[i].pid);
		cJSON_AddNumberToObject(o, "exitcode", e[i].exitcode);
		cJSON_AddNumberToObject(o, "time", (double)e[i].timestamp);
		if (e[i].error_file != NULL)
			cJSON_AddStringToObject(o, "error_file", e[i].error_file);
		cJSON_AddStringToObject(o, "message", e[i].message ? e[i].message : "");
		cJSON_AddStringToObject(o, "host", e[i].host ? e[i].host : host);
		cJSON_AddItemToArray(list, o);
	}
	s = list ? cJSON_PrintUnformatted(list) : NULL;
	cJSON_Delete(list);
	return s;
}

static char *dup_str(const cJSON *o, const char *name)
{
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);

	return cJSON_IsString(f) ? strdup(f->valuestring) : NULL;
}

static int num(const cJSON *o, const char *name)
{
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);

	return cJSON_IsNumber(f) ? (int)f->valuedouble : 0;
}

/* Append the entries of one node's list to *e (grown); the index of the
 * entry for global rank root_rank in *root when it is there. */
static void add_entries(const void *v, size_t len, struct report_entry **e, size_t *n,
			int root_rank, size_t *root)
{
	cJSON *list = len > 0 ? cJSON_ParseWithLength(v, len) : NULL;
	const cJSON *o;

	if (!cJSON_IsArray(list)) {
		cJSON_Delete(list);
		return;
	}
	cJSON_ArrayForEach(o, list)
	{
		struct report_entry *grown = realloc(*e, (*n + 1) * sizeof(**e));
		struct report_entry *x;
		const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "time");

		if (grown == NULL || !cJSON_IsObject(o))
			break;
		*e = grown;
		x = &(*e)[*n];
		memset(x, 0, sizeof(*x));
		x->global_rank = num(o, "rank");
		x->local_rank = num(o, "local_rank");
		x->pid = (pid_t)num(o, "pid");
		x->exitcode = num(o, "exitcode");
		x->timestamp = cJSON_IsNumber(t) ? (int64_t)t->valuedouble : 0;
		x->error_file = dup_str(o, "error_file");
		x->message = dup_str(o, "message");
		x->host = dup_str(o, "host");
		if (x->message == NULL)
			x->message = strdup("");
		if (x->message == NULL) {
			report_entry_free(x);
			break;
		}
		if (x->global_rank == root_rank)
			*root = *n;
		(*n)++;
	}
	cJSON_Delete(list);
}

static void print_combined(struct coord *c, size_t n, const void *const *vals, const size_t *lens)
{
	struct report_entry *e = NULL;
	size_t ne = 0, i, root = (size_t)-1, local;
	const struct report_entry *mine = agent_failures(c->agent, &local);
	int root_rank = c->end.kind == RDZV_END_FAIL ? c->end.rank : -1;

	for (i = 0; i < n; i++) {
		if ((int)i == c->rank) {
			char *own = entries_json(mine, local, c->host);

			if (own != NULL)
				add_entries(own, strlen(own), &e, &ne,
					    c->end.node == c->rank ? root_rank : -1, &root);
			free(own);
			continue;
		}
		add_entries(vals[i], lens[i], &e, &ne, c->end.node == (int)i ? root_rank : -1,
			    &root);
	}
	if (ne > 0)
		agent_report(c->agent, e, ne, root < ne ? root : report_root_cause(e, ne));
	for (i = 0; i < ne; i++)
		report_entry_free(&e[i]);
	free(e);
}

static void on_collected(int status, size_t n, const void *const *vals, const size_t *lens,
			 void *arg)
{
	struct coord *c = arg;

	if (c->phase != CP_REPORT)
		return;
	if (status == 0 && n == (size_t)c->nnodes)
		print_combined(c, n, vals, lens);
	coord_leave(c);
}

/* Keys r<r>/failures/<i> for every node. */
static const char **failure_keys(struct coord *c)
{
	return coord_keys(c, NULL, (size_t)c->nnodes, "failures/%zu");
}

static void on_waited(int status, void *arg)
{
	struct coord *c = arg;
	const char **keys;

	if (c->phase != CP_REPORT)
		return;
	/* Whatever arrived in time (a missing list reads as empty). */
	keys = failure_keys(c);
	if (keys == NULL ||
	    store_async_multi_get(c->W, keys, (size_t)c->nnodes, on_collected, c) != 0)
		coord_leave(c);
	free(keys);
}

void coord_publish_failures(struct coord *c)
{
	size_t n;
	const struct report_entry *mine = agent_failures(c->agent, &n);
	char key[64], *v = entries_json(mine, n, c->host);

	if (v != NULL && c->a_up && c->in_round)
		store_async_set(c->A, coord_key(c, key, sizeof(key), "failures/%d", c->rank), v,
				strlen(v), NULL, NULL);
	free(v);
}

void coord_report(struct coord *c)
{
	size_t i, k = 0;
	const char **keys, **wait;

	coord_publish_failures(c);
	if (c->rank != 0 || !c->w_up || c->nnodes < 2) {
		agent_report(c->agent, NULL, 0, 0);
		coord_leave(c);
		return;
	}
	/* Rank 0: every other node's list, but a lost node's. */
	keys = failure_keys(c);
	wait = keys ? malloc((size_t)c->nnodes * sizeof(*wait)) : NULL;
	for (i = 0; wait != NULL && i < (size_t)c->nnodes; i++)
		if ((int)i != c->rank && !(c->end.kind == RDZV_END_LOST && c->end.node == (int)i))
			wait[k++] = keys[i];
	if (wait == NULL || k == 0 ||
	    store_async_wait(c->W, wait, k, c->o->shutdown_timeout_ms + REPORT_SLACK_MS, on_waited,
			     c) != 0)
		on_waited(0, c);
	free(wait);
	free(keys);
}
