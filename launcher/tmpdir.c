/* tmpdir: Python's choice of temporary directory (see tmpdir.h). */
#include "tmpdir.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Python probes a directory by creating a file in it; the effective ids'
 * access check answers the same (a read-only file system too: EROFS)
 * without leaving a file behind. */
static bool usable(const char *dir)
{
	struct stat st;

	return stat(dir, &st) == 0 && S_ISDIR(st.st_mode) &&
	       faccessat(AT_FDCWD, dir, W_OK | X_OK, AT_EACCESS) == 0;
}

/* dir into buf, absolute (os.path.abspath) and usable: 0, else -errno. */
static int try_dir(const char *dir, char *buf, size_t len)
{
	char cwd[PATH_MAX];
	int n;

	if (dir[0] == '/')
		n = snprintf(buf, len, "%s", dir);
	else if (getcwd(cwd, sizeof(cwd)) == NULL)
		return -errno;
	else if (strcmp(dir, ".") == 0)
		n = snprintf(buf, len, "%s", cwd);
	else
		n = snprintf(buf, len, "%s/%s", cwd, dir);
	if (n < 0 || (size_t)n >= len)
		return -ENAMETOOLONG;
	return usable(buf) ? 0 : -ENOENT;
}

int tmpdir_find(char *buf, size_t len)
{
	/* tempfile._candidate_tempdir_list() on POSIX */
	static const char *const vars[] = {"TMPDIR", "TEMP", "TMP"};
	static const char *const dirs[] = {"/tmp", "/var/tmp", "/usr/tmp", "."};
	size_t i;

	for (i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		const char *v = getenv(vars[i]);

		if (v != NULL && v[0] != '\0' && try_dir(v, buf, len) == 0)
			return 0;
	}
	for (i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++)
		if (try_dir(dirs[i], buf, len) == 0)
			return 0;
	return -ENOENT;
}
