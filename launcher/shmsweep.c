/* shmsweep: remove this agent's leftover shared memory (see shmsweep.h). */
#include "shmsweep.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "procsweep.h"
#include "workenv.h"

PROCSWEEP_RAW static size_t raw_len(const char *s)
{
	size_t n = 0;

	/* The empty asm keeps the compiler from making this a strlen() call,
	 * which the watchdog must not make. */
	while (s[n] != '\0') {
		n++;
		__asm__("" : "+r"(n));
	}
	return n;
}

/* WORKENV_SHM_PREFIX ... WORKENV_SHM_NONCE_TAG <nonce> exactly (workenv.h):
 * a longer token that merely starts with ours is someone else's. */
PROCSWEEP_RAW static int ours(const char *name, const char *nonce)
{
	static const char pre[] = WORKENV_SHM_PREFIX, tag[] = WORKENV_SHM_NONCE_TAG;
	const size_t p = sizeof(pre) - 1, t = sizeof(tag) - 1;
	size_t n = raw_len(name), k = raw_len(nonce), i;

	if (k == 0 || n < p + t + k)
		return 0;
	for (i = 0; i < p; i++)
		if (name[i] != pre[i])
			return 0;
	for (i = 0; i < t; i++)
		if (name[n - k - t + i] != tag[i])
			return 0;
	for (i = 0; i < k; i++)
		if (name[n - k + i] != nonce[i])
			return 0;
	return 1;
}

PROCSWEEP_RAW int shmsweep_remove(const char *dir, const char *nonce,
				  void (*removed)(const char *, void *), void *arg)
{
	char buf[4096] __attribute__((aligned(8)));
	long fd = syscall(SYS_openat, AT_FDCWD, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	long r, off;
	int count = 0;

	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	while ((r = syscall(SYS_getdents64, (int)fd, buf, sizeof(buf))) > 0) {
		for (off = 0; off < r;) {
			struct procsweep_dirent *e = (struct procsweep_dirent *)(buf + off);

			off += e->d_reclen;
			if (!ours(e->d_name, nonce))
				continue;
			/* Unlinking while the directory is read is fine: an
			 * entry is seen at most once. A mapping that still
			 * exists stays valid. */
			if (syscall(SYS_unlinkat, (int)fd, e->d_name, 0) == 0) {
				count++;
				if (removed != NULL)
					removed(e->d_name, arg);
			}
		}
	}
	syscall(SYS_close, (int)fd);
	return count;
}
