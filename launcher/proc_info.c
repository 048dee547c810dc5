/* proc_info: /proc readers (see proc_info.h). */
#include "proc_info.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util.h"

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

/* Whether wchan, without its suffix, is name. */
static bool wchan_is(const char *wchan, const char *name)
{
	size_t n = strcspn(wchan, ".");

	return strlen(name) == n && strncmp(wchan, name, n) == 0;
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

bool proc_waits_for_child(const struct proc_info *pi)
{
	return wchan_is(pi->wchan, "do_wait") ||
	       (pi->nthreads == 1 &&
		(wchan_is(pi->wchan, "sigsuspend") || wchan_is(pi->wchan, "do_sigtimedwait")));
}

/* The system call a task blocks in, from its /proc syscall file (path):
 * its number and first two arguments; false when it runs or is in none,
 * or the file cannot be read (it needs ptrace's access). */
static bool blocked_in(const char *path, long *nr, unsigned long long *a0, unsigned long long *a1)
{
	char buf[512];

	return read_small(path, buf, sizeof(buf)) > 0 &&
	       sscanf(buf, "%ld %llx %llx", nr, a0, a1) == 3;
}

pid_t proc_waited_child(pid_t pid)
{
	char path[64];
	unsigned long long a0, a1;
	long nr;

	snprintf(path, sizeof(path), "/proc/%d/syscall", (int)pid);
	if (!blocked_in(path, &nr, &a0, &a1))
		return 0;
#ifdef SYS_wait4 /* (not on every architecture: glibc's waitpid is waitid there) */
	if (nr == SYS_wait4 && (int)a0 > 0)
		return (pid_t)(int)a0;
#endif
	if (nr == SYS_waitid && a0 == P_PID && (int)a1 > 0)
		return (pid_t)(int)a1;
	return 0;
}

/* The pipe fd of pid is ("pipe:[inode]") into link; false if none. */
static bool fd_pipe(pid_t pid, const char *fd, char *link, size_t len)
{
	char path[64];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%d/fd/%s", (int)pid, fd);
	n = readlink(path, link, len - 1);
	if (n <= 0)
		return false;
	link[n] = '\0';
	return strncmp(link, "pipe:[", 6) == 0;
}

/* Whether pid holds pipe link on a descriptor of its own but 1 and 2 (a
 * pipe it shares with its child as their stdout is no capture). Bounded:
 * the first PROC_FD_SCAN_MAX descriptors. */
#define PROC_FD_SCAN_MAX 1024
static bool holds_pipe(pid_t pid, const char *link)
{
	char path[64], mine[64];
	struct dirent *de;
	bool found = false;
	DIR *d;
	int n = 0;

	for (int fd = 1; fd <= 2; fd++) {
		snprintf(mine, sizeof(mine), "%d", fd);
		if (fd_pipe(pid, mine, path, sizeof(path)) && strcmp(path, link) == 0)
			return false;
	}
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	if ((d = opendir(path)) == NULL)
		return false;
	while (!found && n++ < PROC_FD_SCAN_MAX && (de = readdir(d)) != NULL)
		found = de->d_name[0] != '.' && fd_pipe(pid, de->d_name, mine, sizeof(mine)) &&
			strcmp(mine, link) == 0;
	closedir(d);
	return found;
}

/* Whether thread tid of pid blocks in a write into one of links: its
 * system call (write, writev) and the descriptor it names; where that
 * cannot be read (Yama's ptrace_scope 2), a wait in a pipe write at all. */
static bool task_writes_to(pid_t pid, const char *tid, const char *const *links, int nlinks)
{
	char path[320], buf[64], fd[16], link[64];
	unsigned long long a0, a1;
	long nr;
	int i;

	snprintf(path, sizeof(path), "/proc/%d/task/%s/syscall", (int)pid, tid);
	if (!blocked_in(path, &nr, &a0, &a1)) {
		snprintf(path, sizeof(path), "/proc/%d/task/%s/wchan", (int)pid, tid);
		return read_small(path, buf, sizeof(buf)) > 0 &&
		       (wchan_is(buf, "pipe_write") || wchan_is(buf, "anon_pipe_write"));
	}
	if (nr != SYS_write && nr != SYS_writev)
		return false;
	snprintf(fd, sizeof(fd), "%d", (int)a0);
	if (!fd_pipe(pid, fd, link, sizeof(link)))
		return false;
	for (i = 0; i < nlinks; i++)
		if (strcmp(link, links[i]) == 0)
			return true;
	return false;
}

#define PROC_TASK_SCAN_MAX 4096
bool proc_tree_writes_to(pid_t pid, int max, const char *const *links, int nlinks)
{
	pid_t list[256];
	int i, n, tasks = 0;
	bool found = false;

	if (max > (int)(sizeof(list) / sizeof(list[0])))
		max = (int)(sizeof(list) / sizeof(list[0]));
	n = proc_tree(pid, list, max);
	for (i = 0; i < n && !found; i++) {
		char path[64];
		struct dirent *de;
		DIR *d;

		snprintf(path, sizeof(path), "/proc/%d/task", (int)list[i]);
		if ((d = opendir(path)) == NULL)
			continue;
		while (!found && tasks < PROC_TASK_SCAN_MAX && (de = readdir(d)) != NULL) {
			if (de->d_name[0] == '.')
				continue;
			tasks++;
			found = task_writes_to(list[i], de->d_name, links, nlinks);
		}
		closedir(d);
	}
	return found;
}

bool proc_reads_output_of(pid_t parent, const struct proc_info *pi, pid_t child)
{
	char link[64];

	if (pi->nthreads != 1 ||
	    !(wchan_is(pi->wchan, "poll_schedule_timeout") || wchan_is(pi->wchan, "do_select") ||
	      wchan_is(pi->wchan, "ep_poll") || wchan_is(pi->wchan, "do_epoll_wait")))
		return false;
	return fd_pipe(child, "1", link, sizeof(link)) && holds_pipe(parent, link) &&
	       fd_pipe(child, "2", link, sizeof(link)) && holds_pipe(parent, link);
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

/* /proc/<pid>/<what> whole (cmdline, environ: NUL-separated strings), at
 * most cap bytes, into a malloc'd *buf (NUL-terminated after them); the
 * length, or a negative errno. */
static ssize_t read_all(pid_t pid, const char *what, size_t cap, char **buf)
{
	char path[64];
	size_t len = 0;
	char *b = malloc(cap + 1);
	int fd;

	*buf = NULL;
	if (b == NULL)
		return -ENOMEM;
	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, what);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		free(b);
		return -errno;
	}
	while (len < cap) {
		ssize_t n = read(fd, b + len, cap - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	b[len] = '\0';
	*buf = b;
	return (ssize_t)len;
}

/* Whether -X option opt (its name up to '=') is named name: CPython
 * matches the whole name, whatever the value. */
static bool xoption_is(const char *opt, const char *name)
{
	size_t n = strlen(name);

	return strncmp(opt, name, n) == 0 && (opt[n] == '\0' || opt[n] == '=');
}

enum proc_fh proc_python_fh_args(const char *args, size_t n)
{
	const char *a, *end = args + n;
	bool env_off = false;

	if (n == 0)
		return PROC_FH_OFF;
	/* Python's options (its getopt), up to the script, "-", "--", -c or
	 * -m: -E and -I ignore the PYTHON* variables; -X and -W take a value,
	 * joined or next, as --check-hash-based-pycs does (next only). */
	for (a = args + strnlen(args, n) + 1; a < end && a[0] == '-' && a[1] != '\0';
	     a += strlen(a) + 1) {
		const char *f;

		if (a[1] == '-') {
			if (a[2] == '\0')
				break;
			if (strcmp(a, "--check-hash-based-pycs") == 0 &&
			    (a += strlen(a) + 1) >= end)
				break;
			continue;
		}
		for (f = a + 1; *f != '\0'; f++) {
			if (*f == 'c' || *f == 'm')
				return env_off ? PROC_FH_OFF : PROC_FH_ENV;
			if (*f == 'E' || *f == 'I')
				env_off = true;
			if (*f == 'X' || *f == 'W') {
				const char *v = f[1] != '\0' ? f + 1 : a + strlen(a) + 1;

				if (f[1] == '\0')
					a = v; /* the value is the next argument */
				/* Any value turns it on: -X faulthandler=0 too
				 * (config_get_xoption tests the name only), and
				 * dev mode turns faulthandler on. */
				if (*f == 'X' && v < end &&
				    (xoption_is(v, "faulthandler") || xoption_is(v, "dev")))
					return PROC_FH_ON;
				break;
			}
		}
		if (a >= end)
			break;
	}
	return env_off ? PROC_FH_OFF : PROC_FH_ENV;
}

bool proc_python_fh_env(const char *env, size_t n)
{
	const char *a, *fh = NULL, *dev = NULL;

	/* getenv's: the first of each; an empty value is none (_Py_GetEnv). */
	for (a = env; a < env + n; a += strlen(a) + 1) {
		if (fh == NULL && strncmp(a, "PYTHONFAULTHANDLER=", 19) == 0)
			fh = a + 19;
		else if (dev == NULL && strncmp(a, "PYTHONDEVMODE=", 14) == 0)
			dev = a + 14;
	}
	return (fh != NULL && *fh != '\0') || (dev != NULL && *dev != '\0');
}

bool proc_python_faulthandler(pid_t pid)
{
	char *args, *env;
	enum proc_fh fh;
	bool on;
	ssize_t n = read_all(pid, "cmdline", 65536, &args);

	fh = n > 0 ? proc_python_fh_args(args, (size_t)n) : PROC_FH_OFF;
	free(args);
	if (fh != PROC_FH_ENV)
		return fh == PROC_FH_ON;
	n = read_all(pid, "environ", 1u << 20, &env);
	on = n > 0 && proc_python_fh_env(env, (size_t)n);
	free(env);
	return on;
}

bool proc_forked_from_parent(pid_t pid)
{
	struct proc_info pi;
	char *mine = NULL, *theirs = NULL;
	ssize_t n, m;
	bool same;

	if (read_stat(pid, &pi) != 0)
		return false;
	n = read_all(pid, "cmdline", 65536, &mine);
	m = read_all(pi.ppid, "cmdline", 65536, &theirs);
	same = n > 0 && n == m && memcmp(mine, theirs, (size_t)n) == 0;
	free(mine);
	free(theirs);
	return same;
}

/* Which of Python multiprocessing's helpers pid's command line names (or,
 * MP_SPAWNED, that it is a worker it spawned), or -1. */
#define MP_SPAWNED 3
static int mp_helper_of(pid_t pid)
{
	static const char *const helpers[] = {
		"multiprocessing.resource_tracker", "multiprocessing.semaphore_tracker",
		"multiprocessing.forkserver", "multiprocessing.spawn"};
	char *cmd;
	ssize_t n = read_all(pid, "cmdline", 4096, &cmd), i;
	size_t k;
	int h = -1;

	for (i = 0; i < n; i++) /* the arguments, NUL-separated: one string */
		if (cmd[i] == '\0')
			cmd[i] = ' ';
	for (k = 0; n > 0 && h < 0 && k < sizeof(helpers) / sizeof(helpers[0]); k++)
		if (strstr(cmd, helpers[k]) != NULL)
			h = (int)k;
	free(cmd);
	return h;
}

bool proc_is_mp_spawned(pid_t pid)
{
	return mp_helper_of(pid) == MP_SPAWNED;
}

bool proc_is_mp_helper(pid_t pid)
{
	struct proc_info pi;
	int h = mp_helper_of(pid);

	/* The fork server's children (the program's workers, under Python
	 * 3.14's default start method) are forked from it and show its
	 * command line: a helper is one its parent is not. */
	return h >= 0 && h != MP_SPAWNED &&
	       !(read_stat(pid, &pi) == 0 && mp_helper_of(pi.ppid) == h);
}

bool proc_self_may_trace_any(void)
{
	int scope = util_yama_ptrace_scope();
	unsigned long long caps = 0;
	char line[128];
	FILE *f;

	if (scope <= 0)
		return true;
	if (scope >= 3 || (f = fopen("/proc/self/status", "re")) == NULL)
		return false;
	while (fgets(line, sizeof(line), f) != NULL)
		if (sscanf(line, "CapEff: %llx", &caps) == 1)
			break;
	fclose(f);
	return (caps >> 19) & 1; /* CAP_SYS_PTRACE */
}

double proc_ticks_s(uint64_t ticks)
{
	static long hz;

	if (hz <= 0)
		hz = sysconf(_SC_CLK_TCK);
	return hz > 0 ? (double)ticks / (double)hz : 0.0;
}
