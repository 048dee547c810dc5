/* ddpstore status: what a ddprun rendezvous on this store looks like now --
 * per run id its settings, its current round (open: who joined, who is
 * missing; closed: the nodes by rank, their hosts, heartbeats' ages), its
 * attempt and whether the job ended. It reads the keys that rdzv_keys.h
 * lays out (ddpstore(1) lists them) and changes nothing. */
#include "ddpstore.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rdzv_keys.h"
#include "rdzv_msg.h"
#include "store_client.h"
#include "util.h"

#define STATUS_MAX_RUNS	 64
#define STATUS_MAX_NODES 4096

static int64_t epoch_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The value of key as a string (NULL when absent, or on error with *err). */
static char *get_str(struct store_client *c, const char *key, int *err)
{
	void *v = NULL;
	size_t len = 0;
	char *s;
	int rc = store_client_try_get(c, key, &v, &len);

	if (rc == -ENOENT)
		return NULL;
	if (rc < 0) {
		*err = rc;
		return NULL;
	}
	s = realloc(v, len + 1);
	if (s == NULL) {
		free(v);
		*err = -ENOMEM;
		return NULL;
	}
	s[len] = '\0';
	return s;
}

static char *get_job(struct store_client *c, const char *id, const char *leaf, int *err)
{
	char key[RDZV_RUN_ID_MAX + 96];

	snprintf(key, sizeof(key), RDZV_KEY_ROOT "/%s/%s", id, leaf);
	return get_str(c, key, err);
}

static char *get_round(struct store_client *c, const char *id, int r, int *err, const char *fmt,
		       ...) __attribute__((format(printf, 5, 6)));
static char *get_round(struct store_client *c, const char *id, int r, int *err, const char *fmt,
		       ...)
{
	char tail[96];
	va_list ap;
	int n = snprintf(tail, sizeof(tail), RDZV_KEY_ROUND_FMT, r);

	va_start(ap, fmt);
	vsnprintf(tail + n, sizeof(tail) - (size_t)n, fmt, ap);
	va_end(ap);
	return get_job(c, id, tail, err);
}

static int int_of(const char *s, int dflt)
{
	int v;

	return s != NULL && util_parse_int(s, 0, 1 << 30, &v) == 0 ? v : dflt;
}

static void say_end(const char *v)
{
	struct rdzv_end e;

	if (rdzv_end_decode(v, strlen(v), &e) != 0)
		printf("'%s' (malformed)", v);
	else if (e.kind == RDZV_END_OK)
		printf("ok (every node finished)");
	else if (e.kind == RDZV_END_REJOIN && e.node < 0)
		printf("rejoin (a node waited to join)");
	else if (e.kind == RDZV_END_REJOIN)
		printf("rejoin (node %d lost before the round started: %s)", e.node, e.why);
	else if (e.kind == RDZV_END_LOST)
		printf("node %d lost (%s)", e.node, e.why);
	else if (e.rank >= 0)
		printf("rank %d (local rank %d) on node %d (host %s) failed with exit status %d",
		       e.rank, e.local_rank, e.node, e.host, e.status);
	else if (e.signal > 0)
		printf("node %d (host %s) got signal %d", e.node, e.host, e.signal);
	else
		printf("node %d (host %s) failed (exit status %d)", e.node, e.host, e.status);
}

static void say_node(const struct rdzv_node *n)
{
	printf("host %s, addr %s, %d process%s, pid %d", n->host, n->addr, n->nproc,
	       n->nproc == 1 ? "" : "es", n->pid);
}

/* The nodes of a closed round, by rank, with their heartbeats. */
static int closed_round(struct store_client *c, const char *id, int r, const char *closed,
			bool dynamic)
{
	int n = 0, st = 0, i, err = 0, *arr;
	char msg[600];
	int rc = rdzv_closed_decode(closed, strlen(closed), &n, &st, msg, sizeof(msg));

	if (rc == 1) {
		printf("  round %d failed to close: %s (exit status %d)\n", r, msg, st);
		return 0;
	}
	if (rc < 0 || n > STATUS_MAX_NODES || (arr = malloc((size_t)n * sizeof(*arr))) == NULL) {
		printf("  round %d: closed value '%s' (malformed)\n", r, closed);
		return 0;
	}
	if (rdzv_closed_members(closed, strlen(closed), arr, n) != 0)
		for (i = 0; i < n; i++)
			arr[i] = i + 1;
	printf("  round %d: closed with %d node%s\n", r, n, n == 1 ? "" : "s");
	for (i = 0; i < n && err == 0; i++) {
		char *d = get_round(c, id, r, &err, RDZV_R_NODE, dynamic ? arr[i] - 1 : i);
		char *hb = err ? NULL : get_round(c, id, r, &err, RDZV_R_HB, i);
		struct rdzv_node node;
		const char *colon = hb ? strchr(hb, ':') : NULL;
		long long at;

		printf("    node rank %d: ", i);
		if (d != NULL && rdzv_node_decode(d, strlen(d), &node) == 0)
			say_node(&node);
		else
			printf("no descriptor");
		if (hb == NULL)
			printf(", no heartbeat yet\n");
		else if (strcmp(hb, "done") == 0)
			printf(", done (its workers finished)\n");
		else if (colon != NULL && sscanf(colon + 1, "%lld", &at) == 1)
			printf(", heartbeat %.1f s ago\n", (double)(epoch_ms() - at) / 1000.0);
		else
			printf(", heartbeat '%s'\n", hb);
		free(d);
		free(hb);
	}
	free(arr);
	return err;
}

/* An open round: who joined (and left), who is missing. */
static int open_round(struct store_client *c, const char *id, int r, int count,
		      const struct rdzv_config *cfg, bool dynamic)
{
	int n = dynamic ? count : cfg->max_nodes, i, err = 0, joined = 0;

	if (n > STATUS_MAX_NODES)
		n = STATUS_MAX_NODES;
	printf("  round %d: open, waiting for nodes (--nnodes %d:%d)\n", r, cfg->min_nodes,
	       cfg->max_nodes);
	for (i = 0; i < n && err == 0; i++) {
		char *d = get_round(c, id, r, &err, RDZV_R_NODE, i);
		char *gone = err || !dynamic ? NULL : get_round(c, id, r, &err, RDZV_R_GONE, i);
		struct rdzv_node node;

		if (d == NULL || rdzv_node_decode(d, strlen(d), &node) != 0) {
			if (!dynamic)
				printf("    node rank %d: missing\n", i);
		} else {
			if (dynamic)
				printf("    arrival %d: ", i + 1);
			else
				printf("    node rank %d: ", i);
			say_node(&node);
			printf("%s\n", gone ? ", left before the round closed" : ", joined");
			joined += gone == NULL;
		}
		free(d);
		free(gone);
	}
	printf("    %d joined\n", joined);
	return err;
}

static int one_run(struct store_client *c, const char *id)
{
	struct rdzv_config cfg;
	int err = 0, r, count;
	char *config = get_job(c, id, RDZV_KEY_CONFIG, &err);
	char *round = err ? NULL : get_job(c, id, RDZV_KEY_ROUND, &err);
	char *ended = err ? NULL : get_job(c, id, RDZV_KEY_ENDED, &err);
	char *closed = NULL, *meta = NULL, *end = NULL, *cnt = NULL;
	bool dynamic;

	if (err != 0)
		goto out;
	if (config == NULL || rdzv_config_decode(config, strlen(config), &cfg) != 0) {
		printf("run id %s: %s\n", id,
		       config == NULL ? "no rendezvous on this store" : "malformed settings");
		err = config == NULL ? -ENOENT : 0;
		goto out;
	}
	dynamic = strcmp(cfg.backend, "c10d") == 0;
	printf("run id %s: --rdzv-backend %s, --nnodes %d:%d, --max-restarts %d, ddprun %s "
	       "(settings from host %s)\n",
	       id, cfg.backend, cfg.min_nodes, cfg.max_nodes, cfg.max_restarts, cfg.version,
	       cfg.host);
	r = int_of(ended ? ended : round, 0);
	cnt = get_round(c, id, r, &err, RDZV_R_COUNT);
	closed = err ? NULL : get_round(c, id, r, &err, RDZV_R_CLOSED);
	meta = err ? NULL : get_round(c, id, r, &err, RDZV_R_META);
	end = err ? NULL : get_round(c, id, r, &err, RDZV_R_END);
	if (err != 0)
		goto out;
	count = int_of(cnt, 0);
	{
		int attempt = 0;

		if (meta != NULL)
			rdzv_meta_decode(meta, strlen(meta), &attempt);
		printf("  attempt: %d (TORCHELASTIC_RESTART_COUNT of round %d)\n", attempt, r);
	}
	err = closed != NULL ? closed_round(c, id, r, closed, dynamic)
			     : open_round(c, id, r, count, &cfg, dynamic);
	if (err != 0)
		goto out;
	printf("  round %d's end: ", r);
	if (end != NULL)
		say_end(end);
	else
		printf(closed != NULL ? "none yet (running)" : "none yet");
	if (ended != NULL)
		printf("\n  job: ended in round %d\n", r);
	else
		printf("\n  job: not ended\n");
out:
	free(config);
	free(round);
	free(ended);
	free(cnt);
	free(closed);
	free(meta);
	free(end);
	return err;
}

int ddpstore_status(struct store_client *c, const struct ddpstore_opts *o, char **a, int n)
{
	char ids[STATUS_MAX_RUNS][RDZV_RUN_ID_MAX];
	int nids = 0, err = 0, i, j, total, first, missing = 0;

	store_client_set_prefix(c, NULL); /* the layout's keys are absolute */
	if (o->rdzv_id != NULL) {
		snprintf(ids[nids++], sizeof(ids[0]), "%s", o->rdzv_id);
	} else {
		char *v = get_str(c, RDZV_KEY_ROOT "/" RDZV_KEY_RUNS_N, &err);

		total = int_of(v, 0);
		free(v);
		first = total > STATUS_MAX_RUNS ? total - STATUS_MAX_RUNS + 1 : 1;
		for (i = first; i <= total && err == 0; i++) {
			char key[64], *id;

			snprintf(key, sizeof(key), RDZV_KEY_ROOT "/" RDZV_KEY_RUNS_FMT, i);
			id = get_str(c, key, &err);
			for (j = 0; id != NULL && j < nids && strcmp(ids[j], id) != 0; j++)
				;
			if (id != NULL && j == nids && strlen(id) < sizeof(ids[0]))
				snprintf(ids[nids++], sizeof(ids[0]), "%s", id);
			free(id);
		}
		if (err == 0 && nids == 0) {
			printf("no ddprun rendezvous on this store\n");
			return EXIT_NOT_FOUND;
		}
	}
	for (i = 0; i < nids && err == 0; i++) {
		err = one_run(c, ids[i]);
		if (err == -ENOENT) {
			missing++;
			err = 0;
		}
	}
	if (err != 0) {
		ddpstore_err("status: %s", store_strerror(err));
		return err == -ETIMEDOUT ? EXIT_TIMEOUT : EXIT_CONN;
	}
	return missing == nids ? EXIT_NOT_FOUND : EXIT_OK;
}
