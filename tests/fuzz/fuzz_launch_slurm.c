/* libFuzzer target for Slurm hostlists (launcher/slurm.h): the input is the
 * list (cut at its first NUL). Expansion must stay within its bounds, every
 * name it gives must expand to itself alone, and slurm_hostlist_first must
 * agree with the full expansion. Invariants trap (__builtin_trap). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "slurm.h"

/* Names re-parsed per input: the first ones and the last. */
#define REPARSE_MAX 64

static void reparses_to_itself(const char *name)
{
	char **h = NULL;
	size_t n = 0;

	CHECK(slurm_hostlist_expand(name, &h, &n) == 0);
	CHECK(n == 1 && strcmp(h[0], name) == 0);
	slurm_hosts_free(h, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *list = malloc(size + 1), first[SLURM_MAX_HOSTNAME + 1];
	char **hosts = NULL;
	size_t n = 0, i;
	int rc, rc1;

	if (list == NULL)
		return 0;
	memcpy(list, data, size);
	list[size] = '\0';
	rc = slurm_hostlist_expand(list, &hosts, &n);
	CHECK(rc == 0 || rc == -EINVAL || rc == -E2BIG || rc == -ENOMEM);
	rc1 = slurm_hostlist_first(list, first, sizeof(first));
	CHECK(rc1 == 0 || rc1 == -EINVAL || rc1 == -E2BIG || rc1 == -ENOMEM);
	if (rc == 0) {
		CHECK(n >= 1 && n <= SLURM_MAX_HOSTS);
		for (i = 0; i < n; i++) {
			size_t len = strlen(hosts[i]);

			CHECK(len >= 1 && len <= SLURM_MAX_HOSTNAME);
			CHECK(strpbrk(hosts[i], "[],") == NULL);
			if (i < REPARSE_MAX || i == n - 1)
				reparses_to_itself(hosts[i]);
		}
		CHECK(rc1 == 0 && strcmp(first, hosts[0]) == 0);
		slurm_hosts_free(hosts, n);
	} else {
		/* A list first accepts is well formed: expanding it fails only
		 * for its size. */
		CHECK(rc1 != 0 || rc != -EINVAL);
	}
	free(list);
	return 0;
}
