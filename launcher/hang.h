/* hang: hung jobs that explain themselves.
 *
 * --hang-timeout SEC (PET_HANG_TIMEOUT): the agent samples its running
 * workers (at most once a second) and counts as progress: a libddp rank
 * entering or completing a collective (rendezvous/progress_slot.h: each
 * rank marks them in a small shared file, no system call per collective),
 * bytes of output, and CPU time, except a libddp rank's CPU time while it is
 * inside a collective or waits in ddp_init for its peers to join (the shm
 * transport spins). When no local rank has made
 * progress for SEC (with several nodes: and no other node's, coord_hang.c),
 * the agent dumps every rank (hang_dump.c): /proc's state,
 * wait channel, CPU time, the age of its last output, where it is in its
 * collectives, and its native stack (eu-stack, else gdb); Python workers
 * (started with PYTHONFAULTHANDLER=1 unless set), and the Python processes
 * of any rank (its DataLoader's workers, a wrapper script's program), then
 * get SIGABRT so that faulthandler prints every thread's Python stack. Once those have exited
 * (bounded), the verdict names the ranks that were not where the others
 * were, and the job ends with HANG_EXIT. With several nodes the hang is
 * announced through the store and every node dumps its own ranks
 * (coord_hang.c).
 *
 * SIGUSR2 (unless --signals-to-handle names it) prints the same dump and
 * verdict without stopping anything (no SIGABRT).
 *
 * TORCHELASTIC_ENABLE_FILE_TIMER=1: torchrun's file timer (hang_ftimer.c). */
#ifndef DDP_HANG_H
#define DDP_HANG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HANG_EXIT 124 /* as timeout(1): the job hung and was stopped */
/* A dump's stack tools get this long (all of them, side by side). */
#define HANG_STACK_TIMEOUT_MS 15000
/* Python workers get this long to print their stacks after SIGABRT. */
#define HANG_ABORT_GRACE_MS 5000

struct agent;
struct workenv_job;
struct hang_where;

/* Set up for the agent's loop (after its own handles). 0 or a negative errno
 * (said on stderr; the job runs without hang detection then). */
int hang_start(struct agent *a);
/* A new attempt's workers are about to start. */
void hang_attempt(struct agent *a);
/* The worker variables hang detection needs (progress file, timer file,
 * PYTHONFAULTHANDLER). */
void hang_env(struct agent *a, struct workenv_job *j);
/* True while Python workers print their stacks: a failure then must not
 * stop the others yet. */
bool hang_holds(const struct agent *a);
/* The attempt is over: print a hang's verdict if it is still due, and
 * hand a remote dump's positions over if its hold has not yet (every
 * worker ended before it did). */
void hang_report(struct agent *a);
/* Close the loop handles (the agent is ending). */
void hang_close(struct agent *a);
/* Release everything (after the loop has returned). */
void hang_destroy(struct agent *a);

/* ---- several nodes (coord_hang.c) ------------------------------------------ */

/* How a node asks every node for a dump. request returns 0 once asked (the
 * dump then comes back through hang_remote_dump on every node, this one
 * included); for an on-demand dump (fail false) -EBUSY while one is under
 * way, -EALREADY once the hang's was made (none is made then); or another
 * negative errno (then the dump is local only). */
struct hang_remote {
	int (*request)(void *arg, bool fail, const char *why);
	/* Each sample of the hang monitor: whether local ranks made progress;
	 * returns the loop time (uv_now) at which another node was last seen
	 * making progress (0: never). */
	uint64_t (*tick)(void *arg, bool local_progress);
	void *arg;
};
void hang_set_remote(struct agent *a, const struct hang_remote *r);
/* A node asked for a dump (why names it). fail: the job hung (Python
 * workers get SIGABRT, the exit status is HANG_EXIT, local failures from
 * now on are the hang's). done(arg, w, n) follows, once any aborted Python
 * worker has printed its stack (or every worker is gone: hang_report):
 * where the local ranks were as the dump began (valid during the call;
 * rank -1: not running). */
void hang_remote_dump(struct agent *a, bool fail, const char *why,
		      void (*done)(void *arg, const struct hang_where *w, size_t n), void *arg);
/* True once this attempt's hang was declared: failures are its effect. */
bool hang_declared(const struct agent *a);
/* The hang declared here could not be asked for after all (the store's
 * request counter is off, the requests' connection is down): this node's
 * ranks are dumped and the hang ends the job as on a single node. */
void hang_ask_failed(struct agent *a);
/* SIGUSR2's dump, of this node's ranks alone (one node, or the request to
 * every node could not be made). */
void hang_dump_on_demand(struct agent *a);

/* ---- shared with hang_dump.c, hang_ftimer.c and coord_hang.c ---------------- */

/* Where one rank is in its collectives. */
struct hang_where {
	int rank;
	bool libddp; /* the rank reports collectives */
	bool in;     /* inside collective number entered */
	bool init;   /* inside ddp_init, joining its peers (not in a collective) */
	uint64_t entered, completed;
	uint32_t op;
	uint32_t wait; /* enum ddpi_progress_wait, when in */
	bool stopped;  /* /proc state T or t: a stop signal (^Z) or a tracer holds it */
	bool exited;   /* the worker is gone (it exited 0: a failure stops the job) */
	bool unknown;  /* its node sent no positions (lost, or no answer in time) */
	uint8_t torch; /* enum hang_torch: where its stack puts it, without libddp */
};

/* Where a rank without libddp is in torch.distributed, from the names in its
 * native stack (hang_torch.c). */
enum hang_torch {
	HANG_TORCH_UNKNOWN = 0, /* no stack, or nothing it could tell (NCCL, CUDA) */
	HANG_TORCH_OWN,		/* its gloo process group runs; it waits in none of it */
	HANG_TORCH_NOGROUP,	/* a Python rank with no process group (yet) */
	HANG_TORCH_COLL,	/* waits in a collective or send/recv (c10d::Work::wait) */
	HANG_TORCH_STORE,	/* waits on the store's client (joining, or a key) */
	HANG_TORCH_MIXED,	/* its main thread waits in none; another thread does */
};
/* The place of the rank (pid, its main thread's tid) whose stack tool
 * printed stack[0..len) (whole: all of its output); python: the rank's
 * process is Python's (a wrapper's stack says nothing of the program it
 * runs). */
uint8_t hang_torch_place(const char *stack, size_t len, long pid, bool python, bool whole);
/* w[i] was in its own code (or had no group) while other ranks waited in
 * torch.distributed: one of those they wait for. */
bool hang_torch_culprit(const struct hang_where *w, size_t n, size_t i);
/* The verdict's lines about the placed ranks of w[0..n) into t, each after
 * indent (all_placed: every rank's place is known, so a conclusion over all
 * may be drawn); how many ranks were not where the waiters were, or -1:
 * none is placed, nothing was said. */
struct text;
int hang_torch_verdict(struct text *t, const struct hang_where *w, size_t n, const char *indent,
		       bool all_placed);

/* The verdict over w[0..n): one or more lines, each starting with indent
 * (malloc'd, however many ranks and places; NULL: no memory), stopped ranks
 * named first, then those that exited, then those whose place is not known
 * (no conclusion that needs every rank's place is drawn then). *culprits: how many ranks were not
 * where the others were (those that exited, and those that never called
 * ddp_init while others wait there, included), else how many are stopped
 * (0: none can be told). */
char *hang_verdict(const struct hang_where *w, size_t n, const char *indent, int *culprits);
/* The rule above and below a verdict on the console (one node's or the
 * job's), so that it stands out among the ranks' output. */
void hang_rule(void);
/* A node's positions as JSON for the store (malloc'd; NULL: no memory), and
 * back: append the records in val to *w (grown), the count added, or -1. */
char *hang_where_encode(const struct hang_where *w, size_t n);
int hang_where_decode(const void *val, size_t len, struct hang_where **w, size_t *n);
/* Keep each rank's first record in w[0..n), in their order (a node that
 * sent another node's rank, or one rank twice, is believed once); the
 * count kept. */
size_t hang_where_unique(struct hang_where *w, size_t n);
/* "0-3,5" into buf (always NUL-terminated); entries that do not fit are
 * counted instead: "0-3,5 and 12 more". */
void hang_rank_list(const int *ranks, size_t n, char *buf, size_t len);

/* The loop time of w's last output, either stream; -1: none. */
struct agent_worker;
int64_t hang_last_output_ms(const struct agent_worker *w);
/* Where each local rank is now (w: nproc entries; rank -1 for a worker that
 * is not running). */
void hang_where_local(struct agent *a, struct hang_where *w);
/* Dump every running local rank to the console and fill w as above (at
 * once). The stack tools run side by side while the loop goes on; once
 * every stack is in (bounded) the ranks are printed in order and, with
 * aborted (nproc entries), each Python worker gets SIGABRT after its native
 * stack (aborted[i] says which); then done(a, naborted, arg). 0, or -EBUSY
 * (a dump runs) / -ENOMEM, and then done never comes. */
typedef void (*hang_dump_cb)(struct agent *a, int naborted, void *arg);
int hang_dump_start(struct agent *a, const char *why, bool *aborted, struct hang_where *w,
		    hang_dump_cb done, void *arg);
/* A dump is under way: the attempt's end (its failure summary, the exit)
 * waits for it, which agent_dump_over then lets go on. */
bool hang_dump_running(void);

/* File timer (hang_ftimer.c). */
struct hang_ftimer;
int hang_ftimer_start(struct agent *a, struct hang_ftimer **out);
const char *hang_ftimer_path(const struct hang_ftimer *t);
void hang_ftimer_close(struct hang_ftimer *t);
void hang_ftimer_destroy(struct hang_ftimer *t);

/* Write a torchelastic error file for a worker that ddprun stops, unless it
 * wrote one itself; caused_by (or NULL) marks the failure secondary. */
void hang_write_error_file(const char *path, const char *message, const char *caused_by);

#endif
