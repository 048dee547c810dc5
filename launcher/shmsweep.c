/* shmsweep: remove this agent's leftover shared memory (see shmsweep.h). */
#include "shmsweep.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

/* "ddp-" ... "-a<nonce>" exactly: a longer token that merely starts with
 * ours is someone else's. */
static int ours(const char *name, const char *nonce)
{
	size_t n = strlen(name), k = strlen(nonce);

	if (k == 0 || strncmp(name, "ddp-", 4) != 0 || n < 4 + 2 + k)
		return 0;
	return memcmp(name + n - k - 2, "-a", 2) == 0 && memcmp(name + n - k, nonce, k) == 0;
}

int shmsweep_remove(const char *dir, const char *nonce, void (*removed)(const char *, void *),
		    void *arg)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int count = 0;

	if (d == NULL)
		return errno == ENOENT ? 0 : -errno;
	while ((e = readdir(d)) != NULL) {
		if (!ours(e->d_name, nonce))
			continue;
		/* Unlinking while the directory is read is fine: an entry is
		 * seen at most once. A mapping that still exists stays valid. */
		if (unlinkat(dirfd(d), e->d_name, 0) == 0) {
			count++;
			if (removed != NULL)
				removed(e->d_name, arg);
		}
	}
	closedir(d);
	return count;
}
