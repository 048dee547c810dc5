/* shm: the node's shared segment (create/open/unlink) and the progress
 * counters the ranks synchronize on. See shm.h for the design. */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "shm.h"
#include "util.h"
#include "workenv.h"

#define SHM_MAGIC     0x44445053u /* "DDPS" */
#define SHM_VERSION   9
#define HDR_BYTES     8192
#define CTL_BYTES     448 /* whole cache lines: no false sharing between ranks */
#define ABORT_CLAIMED 0x80000000u
/* How long a waiter keeps its core before sleeping (spin_until): about what
 * a sleep and wake-up cost, or, yielding to ranks that share its core, long
 * enough for them to reach the collective. */
#define SPIN_NS	 50000
#define YIELD_NS 2000000

struct shm_hdr {
	_Atomic uint32_t magic; /* stored last by the creator */
	uint32_t version;
	uint32_t lws;
	uint32_t nslots;
	uint64_t slot_bytes;
	uint64_t total_bytes;
	int32_t creator_pid;
	_Atomic uint32_t attached;
	_Atomic uint32_t abort; /* 0, or the failing local rank + 1 */
	int32_t abort_code;	/* its failure's code (written before abort is) */
	char abort_msg[256];
	char abort_cause[160]; /* the failing rank's own cause ("": its own failure) */
	int32_t pids[DDPI_SHM_MAX_LOCAL];
	int32_t ranks[DDPI_SHM_MAX_LOCAL];
	/* Each rank's pid namespace: pids are only comparable inside one. */
	uint64_t pidns[DDPI_SHM_MAX_LOCAL];
	/* 0, or the collective calls a rank made + 1 once it called
	 * ddp_finalize: a peer that waits on it for more has no partner. */
	_Atomic uint32_t finished[DDPI_SHM_MAX_LOCAL];
	/* The first rank that finalized after a call of its was refused for its
	 * arguments (+ 1; ABORT_CLAIMED while it writes), and that refusal's
	 * message: the peers waiting in that call say so. */
	_Atomic uint32_t refused_by;
	char refused[192];
};

struct shm_ctl {
	_Atomic uint32_t seq;
	_Atomic uint32_t waiters;
	struct ddpi_coll_desc desc[DDPI_DESC_SLOTS];
	struct ddpi_cma_ctl cma;
	struct ddpi_zc_ctl zc;
};

_Static_assert(sizeof(struct shm_ctl) <= CTL_BYTES, "shm control line too large");

_Static_assert(sizeof(struct shm_hdr) <= HDR_BYTES, "shm header too large");

static inline struct shm_ctl *ctl_of(const struct ddpi_shm *s, int q)
{
	return (struct shm_ctl *)((char *)s->ctl + (size_t)q * CTL_BYTES);
}

int ddpi_shm_aborted(const struct ddpi_shm *s)
{
	return atomic_load_explicit(&s->hdr->abort, memory_order_relaxed) != 0;
}

struct ddpi_cma_ctl *ddpi_shm_cma_ctl(const struct ddpi_shm *s, int q)
{
	return &ctl_of(s, q)->cma;
}

static long futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts)
{
	return syscall(SYS_futex, (uint32_t *)addr, op, val, ts, NULL, 0);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

/* Alive and not a zombie. A crashed rank is a zombie until its launcher reaps
 * it, and kill(pid, 0) still succeeds on zombies. */
static int pid_alive(int pid)
{
	char path[64], buf[256];
	FILE *f;
	char *rp;

	if (pid <= 0)
		return 0;
	if (kill(pid, 0) < 0 && errno == ESRCH)
		return 0;
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	f = fopen(path, "re");
	if (!f)
		return 1; /* no procfs: trust kill() */
	if (!fgets(buf, sizeof(buf), f)) {
		fclose(f);
		return 1;
	}
	fclose(f);
	rp = strrchr(buf, ')');
	return !(rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X'));
}

/* CPUs this process may run on (affinity and cpusets included). */
static int usable_cpus(void)
{
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set) == 0)
		return CPU_COUNT(&set);
	return (int)sysconf(_SC_NPROCESSORS_ONLN);
}

static int create_segment(struct ddpi_shm *s, const struct ddp_env *env, size_t total)
{
	int fd = -1, tries;

	for (tries = 0; tries < 2; tries++) {
		fd = shm_open(s->name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
		if (fd >= 0 || errno != EEXIST)
			break;
		/* Left over by a job that died during its init: replace it. */
		shm_unlink(s->name);
	}
	if (fd < 0)
		return ddpi_err(-errno, "shm_open(%s): %s", s->name, strerror(errno));
	if (ftruncate(fd, (off_t)total) < 0) {
		int err = -errno;
		close(fd);
		shm_unlink(s->name);
		return ddpi_err(err, "ftruncate(%s, %zu): %s", s->name, total, strerror(-err));
	}
	s->map = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (s->map == MAP_FAILED) {
		int err = -errno;
		s->map = NULL;
		shm_unlink(s->name);
		return ddpi_err(err, "mmap %zu bytes of %s: %s", total, s->name, strerror(-err));
	}
	s->map_len = total;
	s->hdr = s->map;
	s->hdr->version = SHM_VERSION;
	s->hdr->lws = (uint32_t)env->local_world;
	s->hdr->nslots = (uint32_t)s->nslots;
	s->hdr->slot_bytes = s->slot_bytes;
	s->hdr->total_bytes = total;
	s->hdr->creator_pid = (int32_t)getpid();
	atomic_store_explicit(&s->hdr->magic, SHM_MAGIC, memory_order_release);
	return 0;
}

/* Opens the segment the node's rank 0 created, waiting for it to appear. */
static int open_segment(struct ddpi_shm *s, const struct ddp_env *env, int64_t deadline)
{
	int backoff = 1;

	for (;;) {
		int fd = shm_open(s->name, O_RDWR | O_CLOEXEC, 0600);
		struct stat st;

		if (fd < 0 && errno != ENOENT)
			return ddpi_err(-errno, "shm_open(%s): %s", s->name, strerror(errno));
		if (fd >= 0 && fstat(fd, &st) == 0 && (size_t)st.st_size >= HDR_BYTES) {
			void *m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED,
				       fd, 0);
			close(fd);
			fd = -1;
			if (m == MAP_FAILED)
				return ddpi_err(-errno, "mmap %s: %s", s->name, strerror(errno));
			struct shm_hdr *h = m;
			if (atomic_load_explicit(&h->magic, memory_order_acquire) == SHM_MAGIC &&
			    h->total_bytes == (uint64_t)st.st_size && pid_alive(h->creator_pid)) {
				if (h->version != SHM_VERSION ||
				    h->lws != (uint32_t)env->local_world)
					return ddpi_err(DDP_EENV,
							"%s: made for %u local ranks (version %u), "
							"LOCAL_WORLD_SIZE is %d",
							s->name, h->lws, h->version,
							env->local_world);
				s->map = m;
				s->map_len = (size_t)st.st_size;
				s->hdr = h;
				s->nslots = (int)h->nslots;
				s->slot_bytes = (size_t)h->slot_bytes;
				return 0;
			}
			/* Not initialized yet, or left over by a dead job: look again. */
			munmap(m, (size_t)st.st_size);
		}
		if (fd >= 0)
			close(fd);
		if (util_now_ms() >= deadline)
			return ddpi_caused_by(
				ddpi_err(-ETIMEDOUT,
					 "local rank 0 did not create %s in time (is it running?)",
					 s->name),
				"local rank 0 of node %d timed out", env->node);
		sleep_ms(backoff);
		if (backoff < 20)
			backoff *= 2;
	}
}

static int wait_attached(struct ddpi_shm *s, int64_t deadline)
{
	while (atomic_load(&s->hdr->attached) < (uint32_t)s->lws) {
		if (atomic_load(&s->hdr->abort))
			return ddpi_shm_abort_error(s, "init");
		if (util_now_ms() >= deadline)
			return ddpi_caused_by(
				ddpi_err(
					-ETIMEDOUT,
					"only %u of %d local ranks joined the node's shared memory "
					"in time",
					atomic_load(&s->hdr->attached), s->lws),
				"%d local rank(s) timed out",
				s->lws - (int)atomic_load(&s->hdr->attached));
		sleep_ms(1);
	}
	return 0;
}

/* Liveness checks look at peers' pids, which only mean something when every
 * local rank shares our pid namespace (not so for ranks in separate containers
 * sharing /dev/shm): compare, and rely on timeouts alone otherwise. */
static int check_pid_namespace(struct ddpi_shm *s, int64_t deadline)
{
	struct stat st;
	uint32_t in;
	int rc;

	s->hdr->pidns[s->me] = stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
	in = ddpi_shm_publish(s);
	if ((rc = ddpi_shm_wait_all(s, in, deadline, "init")) < 0)
		return rc;
	s->liveness = s->hdr->pidns[s->me] != 0;
	for (int q = 0; q < s->lws; q++)
		if (s->hdr->pidns[q] != s->hdr->pidns[s->me])
			s->liveness = 0;
	return 0;
}

int ddpi_shm_open(const struct ddp_env *env, int64_t deadline, struct ddpi_shm **out)
{
	struct ddpi_shm *s;
	size_t ctl_off, stage_off, per_rank, total;
	int rc;

	if (env->local_world > DDPI_SHM_MAX_LOCAL)
		return ddpi_err(-EINVAL, "LOCAL_WORLD_SIZE=%d is above the maximum of %d",
				env->local_world, DDPI_SHM_MAX_LOCAL);
	s = calloc(1, sizeof(*s));
	if (!s)
		return ddpi_err(-ENOMEM, "out of memory for the shared-memory communicator");
	s->lws = env->local_world;
	s->me = env->local_rank;
	s->nslots = 3; /* the large all_reduce's pipeline (shm_coll.c) */
	s->slot_bytes = env->shm_slot_bytes;
	/* Oversubscribed cores: a spinning waiter steals the time its peer needs;
	 * yielding hands it over (see spin_until). */
	s->oversubscribed = usable_cpus() < s->lws;
	/* Unique to this job attempt and node; under ddprun it ends in the
	 * agent's nonce, so the agent removes what its workers leave. */
	workenv_shm_name(s->name, sizeof(s->name), env->run_id, env->restart, env->master_port,
			 env->node, (unsigned)getuid(), env->shm_nonce);

	ctl_off = HDR_BYTES;
	stage_off = ctl_off + ((size_t)s->lws * CTL_BYTES + 4095) / 4096 * 4096;
	per_rank = (size_t)s->nslots * s->slot_bytes;
	total = stage_off + per_rank * (size_t)s->lws;

	if (s->me == 0)
		rc = create_segment(s, env, total);
	else
		rc = open_segment(s, env, deadline);
	if (rc < 0)
		goto fail;
	/* The creator's geometry wins (DDP_SHM_CHUNK_KB may differ per rank). */
	per_rank = (size_t)s->nslots * s->slot_bytes;
	if (stage_off + per_rank * (size_t)s->lws != s->map_len) {
		rc = ddpi_err(-EPROTO, "%s: unexpected size", s->name);
		goto fail;
	}
	s->ctl = (struct shm_ctl *)((char *)s->map + ctl_off);
	s->stage = calloc((size_t)s->lws, sizeof(char *));
	s->slot_done = calloc((size_t)s->nslots, sizeof(uint32_t));
	if (!s->stage || !s->slot_done || ddpi_shm_mem_init(s, env->rank) < 0) {
		rc = ddpi_err(-ENOMEM, "out of memory for the shared-memory communicator");
		goto fail;
	}
	for (int q = 0; q < s->lws; q++)
		s->stage[q] = (char *)s->map + stage_off + (size_t)q * per_rank;
	s->hdr->pids[s->me] = (int32_t)getpid();
	s->hdr->ranks[s->me] = (int32_t)env->rank;
	atomic_fetch_add(&s->hdr->attached, 1);
	rc = wait_attached(s, deadline);
	if (rc < 0) {
		ddpi_shm_abort(s, rc, ddp_errmsg());
		goto fail;
	}
	/* Everyone has it mapped: the name is no longer needed. */
	shm_unlink(s->name);
	s->unlinked = 1;
	if ((rc = check_pid_namespace(s, deadline)) < 0 ||
	    (rc = ddpi_shm_cma_init(s, env, deadline)) < 0)
		goto fail;
	/* Shared regions are found by pid (/proc/<pid>/fd): ours only. A rank
	 * that turns them off is enough to stage every all_reduce. */
	s->zc_off = !s->liveness || !env->shm_direct;
	*out = s;
	return 0;
fail:
	ddpi_shm_close(s);
	return rc;
}

void ddpi_shm_close(struct ddpi_shm *s)
{
	if (!s)
		return;
	ddpi_shm_mem_close(s);
	if (!s->unlinked && s->map)
		shm_unlink(s->name);
	if (s->map)
		munmap(s->map, s->map_len);
	free(s->stage);
	free(s->slot_done);
	free(s->cma_scratch);
	free(s);
}

int ddpi_shm_rank_of(const struct ddpi_shm *s, int q)
{
	return s->hdr->ranks[q];
}

struct ddpi_zc_ctl *ddpi_shm_zc_ctl(const struct ddpi_shm *s, int q)
{
	return &ctl_of(s, q)->zc;
}

int ddpi_shm_pid_of(const struct ddpi_shm *s, int q)
{
	return s->hdr->pids[q];
}

int ddpi_shm_local_of(const struct ddpi_shm *s, int rank)
{
	for (int q = 0; q < s->lws; q++)
		if (s->hdr->ranks[q] == rank)
			return q;
	return -1;
}

uint32_t ddpi_shm_publish(struct ddpi_shm *s)
{
	struct shm_ctl *c = ctl_of(s, s->me);
	uint32_t v = ++s->seq;

	/* seq_cst store then load: pairs with the waiter's increment-then-check,
	 * so either the waiter sees the new value or we see the waiter. */
	atomic_store(&c->seq, v);
	if (atomic_load(&c->waiters))
		futex(&c->seq, FUTEX_WAKE, INT_MAX, NULL);
	return v;
}

int ddpi_shm_abort_error(struct ddpi_shm *s, const char *what)
{
	uint32_t who = atomic_load(&s->hdr->abort);
	int q, code;

	/* The aborting rank is still writing its message: give it a moment. */
	for (int i = 0; i < 1000 && (who & ABORT_CLAIMED); i++) {
		sleep_ms(1);
		who = atomic_load(&s->hdr->abort);
	}
	q = (int)(who & ~ABORT_CLAIMED) - 1;
	/* The program's calls that disagree (a mismatch, a rank that finalized)
	 * are every rank's error: -EINVAL everywhere; any other failure is the
	 * peer's, DDP_EPEER here. */
	code = s->hdr->abort_code == -EINVAL ? -EINVAL : DDP_EPEER;
	if (q < 0 || q >= s->lws)
		return ddpi_caused_by(
			ddpi_err(code, "%s: a local rank failed: %s", what, s->hdr->abort_msg),
			"a local rank failed");
	ddpi_err(code, "%s: rank %d failed: %s", what, s->hdr->ranks[q], s->hdr->abort_msg);
	/* What made that rank fail made this one fail: name the origin. */
	if (s->hdr->abort_cause[0])
		return ddpi_caused_by(code, "%.*s", (int)sizeof(s->hdr->abort_cause) - 1,
				      s->hdr->abort_cause);
	return ddpi_caused_by(code, "rank %d (pid %d) failed", s->hdr->ranks[q], s->hdr->pids[q]);
}

/* Rank q called ddp_finalize after ncalls collective calls, and this one
 * waits on it in another: the ranks made different numbers of calls (an
 * uneven last batch), which would wait for the timeout, or for ever while
 * q lives on. */
static int finished_error(struct ddpi_shm *s, int q, uint32_t ncalls, const char *what)
{
	char mine[128];

	if (s->outer)
		ddpi_call_describe(s->outer, mine, sizeof(mine));
	else
		snprintf(mine, sizeof(mine), "%s", what);
	/* "rank R", not "this rank": the text goes round the ring to other nodes. */
	if (atomic_load(&s->hdr->refused_by) == (uint32_t)q + 1) {
		ddpi_err(-EINVAL,
			 "%s: rank %d finished (ddp_finalize) after its call was refused (%.*s), "
			 "while rank %d called %s",
			 what, s->hdr->ranks[q], (int)sizeof(s->hdr->refused) - 1, s->hdr->refused,
			 s->hdr->ranks[s->me], mine);
		ddpi_caused_by(-EINVAL, "rank %d finished after its call was refused",
			       s->hdr->ranks[q]);
	} else {
		ddpi_err(-EINVAL,
			 "%s: rank %d finished (ddp_finalize) after %u collective call%s, while "
			 "rank %d called %s: the ranks made different numbers of calls",
			 what, s->hdr->ranks[q], ncalls, ncalls == 1 ? "" : "s",
			 s->hdr->ranks[s->me], mine);
		ddpi_caused_by(-EINVAL, "rank %d finished after %u collective call%s",
			       s->hdr->ranks[q], ncalls, ncalls == 1 ? "" : "s");
	}
	ddpi_shm_abort(s, -EINVAL, ddp_errmsg());
	return -EINVAL;
}

void ddpi_shm_finish(struct ddpi_shm *s, uint64_t ncalls, const char *refused)
{
	uint32_t zero = 0;

	if (!s || atomic_load(&s->hdr->abort))
		return;
	/* The note before the mark: a peer that sees the mark sees the note. */
	if (refused && atomic_compare_exchange_strong(&s->hdr->refused_by, &zero, ABORT_CLAIMED)) {
		snprintf(s->hdr->refused, sizeof(s->hdr->refused), "%s", refused);
		atomic_store(&s->hdr->refused_by, (uint32_t)s->me + 1);
	}
	atomic_store(&s->hdr->finished[s->me],
		     (uint32_t)(ncalls < UINT32_MAX - 1 ? ncalls : UINT32_MAX - 1) + 1);
	futex(&ctl_of(s, s->me)->seq, FUTEX_WAKE, INT_MAX, NULL);
}

static inline int reached(struct shm_ctl *c, uint32_t target)
{
	return (int32_t)(atomic_load_explicit(&c->seq, memory_order_acquire) - target) >= 0;
}

/* Before sleeping, a waiter keeps its core for a while, 0 once target is
 * reached: a sleeper costs its peer a futex wake-up and itself a wake-up
 * latency, so it spins about that long (longer only burns a core that other
 * programs may need: under load, shorter waits beat Open MPI's spinning
 * forever). With more local ranks than cores, the peer is likely runnable
 * but descheduled, perhaps on our core: sched_yield hands it the core
 * without a wake-up on either side (what Open MPI does when oversubscribed),
 * for up to YIELD_NS. */
static int spin_until(struct ddpi_shm *s, struct shm_ctl *c, uint32_t target, int yield)
{
	uint64_t end = 0;

	for (int i = 1;; i++) {
		if (yield)
			sched_yield();
		else
			cpu_relax();
		if (reached(c, target))
			return 0;
		if (i % (yield ? 8 : 64))
			continue;
		if (atomic_load_explicit(&s->hdr->abort, memory_order_relaxed))
			return -1;
		uint64_t now = util_now_ns();
		if (!end)
			end = now + (yield ? YIELD_NS : SPIN_NS);
		else if (now >= end)
			return -1;
	}
}

int ddpi_shm_wait(struct ddpi_shm *s, int q, uint32_t target, int64_t deadline, const char *what)
{
	struct shm_ctl *c = ctl_of(s, q);

	if (reached(c, target))
		return 0;
	if (ddpi_in_background) {
		/* The communication thread shares the cores with the program's
		 * compute: a short spin, then sleep. */
		for (int i = 0; i < 50; i++) {
			cpu_relax();
			if (reached(c, target))
				return 0;
		}
	} else if (spin_until(s, c, target, s->oversubscribed) == 0) {
		return 0;
	}
	for (;;) {
		uint32_t v = atomic_load_explicit(&c->seq, memory_order_acquire);
		int64_t now;

		if ((int32_t)(v - target) >= 0)
			return 0;
		if (atomic_load(&s->hdr->abort))
			return ddpi_shm_abort_error(s, what);
		/* Its last step is published before its mark: look once more. */
		uint32_t fin = atomic_load(&s->hdr->finished[q]);
		if (fin != 0 && (int32_t)(atomic_load(&c->seq) - target) < 0)
			return finished_error(s, q, fin - 1, what);
		now = util_now_ms();
		if (now >= deadline) {
			ddpi_err(-ETIMEDOUT, "%s: timed out waiting for rank %d (pid %d)", what,
				 s->hdr->ranks[q], s->hdr->pids[q]);
			ddpi_caused_by(-ETIMEDOUT, WORKENV_CAUSE_LATE_FMT, s->hdr->ranks[q],
				       s->hdr->pids[q]);
			ddpi_shm_abort(s, -ETIMEDOUT, ddp_errmsg());
			return -ETIMEDOUT;
		}
		/* Liveness costs four syscalls: look at most every 100 ms. */
		if (s->liveness && now >= s->next_check) {
			/* A rank may publish its last step, its abort (a leader
			 * whose node failed) or its finish, and exit, since this
			 * loop looked: look once more, or the reason it gave is
			 * lost for "exited". */
			if (!pid_alive(s->hdr->pids[q])) {
				if ((int32_t)(atomic_load(&c->seq) - target) >= 0)
					return 0;
				if (atomic_load(&s->hdr->abort))
					return ddpi_shm_abort_error(s, what);
				fin = atomic_load(&s->hdr->finished[q]);
				if (fin != 0)
					return finished_error(s, q, fin - 1, what);
				ddpi_err(DDP_EPEER, "%s: rank %d (pid %d) exited", what,
					 s->hdr->ranks[q], s->hdr->pids[q]);
				ddpi_caused_by(DDP_EPEER, "rank %d (pid %d) exited",
					       s->hdr->ranks[q], s->hdr->pids[q]);
				ddpi_shm_abort(s, DDP_EPEER, ddp_errmsg());
				return DDP_EPEER;
			}
			s->next_check = now + 100;
		}
		int64_t left = deadline - now;
		if (left > 100)
			left = 100;
		struct timespec ts = {left / 1000, (long)(left % 1000) * 1000000L};
		atomic_fetch_add(&c->waiters, 1);
		v = atomic_load(&c->seq);
		if ((int32_t)(v - target) < 0)
			futex(&c->seq, FUTEX_WAIT, v, &ts);
		atomic_fetch_sub(&c->waiters, 1);
	}
}

int ddpi_shm_wait_all(struct ddpi_shm *s, uint32_t target, int64_t deadline, const char *what)
{
	for (int q = 0; q < s->lws; q++) {
		int rc;
		if (q == s->me)
			continue;
		if ((rc = ddpi_shm_wait(s, q, target, deadline, what)) < 0)
			return rc;
	}
	return 0;
}

int ddpi_shm_acquire_slot(struct ddpi_shm *s, int64_t deadline, const char *what, int *slot)
{
	int k = s->next_slot;

	s->next_slot = (k + 1) % s->nslots;
	*slot = k;
	if (s->slot_done[k] == 0)
		return 0;
	return ddpi_shm_wait_all(s, s->slot_done[k], deadline, what);
}

void ddpi_shm_hold_slot(struct ddpi_shm *s, int slot, uint32_t until)
{
	s->slot_done[slot] = until;
}

void ddpi_shm_release_slot(struct ddpi_shm *s, int slot)
{
	ddpi_shm_hold_slot(s, slot, s->seq + 1);
}

void ddpi_shm_abort(struct ddpi_shm *s, int code, const char *msg)
{
	uint32_t zero = 0, me = (uint32_t)s->me + 1;

	/* Claim (high bit set), write the message, then publish it. */
	if (atomic_compare_exchange_strong(&s->hdr->abort, &zero, me | ABORT_CLAIMED)) {
		s->hdr->abort_code = code;
		snprintf(s->hdr->abort_msg, sizeof(s->hdr->abort_msg), "%s", msg);
		snprintf(s->hdr->abort_cause, sizeof(s->hdr->abort_cause), "%s", ddpi_cause());
		atomic_store(&s->hdr->abort, me);
	}
	for (int q = 0; q < s->lws; q++)
		futex(&ctl_of(s, q)->seq, FUTEX_WAKE, INT_MAX, NULL);
}

void ddpi_shm_begin(struct ddpi_shm *s, const struct ddpi_coll_desc *d)
{
	struct ddpi_coll_desc *mine = &ctl_of(s, s->me)->desc[s->ncoll % DDPI_DESC_SLOTS];

	/* Plain stores: the publish that follows (seq_cst) makes them visible. */
	*mine = *d;
	mine->ncoll = s->ncoll;
	mine->pad = 0;
	if (s->outer)
		mine->outer = *s->outer;
	else
		memset(&mine->outer, 0, sizeof(mine->outer));
}

void ddpi_shm_end(struct ddpi_shm *s)
{
	s->ncoll++;
}

static void describe(const struct ddpi_shm *s, const struct ddpi_coll_desc *d, char *buf,
		     size_t len)
{
	static const char *const ops[] = {"sum", "avg", "min", "max"};

	if (d->outer.kind) { /* the caller's call names it best */
		ddpi_call_describe(&d->outer, buf, len);
		return;
	}
	switch (d->kind) {
	case DDPI_ALL_REDUCE:
		snprintf(buf, len, "all_reduce(%llu x %s, %s)", (unsigned long long)d->count,
			 ddpi_dtype_name((enum ddp_dtype)d->dt), d->op < 4 ? ops[d->op] : "?");
		break;
	case DDPI_BROADCAST:
		snprintf(buf, len, "broadcast(%llu bytes from rank %d)",
			 (unsigned long long)d->count,
			 d->root >= 0 && d->root < s->lws ? s->hdr->ranks[d->root] : -1);
		break;
	case DDPI_ALL_GATHER:
		snprintf(buf, len, "all_gather(%llu bytes each)", (unsigned long long)d->count);
		break;
	case DDPI_BARRIER:
		snprintf(buf, len, "barrier()");
		break;
	default:
		snprintf(buf, len, "an unknown collective");
	}
}

int ddpi_shm_check(struct ddpi_shm *s, int q, const char *what)
{
	const struct ddpi_coll_desc *mine = &ctl_of(s, s->me)->desc[s->ncoll % DDPI_DESC_SLOTS];
	struct ddpi_coll_desc theirs = ctl_of(s, q)->desc[s->ncoll % DDPI_DESC_SLOTS];
	char a[96], b[96];

	if ((int32_t)(theirs.ncoll - mine->ncoll) > 0)
		return 0; /* q moved on: it checked this collective against us */
	if (theirs.ncoll != mine->ncoll) {
		ddpi_err(
			-EINVAL,
			"%s: mismatched collectives: rank %d is still in an earlier one (different "
			"sizes, or a call missing on some rank)",
			what, s->hdr->ranks[q]);
		ddpi_shm_abort(s, -EINVAL, ddp_errmsg());
		return -EINVAL;
	}
	if (!memcmp(mine, &theirs, sizeof(*mine)))
		return 0;
	describe(s, &theirs, a, sizeof(a));
	describe(s, mine, b, sizeof(b));
	ddpi_err(-EINVAL, "%s: mismatched collectives: rank %d called %s while rank %d called %s",
		 what, s->hdr->ranks[q], a, s->hdr->ranks[s->me], b);
	ddpi_shm_abort(s, -EINVAL, ddp_errmsg());
	return -EINVAL;
}
