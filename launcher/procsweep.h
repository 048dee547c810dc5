/* procsweep: find and kill what a job's workers left outside their process
 * groups (`setsid -f`, a double fork, setpgid(0, 0)).
 *
 * Such a process no longer shares the worker's group or session, and once
 * ddprun is gone (kill -9) not even its parent chain leads back to ddprun.
 * What it keeps is the environment it inherited: every worker has
 * DDP_SHM_NONCE=<nonce>, random and ddprun's own (shmsweep.h), so a process
 * whose /proc/PID/environ holds exactly that entry is a descendant of this
 * ddprun's workers. A process that drops the entry (env -i, an environment of
 * its own) or hides its environ (not dumpable, another user) is not found.
 *
 * Used by ddprun at the end of each attempt and by the watchdog after ddprun
 * died: the watchdog shares ddprun's memory, so every function here makes
 * system calls through syscall() only (no libc state, no sanitizer). */
#ifndef DDP_PROCSWEEP_H
#define DDP_PROCSWEEP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The kernel's record in a getdents64 buffer (8-byte aligned). */
struct procsweep_dirent {
	uint64_t d_ino;
	int64_t d_off;
	unsigned short d_reclen;
	unsigned char d_type;
	char d_name[];
};

/* For code that runs in the watchdog: no sanitizer instrumentation. */
#define PROCSWEEP_RAW __attribute__((no_sanitize("address", "undefined")))

/* "DDP_SHM_NONCE=" + nonce, NUL-terminated, into out (size outlen). 0, or
 * -ENAMETOOLONG. */
int procsweep_marker(char *out, size_t outlen, const char *nonce);
/* SIGKILL every process (but the caller and skip) whose environment holds the
 * entry marker, scanning /proc again until a scan finds none (a bounded
 * number of times: one that forks meanwhile is caught by the next scan).
 * buf (buflen >= 512) is scratch. Returns how many kill()s were sent to
 * processes outside the ngroups process groups: members of groups the caller
 * has just killed may still be exiting, and were never outside them. */
int procsweep_kill_marked(const char *marker, pid_t skip, const pid_t *groups, size_t ngroups,
			  char *buf, size_t buflen);
/* Remove the regular files in dir (one level, no recursion) and dir itself:
 * ddprun's flat temporary error-file directory. */
void procsweep_rmflat(const char *dir, char *buf, size_t buflen);

#endif
