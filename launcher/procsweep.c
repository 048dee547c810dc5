/* procsweep: kill a job's escaped descendants (see procsweep.h). */
#include "procsweep.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <dirent.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define PREFIX	   "DDP_SHM_NONCE="
#define MAX_SCANS  50
#define SCAN_PAUSE 20000000L /* ns between scans that found something */

int procsweep_marker(char *out, size_t outlen, const char *nonce)
{
	const char *p = PREFIX;
	size_t n = 0;

	while (*p != '\0' && n < outlen)
		out[n++] = *p++;
	while (*nonce != '\0' && n < outlen)
		out[n++] = *nonce++;
	if (n >= outlen)
		return -ENAMETOOLONG;
	out[n] = '\0';
	return 0;
}

/* A pid from a /proc entry name, or 0 for anything else. */
PROCSWEEP_RAW static pid_t name_pid(const char *s)
{
	long v = 0;

	if (*s == '\0')
		return 0;
	for (; *s != '\0'; s++) {
		if (*s < '0' || *s > '9' || v > 1L << 30)
			return 0;
		v = v * 10 + (*s - '0');
	}
	return (pid_t)v;
}

/* "/proc/<pid>/environ" into out (>= 32 bytes). */
PROCSWEEP_RAW static void environ_path(char *out, pid_t pid)
{
	char digits[12];
	const char *p = "/proc/";
	int n = 0, k = 0;

	do
		digits[k++] = (char)('0' + pid % 10);
	while ((pid /= 10) > 0);
	while (*p != '\0')
		out[n++] = *p++;
	while (k > 0)
		out[n++] = digits[--k];
	for (p = "/environ"; *p != '\0'; p++)
		out[n++] = *p;
	out[n] = '\0';
}

/* Whether pid's environment has the entry marker (streamed: an environment
 * may be larger than buf). */
PROCSWEEP_RAW static bool has_marker(pid_t pid, const char *marker, char *buf, size_t buflen)
{
	char path[32];
	long fd, r, i;
	long k = 0; /* bytes of marker matched in this entry; -1: not this one */
	bool found = false;

	environ_path(path, pid);
	fd = syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	while (!found && (r = syscall(SYS_read, (int)fd, buf, buflen)) > 0) {
		for (i = 0; i < r && !found; i++) {
			char c = buf[i];

			if (c == '\0') {
				found = k >= 0 && marker[k] == '\0';
				k = 0;
			} else if (k >= 0 && marker[k] == c) {
				k++;
			} else {
				k = -1;
			}
		}
	}
	syscall(SYS_close, (int)fd);
	return found;
}

/* Whether pid is in one of the n groups (a member the group kill reached). */
PROCSWEEP_RAW static bool in_groups(pid_t pid, const pid_t *groups, size_t n)
{
	long pgid = n > 0 ? syscall(SYS_getpgid, pid) : -1;
	size_t i;

	for (i = 0; i < n; i++)
		if (pgid == groups[i])
			return true;
	return false;
}

/* One scan of /proc; how many processes were signalled, and in *outside how
 * many of them were outside the groups. */
PROCSWEEP_RAW static int scan(const char *marker, pid_t self, pid_t skip, const pid_t *groups,
			      size_t ngroups, int *outside, char *buf, size_t buflen)
{
	/* Entries first, environments after: half of buf each. */
	size_t half = buflen / 2;
	long fd = syscall(SYS_openat, AT_FDCWD, "/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	long r, off;
	int killed = 0;
	bool member;

	if (fd < 0)
		return 0;
	while ((r = syscall(SYS_getdents64, (int)fd, buf, half)) > 0) {
		for (off = 0; off < r;) {
			struct procsweep_dirent *d = (struct procsweep_dirent *)(buf + off);
			pid_t pid = name_pid(d->d_name);

			off += d->d_reclen;
			if (pid <= 0 || pid == self || pid == skip)
				continue;
			if (!has_marker(pid, marker, buf + half, buflen - half))
				continue;
			member = in_groups(pid, groups, ngroups);
			if (syscall(SYS_kill, pid, SIGKILL) != 0)
				continue;
			killed++;
			*outside += !member;
		}
	}
	syscall(SYS_close, (int)fd);
	return killed;
}

PROCSWEEP_RAW int procsweep_kill_marked(const char *marker, pid_t skip, const pid_t *groups,
					size_t ngroups, char *buf, size_t buflen)
{
	pid_t self = (pid_t)syscall(SYS_getpid);
	int total = 0, i, n;

	/* A process killed but not yet through exit still shows its
	 * environment: the next scans count it again, harmlessly. */
	for (i = 0; i < MAX_SCANS; i++) {
		struct timespec pause = {0, SCAN_PAUSE};

		n = scan(marker, self, skip, groups, ngroups, &total, buf, buflen);
		if (n == 0)
			break;
		syscall(SYS_nanosleep, &pause, NULL);
	}
	return total;
}

PROCSWEEP_RAW void procsweep_rmflat(const char *dir, char *buf, size_t buflen)
{
	long fd =
		syscall(SYS_openat, AT_FDCWD, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	long r, off;

	if (fd < 0)
		return;
	while ((r = syscall(SYS_getdents64, (int)fd, buf, buflen)) > 0) {
		for (off = 0; off < r;) {
			struct procsweep_dirent *d = (struct procsweep_dirent *)(buf + off);

			off += d->d_reclen;
			if (d->d_type == DT_REG)
				syscall(SYS_unlinkat, (int)fd, d->d_name, 0);
		}
	}
	syscall(SYS_close, (int)fd);
	syscall(SYS_unlinkat, AT_FDCWD, dir, AT_REMOVEDIR);
}
