/* ddpstore_sync: the commands for PyTorch 2.x's newest store operations --
 * `keys [PREFIX]` (LIST_KEYS) and `barrier KEY N` (BARRIER); see ddpstore(1). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddpstore.h"
#include "store_client.h"
#include "util.h"

static int cmp_keys(const void *x, const void *y)
{
	return strcmp(*(char *const *)x, *(char *const *)y);
}

int ddpstore_cmd_keys(struct store_client *c, const struct ddpstore_opts *o, char **a, int n)
{
	const char *want = n > 0 ? a[0] : "";
	size_t i, nk, wl = strlen(want);
	char **keys;
	int rc = store_client_list_keys(c, &keys, &nk);

	(void)o;
	if (rc == -ECONNRESET || rc == -EPIPE) {
		ddpstore_err_unsupported("keys", "LIST_KEYS");
		return EXIT_CONN;
	}
	if (rc < 0) {
		ddpstore_err("keys: %s", store_strerror(rc));
		return ddpstore_exit_for(rc);
	}
	/* Sorted, so that scripts and diffs see the same order every time. */
	if (nk > 1)
		qsort(keys, nk, sizeof(keys[0]), cmp_keys);
	/* A write that fails is said at exit (ddpstore.c), as for every
	 * command that prints through stdio. */
	for (i = 0; i < nk; i++)
		if (strncmp(keys[i], want, wl) == 0)
			printf("%s\n", keys[i]);
	store_client_keys_free(keys, nk);
	return EXIT_OK;
}

int ddpstore_cmd_barrier(struct store_client *c, const struct ddpstore_opts *o, char **a, int n)
{
	int64_t world;
	void *v;
	size_t len;
	int rc;

	(void)n;
	if (util_parse_i64(a[1], 1, INT64_MAX, &world) < 0) {
		ddpstore_err("barrier: '%s' is not a positive integer (see ddpstore --help)", a[1]);
		return EXIT_USAGE;
	}
	rc = store_client_barrier(c, a[0], world, 0);
	if (rc == -ETIMEDOUT) {
		/* The cancel leaves the client usable: say how far it got. */
		if (store_client_try_get(c, a[0], &v, &len) == 0) {
			ddpstore_err("barrier: timed out with %s of %" PRId64 " arrived",
				     (const char *)v, world);
			free(v);
		} else {
			ddpstore_err("barrier: timed out");
		}
		return EXIT_TIMEOUT;
	}
	if (rc == -ECONNRESET || rc == -EPIPE) {
		ddpstore_explain_reset(o, "barrier", a[0]);
		return EXIT_CONN;
	}
	if (rc < 0) {
		ddpstore_err("barrier: %s", store_strerror(rc));
		return ddpstore_exit_for(rc);
	}
	return EXIT_OK;
}
