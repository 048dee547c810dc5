/* proc_info: /proc readers (see proc_info.h). */
#include "proc_info.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Read a small /proc file into buf (NUL-terminated). Bytes read, or -errno. */
static ssize_t read_small(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	do
		n = read(fd, buf, len - 1);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		n = -errno;
	close(fd);
	if (n >= 0)
		buf[n] = '\0';
	return n;
}

/* /proc/<pid>/stat: "pid (comm) state ppid ..." with comm possibly holding
 * spaces and parentheses: the fields start after the last ')'. */
static int read_stat(pid_t pid, struct proc_info *pi)
{
	char path[64], buf[1024], *p, *end, *open_paren;
	unsigned long long utime = 0, stime = 0, cutime = 0, cstime = 0;
	long threads = 0;
	int field;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (read_small(path, buf, sizeof(buf)) <= 0)
		return -ESRCH;
	open_paren = strchr(buf, '(');
	end = strrchr(buf, ')');
	if (open_paren == NULL || end == NULL || end[1] != ' ')
		return -EINVAL;
	snprintf(pi->comm, sizeof(pi->comm), "%.*s", (int)(end - open_paren - 1), open_paren + 1);
	p = end + 2;
	pi->state = *p;
	/* Fields after comm, counted from 3 (state): ppid 4, utime 14,
	 * stime 15, cutime 16, cstime 17, num_threads 20. */
	for (field = 3; *p != '\0' && field <= 20; field++) {
		if (field == 4)
			pi->ppid = (pid_t)strtol(p, NULL, 10);
		else if (field == 14)
			utime = strtoull(p, NULL, 10);
		else if (field == 15)
			stime = strtoull(p, NULL, 10);
		else if (field == 16)
			cutime = strtoull(p, NULL, 10);
		else if (field == 17)
			cstime = strtoull(p, NULL, 10);
		else if (field == 20)
			threads = strtol(p, NULL, 10);
		p = strchr(p, ' ');
		if (p == NULL)
			break;
		p++;
	}
	pi->cpu_ticks = utime + stime;
	pi->child_ticks = cutime + cstime;
	pi->nthreads = (int)threads;
	return 0;
}

int proc_info_read(pid_t pid, struct proc_info *pi)
{
	char path[64];
	ssize_t n;
	int rc;

	memset(pi, 0, sizeof(*pi));
	pi->state = '?';
	snprintf(pi->wchan, sizeof(pi->wchan), "-");
	rc = read_stat(pid, pi);
	if (rc != 0)
		return rc;
	snprintf(path, sizeof(path), "/proc/%d/wchan", (int)pid);
	n = read_small(path, pi->wchan, sizeof(pi->wchan));
	if (n <= 0 || strcmp(pi->wchan, "0") == 0)
		snprintf(pi->wchan, sizeof(pi->wchan), "-");
	return 0;
}

/* Children of one thread tid of pid, appended to out (at most max in all). */
static int thread_children(pid_t pid, const char *tid, pid_t *out, int n, int max)
{
	char path[96], buf[4096], *p, *end;

	snprintf(path, sizeof(path), "/proc/%d/task/%s/children", (int)pid, tid);
	if (read_small(path, buf, sizeof(buf)) <= 0)
		return n;
	for (p = buf; n < max; p = end) {
		long c = strtol(p, &end, 10);

		if (end == p)
			break;
		out[n++] = (pid_t)c;
	}
	return n;
}

/* Children of every thread of pid: each lists those it forked itself (a
 * subprocess started from a Python thread is not the main thread's). */
static int children(pid_t pid, pid_t *out, int n, int max)
{
	char path[64];
	struct dirent *e;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	if (d == NULL)
		return n;
	while (n < max && (e = readdir(d)) != NULL)
		if (e->d_name[0] != '.')
			n = thread_children(pid, e->d_name, out, n, max);
	closedir(d);
	return n;
}

int proc_tree(pid_t pid, pid_t *out, int max)
{
	int i, n = 1;

	if (max < 1)
		return 0;
	out[0] = pid;
	for (i = 0; i < n; i++)
		n = children(out[i], out, n, max);
	return n;
}

uint64_t proc_tree_ticks(pid_t pid, int max)
{
	pid_t list[64];
	uint64_t total = 0;
	int i, n;

	if (max > (int)(sizeof(list) / sizeof(list[0])))
		max = (int)(sizeof(list) / sizeof(list[0]));
	n = proc_tree(pid, list, max);
	for (i = 0; i < n; i++) {
		struct proc_info pi;

		/* A child's CPU counts while it runs (walked here) and once it
		 * is reaped (its parent's cutime): a rank that runs short
		 * subprocesses works, though none is alive at a sample. */
		if (read_stat(list[i], &pi) == 0)
			total += pi.cpu_ticks + pi.child_ticks;
	}
	return total;
}

bool proc_descends(pid_t pid, pid_t ancestor, int depth)
{
	struct proc_info pi;

	while (depth-- > 0 && pid > 1 && read_stat(pid, &pi) == 0) {
		if (pi.ppid == ancestor)
			return true;
		pid = pi.ppid;
	}
	return false;
}

const char *proc_state_name(char state)
{
	switch (state) {
	case 'R':
		return "running";
	case 'S':
		return "sleeping";
	case 'D':
		return "disk sleep";
	case 'T':
		return "stopped";
	case 't':
		return "tracing stop";
	case 'Z':
		return "zombie";
	case 'X':
		return "dead";
	case 'I':
		return "idle";
	default:
		return "unknown";
	}
}

bool proc_is_python(pid_t pid)
{
	char path[64], exe[4096];
	const char *base;
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
	n = readlink(path, exe, sizeof(exe) - 1);
	if (n <= 0)
		return false;
	exe[n] = '\0';
	base = strrchr(exe, '/');
	base = base ? base + 1 : exe;
	return strncmp(base, "python", 6) == 0;
}

/* Which of Python multiprocessing's helpers pid's command line names, or -1. */
static int mp_helper_of(pid_t pid)
{
	static const char *const helpers[] = {"multiprocessing.resource_tracker",
					      "multiprocessing.semaphore_tracker",
					      "multiprocessing.forkserver"};
	char path[64], cmd[4096];
	ssize_t n, i;
	size_t k;

	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	if ((n = read_small(path, cmd, sizeof(cmd))) <= 0)
		return -1;
	for (i = 0; i < n; i++) /* the arguments, NUL-separated: one string */
		if (cmd[i] == '\0')
			cmd[i] = ' ';
	for (k = 0; k < sizeof(helpers) / sizeof(helpers[0]); k++)
		if (strstr(cmd, helpers[k]) != NULL)
			return (int)k;
	return -1;
}

bool proc_is_mp_helper(pid_t pid)
{
	struct proc_info pi;
	int h = mp_helper_of(pid);

	/* The fork server's children (the program's workers, under Python
	 * 3.14's default start method) are forked from it and show its
	 * command line: a helper is one its parent is not. */
	return h >= 0 && !(read_stat(pid, &pi) == 0 && mp_helper_of(pi.ppid) == h);
}

double proc_ticks_s(uint64_t ticks)
{
	static long hz;

	if (hz <= 0)
		hz = sysconf(_SC_CLK_TCK);
	return hz > 0 ? (double)ticks / (double)hz : 0.0;
}
