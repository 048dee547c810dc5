/* shm: one shared-memory segment per node for the ranks of that node, and the
 * progress counters they synchronize on.
 *
 * Layout: a header page (attach count, abort flag, pids and global ranks), one
 * cache line of control per local rank (a progress counter and its futex
 * waiter count), then per local rank `nslots` staging slots of `slot_bytes`.
 *
 * Lifetime: local rank 0 creates the segment under a name made of the run id,
 * restart count, master port and node (and ddprun's DDP_SHM_NONCE); the others
 * open it. As soon as every local rank has mapped it, it is unlinked, so no
 * crash after init can leave it behind (a failure during init unlinks it too;
 * if every local rank dies during init, ddprun removes it by its nonce).
 *
 * Synchronization: each rank only ever increments its own counter (publish);
 * waiting means "until peer p's counter reaches t", spinning briefly then
 * sleeping on a futex, always with a deadline. Every rank publishes the same
 * number of times per collective, so targets are just local publish counts.
 * A failure on any rank sets the abort flag and wakes everyone: the others fail
 * at once instead of waiting for their own timeouts. */
#ifndef DDP_SHM_H
#define DDP_SHM_H

#include <stdint.h>
#include <stddef.h>

#include "coll_call.h"
#include "ddp_internal.h"

/* Internal: not exported from libddp.so. */
#pragma GCC visibility push(hidden)

#define DDPI_SHM_MAX_LOCAL 256

/* What a rank is about to do, so that mismatched collectives (a classic
 * source of silent hangs) fail at once with both sides named. */
struct ddpi_coll_desc {
	uint32_t kind;
	uint32_t dt, op;
	int32_t root;	/* local rank of a broadcast's root */
	uint64_t count; /* elements (all_reduce) or bytes */
	uint32_t ncoll; /* which collective of this rank (set by ddpi_shm_begin) */
	uint32_t pad;
	/* The caller's whole call (ddpi_shm's outer, set by ddpi_shm_begin): a step
	 * of a multi-node collective looks alike on ranks whose calls differ
	 * (avg and sum both sum inside the node; a root on another node). */
	struct ddpi_call outer;
};

#define DDPI_DESC_SLOTS 4 /* descriptors kept per rank (a ring) */

/* A rank's part of the single-copy path (shm_cma.c), in its control line. */
struct ddpi_cma_ctl {
	/* Init: a word of this rank's memory the peers try to read. */
	uint64_t probe_addr, probe_val;
	int32_t ppid;
	int32_t ok;	    /* 1: read every peer's word; 0: DDP_SHM_CMA=0; else -errno */
	uint64_t min_bytes; /* this rank's threshold (local rank 0's is used) */
	/* Each single-copy collective: the buffer the peers read from, and
	 * whether this rank's reads failed (written after them). */
	uint64_t addr, len;
	int32_t failed;
	int32_t huge; /* init: anonymous memory goes on huge pages here (THP "always") */
	int32_t slow; /* init: the kernel copies much slower than memcpy (shm_cma.c) */
	/* all_reduce (failed 1: a read failed, 2: a write): where this rank's
	 * slice stopped (an element), and the peer whose transfer failed. */
	uint64_t resume;
	int32_t fail_peer, fail_err; /* global rank; errno */
};

/* A rank's part of the direct paths (shm_mem.c), in its control line: per
 * collective, the region holding its buffer (id 0: none) and whether it
 * mapped every peer's; kept by the parity of the collective's number, so
 * that a rank may declare its next collective while a slower peer still
 * reads what it declared for this one. */
struct ddpi_zc_decl {
	uint64_t id, len, off;
	uint64_t ino; /* of the region's memfd: the peer checks what it opened */
	int32_t fd, ok;
};
struct ddpi_zc_ctl {
	struct ddpi_zc_decl decl[2];
	_Atomic uint64_t freed; /* regions this rank has freed: peers drop their mappings */
};

#define DDPI_ZC_CACHE 64 /* peer regions kept mapped, per peer (a model's buckets) */
/* The direct paths (shm_direct.c) from: all_gather and broadcast, which only
 * copy, from 32 KiB (2 ranks, medians of 5: all_gather of 64 KiB each 2.7 us
 * against 4.1 through the kernel's single copy, 128 KiB 4.3 against 6.7;
 * broadcast of 64 KiB 1.9 against 3.7); all_reduce from 256 KiB. Since it
 * sums with no wait in between (2026-12-06), the direct all_reduce beats the
 * staged one from 64 KiB on shared buffers (2 ranks 64 KiB 2.9 us against
 * 7.5, 128 KiB 3.4 against 13), but the step that agrees on it costs every
 * call of that size about a microsecond, private buffers' too (6.6 us at 64
 * KiB): a bucket is rarely that small. ddp_alloc shares memory from the
 * smaller. */
#define DDPI_ZC_MIN_BYTES	 (32 * 1024)
#define DDPI_ZC_REDUCE_MIN_BYTES (256 * 1024)

struct ddpi_shm_region;
struct ddpi_shm_pmap;

struct ddpi_shm {
	int lws, me;
	void *map;
	size_t map_len;
	struct shm_hdr *hdr;
	struct shm_ctl *ctl;
	size_t slot_bytes;
	int nslots;
	char **stage;	/* stage[q]: rank q's staging area (nslots * slot_bytes) */
	uint32_t seq;	/* publishes so far (the same on every rank between collectives) */
	uint32_t ncoll; /* collectives so far (the same on every rank) */
	uint32_t *slot_done;
	int next_slot;
	int oversubscribed; /* more local ranks than usable cores */
	int liveness;	    /* peers' pids are in our pid namespace: check them */
	int64_t next_check; /* next peer liveness check (util_now_ms) */
	char name[200];
	int unlinked;
	const struct ddpi_call *outer; /* the call this step belongs to (cpu.c), or NULL */
	size_t cma_min;		       /* single copy from this many bytes; 0: never (agreed) */
	int cma_slow; /* the kernel copies slowly (local rank 0's timing): windows (shm_coll.c) */
	uint64_t cma_probe; /* the word the peers read at init */
	int cma_huge;	    /* THP "always" (local rank 0's reading): pinning is cheap */
	int cma_warn;	    /* DDP_SHM_CMA=1: say when it is not available */
	int cma_test_fail;  /* test hook: fail the probe (1), the next read (2) or write (3) */
	int cma_test_nth;   /* test hook: the n-th read or write from now */
	char *cma_scratch;  /* all_reduce: a chunk of each peer's part, lws - 1 */
	size_t cma_chunk;   /* bytes of one peer's part in cma_scratch */
	/* shm_mem.c */
	struct ddpi_shm_region *regions; /* mine, shared */
	uint64_t region_ids;
	struct ddpi_shm_pmap *pmaps; /* lws * DDPI_ZC_CACHE: the peers' I mapped */
	uint64_t *pmap_freed;	     /* each peer's freed count when its mappings were checked */
	uint64_t pmap_clock;	     /* for the least recently used mapping */
	int zc_off;	      /* DDP_SHM_DIRECT=0, or a mapping failed (agreed): no direct path */
	int zc_test_pause_ms; /* test hook (shm_mem.c) */
	int zc_test_stop_nth; /* test hook (shm_direct.c): stop before the nth copy */
};

/* The name errors give a step: the program's call it belongs to (a
 * multi-node all_reduce hands its result down by the node's broadcast step,
 * whose failure must read "all_reduce: ..."), else the step's own. */
static inline const char *ddpi_shm_what(const struct ddpi_shm *s, const char *step)
{
	const char *name = s->outer ? ddpi_call_name(s->outer) : NULL;

	return name ? name : step;
}

/* Creates (local rank 0) or opens the node's segment and waits until every local
 * rank has attached; then unlinks it. */
int ddpi_shm_open(const struct ddp_env *env, int64_t deadline, struct ddpi_shm **out);
void ddpi_shm_close(struct ddpi_shm *s);

/* The global rank of local rank q (as registered in the header). */
int ddpi_shm_rank_of(const struct ddpi_shm *s, int q);
/* The local index of global rank r, or -1 if it is on another node. */
int ddpi_shm_local_of(const struct ddpi_shm *s, int rank);

/* Publish progress: my counter += 1. Returns the new value. */
uint32_t ddpi_shm_publish(struct ddpi_shm *s);
/* Wait until peer q's counter reaches target. */
int ddpi_shm_wait(struct ddpi_shm *s, int q, uint32_t target, int64_t deadline, const char *what);
/* Wait until every peer's counter reaches target. */
int ddpi_shm_wait_all(struct ddpi_shm *s, uint32_t target, int64_t deadline, const char *what);
/* A free staging slot (every peer is done with its previous use). */
int ddpi_shm_acquire_slot(struct ddpi_shm *s, int64_t deadline, const char *what, int *slot);
/* This rank has finished reading the peers' copies of slot's current use. No
 * publish is needed: a rank reads before its next publish, whatever that is,
 * so a peer's counter reaching our next value proves it is done too. */
void ddpi_shm_release_slot(struct ddpi_shm *s, int slot);
/* The peers read slot until their counters reach until (a pipeline that
 * knows when its peers are done with it). */
void ddpi_shm_hold_slot(struct ddpi_shm *s, int slot, uint32_t until);
static inline char *ddpi_shm_slot(const struct ddpi_shm *s, int q, int slot)
{
	return s->stage[q] + (size_t)slot * s->slot_bytes;
}
/* Declare this rank's next collective (before its first publish); check, once
 * a wait showed that q has published in it, that q declared the same one;
 * close it. A peer that already moved on (a broadcast's root does not wait)
 * may have reused the slot; it compared with us itself while it was there. */
void ddpi_shm_begin(struct ddpi_shm *s, const struct ddpi_coll_desc *d);
int ddpi_shm_check(struct ddpi_shm *s, int q, const char *what);
/* ddpi_shm_check with every peer; then publish, wait for every peer and check
 * every peer (shm_coll.c). */
int ddpi_shm_check_all(struct ddpi_shm *s, const char *what);
int ddpi_shm_sync_all(struct ddpi_shm *s, int64_t deadline, const char *what);
void ddpi_shm_end(struct ddpi_shm *s);
/* Tell every local rank that this one failed with code (they stop waiting
 * at once, DDP_EPEER; -EINVAL where code is: calls that disagree are every
 * rank's error). The calling thread's current cause (ddpi_cause) goes
 * along: theirs is the same origin, or this rank when it failed on its own. */
void ddpi_shm_abort(struct ddpi_shm *s, int code, const char *msg);

/* This rank called ddp_finalize after ncalls collective calls: a peer still
 * waiting on it for a step fails at once, naming it (-EINVAL), instead of
 * waiting for the timeout; with the message of its call that was refused
 * for its arguments (refused, not NULL) rather than "the ranks made
 * different numbers of calls". Nothing once a rank aborted. */
void ddpi_shm_finish(struct ddpi_shm *s, uint64_t ncalls, const char *refused);

/* Whether a local rank gave up on the current collective (the abort flag). */
int ddpi_shm_aborted(const struct ddpi_shm *s);
/* The error of the local rank that gave up, as the call what fails with it
 * (its code: DDP_EPEER, or -EINVAL for calls that disagree). */
int ddpi_shm_abort_error(struct ddpi_shm *s, const char *what);
/* A rank's single-copy control (in its control line), and its pid. */
struct ddpi_cma_ctl *ddpi_shm_cma_ctl(const struct ddpi_shm *s, int q);
int ddpi_shm_pid_of(const struct ddpi_shm *s, int q);

/* Shared regions (shm_mem.c): memory the local peers map, so that an
 * all_reduce of it reads their buffers directly. mem_alloc: 0, or -ENOTSUP
 * (turned off) or another negative errno: the caller uses private memory.
 * mem_free: -ENOENT when p is not a region's. zc_begin (every rank, in a
 * collective; or zc_declare, a step of the caller's and zc_decide): 1 with
 * peer[q] = rank q's buffer, 0: another path, < 0 error. */
int ddpi_shm_mem_init(struct ddpi_shm *s, int rank);
void ddpi_shm_mem_close(struct ddpi_shm *s);
int ddpi_shm_mem_alloc(struct ddpi_shm *s, size_t bytes, void **p);
int ddpi_shm_mem_free(struct ddpi_shm *s, void *p);
struct ddpi_zc_ctl *ddpi_shm_zc_ctl(const struct ddpi_shm *s, int q);
int ddpi_shm_zc_begin(struct ddpi_shm *s, void *buf, size_t bytes, int64_t deadline,
		      const char *what, char **peer);
/* zc_begin in parts, for a path whose own first step carries the agreement
 * (a staged broadcast): declare before that step's publish; after its wait
 * for every rank, zc_declared says whether q's buffer is in a region and
 * zc_decide what zc_begin returns. */
void ddpi_shm_zc_declare(struct ddpi_shm *s, const void *buf, size_t bytes);
int ddpi_shm_zc_declared(const struct ddpi_shm *s, int q);
int ddpi_shm_zc_decide(struct ddpi_shm *s, void *buf, int64_t deadline, const char *what,
		       char **peer);

/* Direct collectives (shm_direct.c), once zc_begin returned 1 (peer[q]: rank
 * q's buffer, mapped here; send for all_gather). */
int ddpi_shm_all_reduce_direct(struct ddpi_shm *s, char *const *peer, size_t count,
			       enum ddp_dtype dt, enum ddp_op op, int avg_div, int64_t deadline);
int ddpi_shm_all_gather_direct(struct ddpi_shm *s, char *const *peer, void *recv, size_t bytes,
			       const int *pos, int stream, int64_t deadline);
int ddpi_shm_broadcast_direct(struct ddpi_shm *s, char *const *peer, size_t bytes, int root,
			      int stream, int64_t deadline);
/* Rank q's slice [lo, hi) of a chunk of m elements (es bytes each) split over
 * n ranks, in whole cache lines (shm_coll.c). */
void ddpi_shm_slice_bounds(size_t m, int n, int q, size_t es, size_t *lo, size_t *hi);
/* A broadcast's slice k of n (whole pages) that the root writes into the
 * reader k ranks after it (shm_cma.c). */
void ddpi_shm_bcast_slice(size_t bytes, int n, int k, size_t *lo, size_t *hi);

/* Single copy (shm_cma.c): at init, whether every local rank can read and
 * write every other's memory with process_vm_readv/writev (Linux CMA),
 * agreed through the segment; then all_gather (my own part included) and
 * broadcast of at least cma_min bytes read straight from the peers' buffers.
 * They return 1 when the transfers failed on some rank (every rank then
 * returns 1, and the single copy is off from now on): the caller moves the
 * data the staged way. */
int ddpi_shm_cma_init(struct ddpi_shm *s, const struct ddp_env *env, int64_t deadline);
/* declared: ddpi_shm_cma_declare was called and a step taken since (the
 * direct paths' agreement), so the peers know the buffer already. */
void ddpi_shm_cma_declare(struct ddpi_shm *s, const void *buf, size_t bytes);
int ddpi_shm_cma_broadcast(struct ddpi_shm *s, void *buf, size_t bytes, int root, int declared,
			   int64_t deadline);
int ddpi_shm_cma_all_gather(struct ddpi_shm *s, const void *send, void *recv, size_t bytes,
			    const int *pos, int declared, int64_t deadline);
/* all_reduce of a large message (the caller's buffer reduced in place). A
 * failed read leaves the rest of that rank's slice untouched everywhere:
 * every rank returns 1, and the caller all_reduces what each rank q left
 * (reduce_left, the same on every rank) the staged way. A failed write
 * cannot be undone (some peers hold sums, others not): every rank fails. */
int ddpi_shm_cma_all_reduce(struct ddpi_shm *s, void *buf, size_t count, enum ddp_dtype dt,
			    enum ddp_op op, int avg_div, int declared, int64_t deadline);
void ddpi_shm_cma_reduce_left(const struct ddpi_shm *s, int q, size_t count, size_t es, size_t *lo,
			      size_t *hi);

/* Collectives among the node's ranks (shm_coll.c). */
int ddpi_shm_all_reduce(struct ddpi_shm *s, void *buf, size_t count, enum ddp_dtype dt,
			enum ddp_op op, int avg_div, int64_t deadline);
int ddpi_shm_broadcast(struct ddpi_shm *s, void *buf, size_t bytes, int root_local,
		       int64_t deadline);
/* recv + pos[q] * bytes receives local rank q's send, for every q. */
int ddpi_shm_all_gather(struct ddpi_shm *s, const void *send, void *recv, size_t bytes,
			const int *pos, int64_t deadline);
int ddpi_shm_barrier(struct ddpi_shm *s, int64_t deadline);
/* A barrier that compares every rank's call (ddpi_shm's outer), errors named
 * after what. */
int ddpi_shm_agree(struct ddpi_shm *s, int64_t deadline, const char *what);

#pragma GCC visibility pop

#endif
