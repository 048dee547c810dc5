/* agent_escape: what the workers leave beyond their process groups, and
 * workers that outlive SIGKILL. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent_int.h"
#include "proc_info.h"
#include "procsweep.h"

#define SWEEP_BUF (64 * 1024)
/* include/linux/sched.h: the process is in exit() (its command line is
 * gone already; no more a program's than a zombie is). */
#define PF_EXITING 0x00000004

/* How many processes are in process group pgid; *first: one of them (0:
 * none); *helpers (if given): how many are multiprocessing's helpers. A
 * bounded scan of /proc. */
static int group_members(pid_t pgid, pid_t *first, int *helpers)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	int n = 0;

	*first = 0;
	if (helpers != NULL)
		*helpers = 0;
	while (d != NULL && (de = readdir(d)) != NULL) {
		char path[64], buf[512], *end;
		long pid = strtol(de->d_name, &end, 10), pgrp;
		unsigned long flags;
		ssize_t len;
		char state;
		int fd;

		if (*end != '\0' || pid <= 0)
			continue;
		snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
		if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
			continue;
		len = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		buf[len > 0 ? len : 0] = '\0';
		/* "pid (comm) state ppid pgrp session tty tpgid flags ...":
		 * comm may hold anything */
		end = strrchr(buf, ')');
		if (end == NULL ||
		    sscanf(end + 1, " %c %*d %ld %*d %*d %*d %lu", &state, &pgrp, &flags) != 3 ||
		    pgrp != pgid || state == 'Z' || (flags & PF_EXITING) != 0)
			continue; /* an exit under way, or not reaped yet */
		if (n++ == 0)
			*first = (pid_t)pid;
		if (helpers != NULL && proc_is_mp_helper((pid_t)pid))
			++*helpers;
	}
	if (d != NULL)
		closedir(d);
	return n;
}

void agent_say_group_left(struct agent *a, const struct agent_worker *w)
{
	struct proc_info pi;
	pid_t first;
	int n = group_members(w->pid, &first, NULL);

	if (n == 0)
		return;
	if (proc_info_read(first, &pi) != 0)
		snprintf(pi.comm, sizeof(pi.comm), "?");
	agent_say("killing %d process%s that rank %d (local rank %d) left in its process group "
		  "when the workers ended (pid %d, %s%s)",
		  n, n == 1 ? "" : "es", a->world.rank_offset + w->local_rank, w->local_rank,
		  (int)first, pi.comm, n > 1 ? ", ..." : "");
}

bool agent_group_helpers_only(const struct agent_worker *w)
{
	pid_t first;
	int helpers, n = group_members(w->pid, &first, &helpers);

	return helpers == n;
}

void agent_kill_escaped(struct agent *a)
{
	char marker[64];
	char *buf;
	pid_t skip = a->cfg.watchdog != NULL ? a->cfg.watchdog->pid : 0;
	pid_t *groups;
	int i;

	if (a->job->shm_nonce == NULL ||
	    procsweep_marker(marker, sizeof(marker), a->job->shm_nonce) != 0)
		return;
	buf = aligned_alloc(8, SWEEP_BUF);
	groups = calloc((size_t)a->job->nproc, sizeof(*groups));
	if (buf == NULL || groups == NULL)
		goto out; /* out of memory: the watchdog cannot help either */
	/* A worker's group is its pid; what the group kill just reached may
	 * still be exiting (a `sleep &` of a shell worker): not escaped. */
	for (i = 0; i < a->job->nproc; i++)
		groups[i] = a->w[i].pid;
	/* SIGKILL at once: unlike the groups they had no SIGTERM, but the
	 * workers that could have stopped them are gone. */
	if (procsweep_kill_marked(marker, skip, groups, (size_t)a->job->nproc, buf, SWEEP_BUF) > 0)
		agent_say("killed the processes the workers left outside their process groups");
out:
	free(groups);
	free(buf);
}

bool agent_test_no_sigkill(void)
{
	const char *v = getenv("DDPRUN_TEST_NO_SIGKILL");

	return v != NULL && strcmp(v, "1") == 0;
}

void agent_abandon_stuck(struct agent *a)
{
	int i;

	for (i = 0; i < a->job->nproc; i++) {
		struct agent_worker *w = &a->w[i];
		struct proc_info pi;

		if (!w->running)
			continue;
		if (proc_info_read(w->pid, &pi) == 0)
			agent_say(
				"worker %d (pid %d) is still alive %d s after SIGKILL, %s (%c) in "
				"%s: not waiting for it",
				i, (int)w->pid, AGENT_STUCK_WAIT_MS / 1000,
				proc_state_name(pi.state), pi.state, pi.wchan);
		else
			agent_say("worker %d (pid %d) is still alive %d s after SIGKILL: not "
				  "waiting for it",
				  i, (int)w->pid, AGENT_STUCK_WAIT_MS / 1000);
		w->running = false;
		w->group_live = false;
		a->nrunning--;
	}
}
