/* logdir: log directory layout (see logdir.h). */
#include "logdir.h"

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tmpdir.h"

static int fail(int rc, const char *what, const char *path, char *err, size_t errlen)
{
	snprintf(err, errlen, "%s %.300s: %s", what, path, strerror(-rc));
	return rc;
}

/* mkdir -p */
static int mkdirs(const char *path)
{
	char *p = strdup(path);
	char *s;
	int rc = 0;

	if (p == NULL)
		return -ENOMEM;
	for (s = p + 1;; s++) {
		if (*s == '/' || *s == '\0') {
			char c = *s;

			*s = '\0';
			if (mkdir(p, 0755) != 0 && errno != EEXIST) {
				rc = -errno;
				break;
			}
			*s = c;
			if (c == '\0')
				break;
		}
	}
	if (rc == 0) {
		struct stat st;

		if (stat(path, &st) != 0)
			rc = -errno;
		else if (!S_ISDIR(st.st_mode))
			rc = -ENOTDIR;
	}
	free(p);
	return rc;
}

int logdir_create(struct logdir *ld, const char *base, const char *run_id, bool layout, char *err,
		  size_t errlen)
{
	size_t n;
	char *s;
	int rc;

	memset(ld, 0, sizeof(*ld));
	ld->attempt = -1;
	if (base == NULL) {
		char tmp[PATH_MAX];

		rc = tmpdir_find(tmp, sizeof(tmp));
		if (rc != 0) {
			snprintf(err, errlen, "no usable temporary directory (tried %s)",
				 TMPDIR_TRIED);
			return rc;
		}
		n = strlen(tmp) + 32;
		ld->base = malloc(n);
		if (ld->base == NULL)
			return -ENOMEM;
		snprintf(ld->base, n, "%s/ddprun_XXXXXX", tmp);
		if (mkdtemp(ld->base) == NULL)
			return fail(-errno, "cannot create", ld->base, err, errlen);
		if (!layout) {
			ld->temporary = ld->flat = true;
			ld->run_dir = strdup(ld->base);
			return ld->run_dir ? 0 : -ENOMEM;
		}
	} else {
		/* Absolute, so that a worker that changes directory still finds
		 * its error file. */
		char cwd[4096];

		if (base[0] != '/' && getcwd(cwd, sizeof(cwd)) != NULL) {
			n = strlen(cwd) + strlen(base) + 2;
			ld->base = malloc(n);
			if (ld->base != NULL)
				snprintf(ld->base, n, "%s/%s", cwd, base);
		} else {
			ld->base = strdup(base);
		}
		if (ld->base == NULL)
			return -ENOMEM;
		rc = mkdirs(ld->base);
		if (rc != 0)
			return fail(rc, "cannot create log directory", ld->base, err, errlen);
	}
	n = strlen(ld->base) + strlen(run_id) + 16;
	ld->run_dir = malloc(n);
	if (ld->run_dir == NULL)
		return -ENOMEM;
	snprintf(ld->run_dir, n, "%s/%s_XXXXXX", ld->base, run_id);
	/* The run id is the user's: keep it inside base. */
	for (s = ld->run_dir + strlen(ld->base) + 1; *s != '\0'; s++)
		if (*s == '/')
			*s = '_';
	if (mkdtemp(ld->run_dir) == NULL)
		return fail(-errno, "cannot create", ld->run_dir, err, errlen);
	return 0;
}

int logdir_attempt(struct logdir *ld, int attempt, int nproc, char *err, size_t errlen)
{
	size_t n, len;
	char *p;
	int i, rc = 0;

	if (ld->flat || ld->run_dir == NULL) { /* names carry the attempt; or none */
		ld->attempt = attempt;
		return 0;
	}
	n = strlen(ld->run_dir) + 48;
	if ((p = malloc(n)) == NULL)
		return -ENOMEM;
	len = (size_t)snprintf(p, n, "%s/attempt_%d", ld->run_dir, attempt);
	logdir_rmtree(p);
	if (mkdir(p, 0755) != 0) {
		rc = fail(-errno, "cannot create", p, err, errlen);
		goto out;
	}
	for (i = 0; i < nproc; i++) {
		snprintf(p + len, n - len, "/%d", i);
		if (mkdir(p, 0755) != 0) {
			rc = fail(-errno, "cannot create", p, err, errlen);
			goto out;
		}
	}
	ld->attempt = attempt;
out:
	free(p);
	return rc;
}

char *logdir_path(const struct logdir *ld, int local_rank, const char *file)
{
	size_t n = ld->run_dir != NULL ? strlen(ld->run_dir) + strlen(file) + 48 : 0;
	char *p = n > 0 ? malloc(n) : NULL;

	if (p != NULL && ld->flat)
		snprintf(p, n, "%s/attempt_%d.%d.%s", ld->run_dir, ld->attempt, local_rank, file);
	else if (p != NULL)
		snprintf(p, n, "%s/attempt_%d/%d/%s", ld->run_dir, ld->attempt, local_rank, file);
	return p;
}

static int rm_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	if (type == FTW_DP)
		rmdir(path);
	else
		unlink(path);
	return 0;
}

int logdir_rmtree(const char *path)
{
	struct stat st;

	if (lstat(path, &st) != 0)
		return errno == ENOENT ? 0 : -errno;
	if (nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS) != 0)
		return -errno;
	return 0;
}

void logdir_remove(struct logdir *ld)
{
	/* Usually empty (no worker wrote an error file): one rmdir does it. */
	if (ld->temporary && ld->base != NULL && rmdir(ld->base) != 0)
		logdir_rmtree(ld->base);
}

void logdir_free(struct logdir *ld)
{
	free(ld->base);
	free(ld->run_dir);
	memset(ld, 0, sizeof(*ld));
}
