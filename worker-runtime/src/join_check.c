/* join_check: the pure half of the init join (see join.h): the record each
 * rank publishes, and the checks that turn a set of records into either
 * "consistent" or one sentence naming the ranks that disagree. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "join.h"
#include "util.h"

#ifndef DDP_VERSION
#define DDP_VERSION "unknown"
#endif

#define MAX_GROUPS 16 /* distinct shared beliefs told apart; more are "others" */
#define MAX_ITEMS  12 /* ranks or ranges spelled out in one list */

void ddpi_join_rec_init(struct ddpi_join_rec *r, const struct ddp_env *env, enum ddp_backend be)
{
	memset(r, 0, sizeof(*r));
	r->rank = env->rank;
	r->world = env->world;
	r->local_rank = env->local_rank;
	r->local_world = env->local_world;
	r->node = env->node;
	r->nnodes = env->nnodes;
	snprintf(r->backend, sizeof(r->backend), "%s", ddp_backend_name(be));
	snprintf(r->version, sizeof(r->version), "%s", DDP_VERSION);
	r->pid = (int)getpid();
	if (gethostname(r->host, sizeof(r->host)) < 0 || !r->host[0])
		snprintf(r->host, sizeof(r->host), "?");
	r->host[sizeof(r->host) - 1] = '\0';
	/* The line is space-separated: a host name never has spaces, but be sure. */
	for (char *p = r->host; *p; p++)
		if (*p == ' ' || *p == '\n' || *p == '\t')
			*p = '_';
}

int ddpi_join_rec_format(const struct ddpi_join_rec *r, char *buf, size_t len)
{
	int n = snprintf(buf, len, "%d %d %d %d %d %d %s %s %d %s\n", r->rank, r->world,
			 r->local_rank, r->local_world, r->node, r->nnodes, r->backend, r->version,
			 r->pid, r->host);
	return n < 0 || (size_t)n >= len ? -ENOSPC : n;
}

/* The fields split at white space, each checked: the numbers through
 * util_parse_int (sscanf's %d is undefined past INT_MAX, and glibc read
 * "4294967296" as rank 0), the words against their buffers. */
static int parse_line(char *line, struct ddpi_join_rec *r)
{
	static const int lo[6] = {0, 1, 0, 1, 0, 1};
	int *const num[6] = {&r->rank,	      &r->world, &r->local_rank,
			     &r->local_world, &r->node,	 &r->nnodes};
	char *tok[10], *save = NULL, *t;
	int k = 0;

	memset(r, 0, sizeof(*r));
	for (t = strtok_r(line, " \t\r\v\f", &save); t != NULL;
	     t = strtok_r(NULL, " \t\r\v\f", &save))
		if (k++ < 10)
			tok[k - 1] = t;
	if (k != 10)
		return -1;
	for (int i = 0; i < 6; i++)
		if (util_parse_int(tok[i], lo[i], INT_MAX, num[i]) != 0)
			return -1;
	if (util_parse_int(tok[8], INT_MIN, INT_MAX, &r->pid) != 0 ||
	    strlen(tok[6]) >= sizeof(r->backend) || strlen(tok[7]) >= sizeof(r->version) ||
	    strlen(tok[9]) >= sizeof(r->host))
		return -1;
	strcpy(r->backend, tok[6]);
	strcpy(r->version, tok[7]);
	strcpy(r->host, tok[9]);
	return 0;
}

int ddpi_join_parse(const char *text, size_t len, struct ddpi_join_rec **out, size_t *n)
{
	size_t cap = 0, k = 0;
	struct ddpi_join_rec *v = NULL;
	const char *p = text, *end = text + len;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t l = nl ? (size_t)(nl - p) : (size_t)(end - p);
		char line[256];

		if (l == 0) {
			p += 1;
			continue;
		}
		if (k == cap) {
			size_t nc = cap ? cap * 2 : 16;
			struct ddpi_join_rec *nv = realloc(v, nc * sizeof(*v));
			if (!nv) {
				free(v);
				return -ENOMEM;
			}
			v = nv;
			cap = nc;
		}
		if (l >= sizeof(line) || (memcpy(line, p, l), line[l] = '\0', 0) ||
		    parse_line(line, &v[k]) < 0) {
			free(v);
			return ddpi_err(-EPROTO, "malformed entry %zu in the store's join/members",
					k + 1);
		}
		k++;
		p += l + 1;
	}
	*out = v;
	*n = k;
	return 0;
}

int64_t ddpi_join_digest(const struct ddpi_join_rec *r)
{
	char s[128];
	uint64_t h = 1469598103934665603ull; /* FNV-1a */
	int n = snprintf(s, sizeof(s), "%d %d %s %s", r->world, r->nnodes, r->backend, r->version);

	for (int i = 0; i < n && i < (int)sizeof(s); i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
	h ^= h >> DDPI_JOIN_COUNT_BITS;
	h ^= h >> (2 * DDPI_JOIN_COUNT_BITS);
	return (int64_t)(h & DDPI_JOIN_MAX_WORLD);
}

/* ---- rank lists ------------------------------------------------------------------ */

static int cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	return (x > y) - (x < y);
}

void ddpi_join_format_ranks(const int *ranks, size_t n, char *buf, size_t len)
{
	size_t off, items = 0;

	if (!len)
		return;
	off = (size_t)snprintf(buf, len, "%s", n == 1 ? "rank " : "ranks ");
	for (size_t i = 0; i < n && off < len;) {
		size_t j = i;
		while (j + 1 < n && ranks[j + 1] == ranks[j] + 1)
			j++;
		if (items == MAX_ITEMS) {
			snprintf(buf + off, len - off, ", ... (%zu in all)", n);
			return;
		}
		const char *sep = items ? ", " : "";
		if (j - i >= 2) {
			off += (size_t)snprintf(buf + off, len - off, "%s%d-%d", sep, ranks[i],
						ranks[j]);
			i = j + 1;
		} else {
			off += (size_t)snprintf(buf + off, len - off, "%s%d", sep, ranks[i]);
			i++;
		}
		items++;
	}
}

int ddpi_join_missing(const struct ddpi_join_rec *recs, size_t n, int world, char *buf, size_t len)
{
	unsigned char *seen = calloc((size_t)world, 1);
	int *miss = NULL, k = 0;

	if (len)
		buf[0] = '\0';
	if (!seen)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		if (recs[i].rank < world)
			seen[recs[i].rank] = 1;
	for (int r = 0; r < world; r++)
		k += !seen[r];
	if (k && (miss = malloc((size_t)k * sizeof(int)))) {
		int j = 0;
		for (int r = 0; r < world; r++)
			if (!seen[r])
				miss[j++] = r;
		ddpi_join_format_ranks(miss, (size_t)k, buf, len);
	}
	free(miss);
	free(seen);
	return k;
}

/* ---- checks ------------------------------------------------------------------------ */

static int same_beliefs(const struct ddpi_join_rec *a, const struct ddpi_join_rec *b)
{
	return a->world == b->world && a->nnodes == b->nnodes && !strcmp(a->backend, b->backend) &&
	       !strcmp(a->version, b->version);
}

/* "says WORLD_SIZE=8" / "say 4": the first shared belief where a and b differ. */
static void belief_diff(const struct ddpi_join_rec *a, int a_many, const struct ddpi_join_rec *b,
			int b_many, char *x, char *y, size_t len)
{
	const char *sa = a_many ? "say" : "says", *sb = b_many ? "say" : "says";

	if (a->world != b->world) {
		snprintf(x, len, "%s WORLD_SIZE=%d", sa, a->world);
		snprintf(y, len, "%s %d", sb, b->world);
	} else if (a->nnodes != b->nnodes) {
		snprintf(x, len, "%s GROUP_WORLD_SIZE=%d", sa, a->nnodes);
		snprintf(y, len, "%s %d", sb, b->nnodes);
	} else if (strcmp(a->backend, b->backend) != 0) {
		snprintf(x, len, "%s backend=%s", sa, a->backend);
		snprintf(y, len, "%s %s", sb, b->backend);
	} else {
		snprintf(x, len, "%s libddp %s", a_many ? "run" : "runs", a->version);
		snprintf(y, len, "%s %s", b_many ? "run" : "runs", b->version);
	}
}

/* The ranks of the records for which pick(rec, arg) holds, sorted, as text. */
static int ranks_where(const struct ddpi_join_rec *recs, size_t n,
		       int (*pick)(const struct ddpi_join_rec *, const void *), const void *arg,
		       char *buf, size_t len, size_t *count)
{
	int *v = malloc((n ? n : 1) * sizeof(int));
	size_t k = 0;

	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		if (pick(&recs[i], arg))
			v[k++] = recs[i].rank;
	qsort(v, k, sizeof(int), cmp_int);
	ddpi_join_format_ranks(v, k, buf, len);
	free(v);
	*count = k;
	return 0;
}

static int pick_same(const struct ddpi_join_rec *r, const void *arg)
{
	return same_beliefs(r, arg);
}

struct group {
	const struct ddpi_join_rec *rep;
	size_t count;
	int low; /* lowest rank holding it */
};

/* Shared beliefs: group the records, name the minority against the majority. */
static int check_beliefs(const struct ddpi_join_rec *recs, size_t n, char *msg, size_t len)
{
	struct group g[MAX_GROUPS];
	size_t ng = 0, maj = 0, min = SIZE_MAX;
	char a[160], b[160], x[64], y[64];
	size_t ka, kb;

	for (size_t i = 0; i < n; i++) {
		size_t j;
		for (j = 0; j < ng && !same_beliefs(g[j].rep, &recs[i]); j++)
			;
		if (j == ng) {
			if (ng == MAX_GROUPS)
				continue; /* counted among "more ranks disagree" */
			g[ng++] = (struct group){&recs[i], 0, recs[i].rank};
		}
		g[j].count++;
		if (recs[i].rank < g[j].low)
			g[j].low = recs[i].rank;
	}
	if (ng <= 1)
		return 0;
	for (size_t j = 1; j < ng; j++)
		if (g[j].count > g[maj].count ||
		    (g[j].count == g[maj].count && g[j].low < g[maj].low))
			maj = j;
	for (size_t j = 0; j < ng; j++)
		if (j != maj && (min == SIZE_MAX || g[j].low < g[min].low))
			min = j;
	if (ranks_where(recs, n, pick_same, g[min].rep, a, sizeof(a), &ka) < 0 ||
	    ranks_where(recs, n, pick_same, g[maj].rep, b, sizeof(b), &kb) < 0)
		return -ENOMEM;
	belief_diff(g[min].rep, ka > 1, g[maj].rep, kb > 1, x, y, sizeof(x));
	size_t rest = n - ka - kb;
	if (rest)
		snprintf(msg, len, "%s %s, %s %s (and %zu more rank%s)", a, x, b, y, rest,
			 rest > 1 ? "s disagree" : " disagrees");
	else
		snprintf(msg, len, "%s %s, %s %s", a, x, b, y);
	return DDP_EENV;
}

static int cmp_rank(const void *a, const void *b)
{
	const struct ddpi_join_rec *x = a, *y = b;
	return (x->rank > y->rank) - (x->rank < y->rank);
}

static int cmp_node(const void *a, const void *b)
{
	const struct ddpi_join_rec *x = a, *y = b;
	if (x->node != y->node)
		return (x->node > y->node) - (x->node < y->node);
	if (x->local_rank != y->local_rank)
		return (x->local_rank > y->local_rank) - (x->local_rank < y->local_rank);
	return cmp_rank(a, b);
}

static int check_duplicates(struct ddpi_join_rec *v, size_t n, char *msg, size_t len)
{
	qsort(v, n, sizeof(*v), cmp_rank);
	for (size_t i = 0; i + 1 < n; i++) {
		if (v[i].rank != v[i + 1].rank)
			continue;
		size_t k = i + 1;
		while (k < n && v[k].rank == v[i].rank)
			k++;
		if (k - i == 2)
			snprintf(msg, len, "rank %d was started twice (pid %d on %s, pid %d on %s)",
				 v[i].rank, v[i].pid, v[i].host, v[i + 1].pid, v[i + 1].host);
		else
			snprintf(msg, len,
				 "rank %d was started %zu times (pid %d on %s, pid %d on %s, ...)",
				 v[i].rank, k - i, v[i].pid, v[i].host, v[i + 1].pid,
				 v[i + 1].host);
		return DDP_EENV;
	}
	return 0;
}

/* Runs a check that sorts the records on a copy of them. */
static int on_copy(int (*check)(struct ddpi_join_rec *, size_t, char *, size_t),
		   const struct ddpi_join_rec *recs, size_t n, char *msg, size_t len)
{
	struct ddpi_join_rec *v = malloc((n ? n : 1) * sizeof(*v));
	int rc;

	if (!v)
		return -ENOMEM;
	if (n > 0) /* recs may be NULL then (join/members held no line) */
		memcpy(v, recs, n * sizeof(*v));
	rc = check(v, n, msg, len);
	free(v);
	return rc;
}

int ddpi_join_duplicates(const struct ddpi_join_rec *recs, size_t n, char *msg, size_t len)
{
	if (len)
		msg[0] = '\0';
	return on_copy(check_duplicates, recs, n, msg, len);
}

static int pick_node(const struct ddpi_join_rec *r, const void *arg)
{
	return r->node == *(const int *)arg;
}

/* Every node's ranks agree on its size, fill it exactly, and every node of
 * GROUP_WORLD_SIZE is there. v holds one record per rank of the world. */
static int check_nodes(struct ddpi_join_rec *v, size_t n, char *msg, size_t len)
{
	int nnodes = v[0].nnodes, next = 0;
	char a[160];
	size_t k;

	qsort(v, n, sizeof(*v), cmp_node);
	for (size_t i = 0; i < n;) {
		size_t j = i;
		int node = v[i].node;
		if (node != next) {
			snprintf(msg, len, "no rank says GROUP_RANK=%d (GROUP_WORLD_SIZE=%d)", next,
				 nnodes);
			return DDP_EENV;
		}
		while (j < n && v[j].node == node)
			j++;
		for (size_t q = i + 1; q < j; q++) {
			if (v[q].local_world != v[i].local_world) {
				snprintf(msg, len,
					 "GROUP_RANK=%d: rank %d says LOCAL_WORLD_SIZE=%d, rank %d "
					 "says %d",
					 node, v[q].rank, v[q].local_world, v[i].rank,
					 v[i].local_world);
				return DDP_EENV;
			}
			if (v[q].local_rank == v[q - 1].local_rank) {
				snprintf(msg, len,
					 "ranks %d and %d both say GROUP_RANK=%d LOCAL_RANK=%d",
					 v[q - 1].rank, v[q].rank, node, v[q].local_rank);
				return DDP_EENV;
			}
		}
		if (j - i != (size_t)v[i].local_world) {
			if (ranks_where(v, n, pick_node, &node, a, sizeof(a), &k) < 0)
				return -ENOMEM;
			snprintf(msg, len,
				 "GROUP_RANK=%d has %zu rank%s (%s) but LOCAL_WORLD_SIZE=%d", node,
				 k, k > 1 ? "s" : "", a, v[i].local_world);
			return DDP_EENV;
		}
		next++;
		i = j;
	}
	if (next != nnodes) {
		snprintf(msg, len, "no rank says GROUP_RANK=%d (GROUP_WORLD_SIZE=%d)", next,
			 nnodes);
		return DDP_EENV;
	}
	return 0;
}

int ddpi_join_check(const struct ddpi_join_rec *recs, size_t n, int complete, char *msg, size_t len)
{
	int rc;

	if (len)
		msg[0] = '\0';
	if (n == 0)
		return 0;
	/* Twice the same rank first: a stale record of an earlier job with other
	 * beliefs would otherwise pass for a disagreement inside this one. */
	if ((rc = ddpi_join_duplicates(recs, n, msg, len)) != 0 ||
	    (rc = check_beliefs(recs, n, msg, len)) != 0 || !complete)
		return rc;
	return on_copy(check_nodes, recs, n, msg, len);
}
