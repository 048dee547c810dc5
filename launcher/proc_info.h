/* proc_info: what /proc says about one process, for the hang dump and the
 * hang monitor (launcher/hang.c). Linux only; every reader fails softly
 * (a process may exit at any moment). */
#ifndef DDP_PROC_INFO_H
#define DDP_PROC_INFO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct proc_info {
	char state;	      /* R, S, D, T, Z, ...; '?' when unknown */
	pid_t ppid;	      /* 0 when unknown */
	uint64_t cpu_ticks;   /* utime + stime, clock ticks (all threads) */
	uint64_t child_ticks; /* cutime + cstime: of its children it waited for */
	int nthreads;
	char wchan[64]; /* kernel function it waits in; "-" when running or unknown */
	char comm[32];
};

/* Fill pi for pid. 0 or a negative errno (-ESRCH: gone). */
int proc_info_read(pid_t pid, struct proc_info *pi);
/* pid and its descendants, the children of every thread, breadth first
 * (pid first), at most max of them into out; how many. */
int proc_tree(pid_t pid, pid_t *out, int max);
/* CPU ticks of pid and its descendants (up to max processes, the children
 * of every thread), with what the children it waited for had used, 0 if
 * gone. */
uint64_t proc_tree_ticks(pid_t pid, int max);
/* Whether a thread of pid's tree (up to max processes) blocks in a write
 * into one of the pipes links names ("pipe:[inode]", as /proc shows a
 * descriptor of it). */
bool proc_tree_writes_to(pid_t pid, int max, const char *const *links, int nlinks);
/* Whether pid is a descendant of ancestor, at most depth generations down. */
bool proc_descends(pid_t pid, pid_t ancestor, int depth);
/* Whether the process pi describes waits for a child's end: in waitpid
 * (wchan do_wait: a shell, subprocess.call), or, single-threaded, for a
 * signal, SIGCHLD among them (sigsuspend: coreutils' timeout;
 * do_sigtimedwait: tini, dumb-init); a program whose main thread waits
 * for a signal while its other threads work is no wrapper. A compiler's
 * suffix (".isra.0") is not part of the name. */
bool proc_waits_for_child(const struct proc_info *pi);
/* The child pid waits for by its pid (wait4, waitpid, waitid with
 * P_PID: subprocess.call, Process.join), from /proc/<pid>/syscall (its main
 * thread); 0 when it waits for any child, or in no such call. */
pid_t proc_waited_child(pid_t pid);
/* Whether parent (pi: what proc_info_read said of it), single-threaded,
 * waits in poll, select or epoll for its child's output: the child's
 * stdout and stderr are pipes the parent holds, not as its own stdout or
 * stderr (subprocess.run(capture_output=True), conda run without
 * --no-capture-output; a service with one of them piped is no program
 * it runs). */
bool proc_reads_output_of(pid_t parent, const struct proc_info *pi, pid_t child);
/* "sleeping" for 'S', ... */
const char *proc_state_name(char state);
/* True when pid's executable is a Python interpreter (python, python3, python3.11...). */
bool proc_is_python(pid_t pid);
/* True when pid is one of Python multiprocessing's own helpers (its resource
 * or semaphore tracker, its fork server), by its command line (not one the
 * fork server forked): no part of the program's work, and the tracker must
 * live to clean up after it. */
bool proc_is_mp_helper(pid_t pid);
/* True when Python process pid prints its stacks on SIGABRT, as CPython
 * 3.11 to 3.14 decide at start: -X faulthandler or -X dev, with any value
 * (-X faulthandler=0 turns it on), or PYTHONFAULTHANDLER or PYTHONDEVMODE
 * non-empty in its environment (at its exec) where -E or -I does not make
 * it ignore that. */
bool proc_python_faulthandler(pid_t pid);
/* Its two halves, on /proc's NUL-separated text (n bytes; the last string
 * NUL-terminated). What command line args (argv[0] first) says: */
enum proc_fh {
	PROC_FH_OFF, /* -E or -I: the environment is ignored, nothing turns it on */
	PROC_FH_ON,  /* -X faulthandler or -X dev */
	PROC_FH_ENV, /* the environment decides */
};
enum proc_fh proc_python_fh_args(const char *args, size_t n);
/* Whether the environment env turns it on. */
bool proc_python_fh_env(const char *env, size_t n);
/* True when pid runs its parent's command line: forked, no exec (a
 * multiprocessing worker under fork, or the fork server's). */
bool proc_forked_from_parent(pid_t pid);
/* True when pid is a worker Python multiprocessing spawned (spawn_main). */
bool proc_is_mp_spawned(pid_t pid);
/* Whether this process may ptrace any process of its user, not only those
 * that named it (PR_SET_PTRACER) or descend from it: no Yama, or its
 * ptrace_scope 0, or 1 or 2 with CAP_SYS_PTRACE in effect. */
bool proc_self_may_trace_any(void);
/* Seconds of CPU in ticks (sysconf(_SC_CLK_TCK)). */
double proc_ticks_s(uint64_t ticks);

#endif
