/* shm_mem: memory the ranks of a node read from one another directly, so that
 * a collective of it needs no staging copy (shm_direct.c).
 *
 * Why: a staged all_reduce copies each rank's buffer into the slots before
 * summing it; measured here (bench/allreduce, 2 ranks, float32) the direct
 * one took 6.0-6.4 ms at 64 MiB against 9.9-10.2 ms staged, 1.2-1.4 ms at
 * 16 MiB against 2.3-2.5. The cpu backend hands out such memory for the
 * reducer's buckets (cpu.c mem_alloc), where DDP's gradients live.
 *
 * A region is a memfd of its own, mapped shared. No name: nothing is left in
 * /dev/shm when a rank dies, and the memory goes with the last mapping. A
 * peer maps it through /proc/<pid>/fd/<fd>, which takes the same permission
 * as reading the owner's memory (PTRACE_MODE_READ, which Yama leaves alone),
 * the first time a collective names it (checking the file by its inode),
 * and keeps the mapping (DDPI_ZC_CACHE per peer, least recently used out
 * first; all of a peer's once it has freed one, so that the memory it freed
 * goes). Allocations under DDPI_ZC_MIN_BYTES, which no direct path takes,
 * stay private.
 *
 * Agreement, per collective (ddpi_shm_zc_begin): every rank says which of
 * its regions holds its buffer (or none); after a step together each knows
 * every rank's; if all are in regions each maps what it lacks and says
 * whether it could; after a second step the path is the same on every rank.
 * A mapping that fails turns the direct path off on every rank (said once by
 * the rank that failed). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

#include "shm.h"

struct ddpi_shm_region {
	struct ddpi_shm_region *next;
	char *base;
	size_t len;
	int fd;
	uint64_t id, ino;
};

/* A peer's region as this rank maps it. */
struct ddpi_shm_pmap {
	uint64_t id; /* 0: free entry */
	char *base;
	size_t len;
	uint64_t used; /* pmap_clock when last used */
};

/* The regions list is read by the communication thread (a bucket's
 * all_reduce) while the user's thread may allocate or free. */
static pthread_mutex_t regions_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t page_round(size_t bytes)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);

	return ((bytes ? bytes : 1) + pg - 1) & ~(pg - 1);
}

/* A memfd's pages are not charged until touched, so any size would map: one
 * no memory can hold would end in SIGBUS or the OOM killer once used. What
 * malloc's heuristic overcommit refuses (more than RAM and swap together)
 * is refused here too, and the private fallback then says no as malloc
 * does. */
static int beyond_memory(size_t bytes)
{
	struct sysinfo si;

	if (sysinfo(&si) != 0)
		return 0;
	return (unsigned __int128)bytes >
	       ((unsigned __int128)si.totalram + si.totalswap) * si.mem_unit;
}

int ddpi_shm_mem_alloc(struct ddpi_shm *s, size_t bytes, void **p)
{
	struct ddpi_shm_region *r;
	size_t len;
	int fd;

	struct stat st;

	/* Below the direct paths' threshold sharing buys nothing, and would
	 * cost a descriptor and a page each. */
	if (s->zc_off || bytes < DDPI_ZC_MIN_BYTES || bytes > SIZE_MAX / 2)
		return -ENOTSUP;
	if (beyond_memory(bytes))
		return -ENOMEM;
	len = page_round(bytes);
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	fd = memfd_create("libddp-shared", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)len) < 0 || fstat(fd, &st) < 0) {
		int err = -errno;
		if (fd >= 0)
			close(fd);
		free(r);
		return err;
	}
	r->base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (r->base == MAP_FAILED) {
		int err = -errno;
		close(fd);
		free(r);
		return err;
	}
	r->len = len;
	r->fd = fd;
	r->ino = (uint64_t)st.st_ino;
	pthread_mutex_lock(&regions_lock);
	r->id = ++s->region_ids;
	r->next = s->regions;
	s->regions = r;
	pthread_mutex_unlock(&regions_lock);
	*p = r->base;
	return 0;
}

static void region_free(struct ddpi_shm_region *r)
{
	munmap(r->base, r->len);
	close(r->fd);
	free(r);
}

int ddpi_shm_mem_free(struct ddpi_shm *s, void *p)
{
	struct ddpi_shm_region **pp, *r = NULL;

	pthread_mutex_lock(&regions_lock);
	for (pp = &s->regions; *pp; pp = &(*pp)->next)
		if ((*pp)->base == p) {
			r = *pp;
			*pp = r->next;
			break;
		}
	pthread_mutex_unlock(&regions_lock);
	if (!r)
		return -ENOENT;
	region_free(r);
	/* The peers' mappings would keep its memory: they drop theirs at
	 * their next direct collective. */
	atomic_fetch_add(&ddpi_shm_zc_ctl(s, s->me)->freed, 1);
	return 0;
}

/* Rank q's declaration for the current collective. */
static struct ddpi_zc_decl *decl_of(const struct ddpi_shm *s, int q)
{
	return &ddpi_shm_zc_ctl(s, q)->decl[s->ncoll & 1];
}

int ddpi_shm_zc_declared(const struct ddpi_shm *s, int q)
{
	return decl_of(s, q)->id != 0;
}

/* Says which region holds [buf, buf + bytes) into my control line. */
void ddpi_shm_zc_declare(struct ddpi_shm *s, const void *buf, size_t bytes)
{
	struct ddpi_zc_decl *my = decl_of(s, s->me);
	uintptr_t b = (uintptr_t)buf;

	my->id = 0;
	my->ok = 0;
	if (s->zc_off)
		return;
	pthread_mutex_lock(&regions_lock);
	for (struct ddpi_shm_region *r = s->regions; r; r = r->next) {
		uintptr_t lo = (uintptr_t)r->base;
		if (b >= lo && b - lo <= r->len && bytes <= r->len - (b - lo)) {
			my->id = r->id;
			my->ino = r->ino;
			my->fd = r->fd;
			my->len = r->len;
			my->off = b - lo;
			break;
		}
	}
	pthread_mutex_unlock(&regions_lock);
}

static void pmap_drop(struct ddpi_shm_pmap *pm)
{
	if (pm->id)
		munmap(pm->base, pm->len);
	memset(pm, 0, sizeof(*pm));
}

/* Peer q's declared region, mapped here (from the cache or now); NULL with
 * *err set when it cannot be. */
static char *peer_base(struct ddpi_shm *s, int q, int *err)
{
	const struct ddpi_zc_decl *z = decl_of(s, q);
	struct ddpi_shm_pmap *pm = s->pmaps + (size_t)q * DDPI_ZC_CACHE;
	uint64_t freed = atomic_load(&ddpi_shm_zc_ctl(s, q)->freed);
	char path[64];
	struct stat st;
	void *m;
	int fd, i, lru = 0;

	/* q freed a region since: which one is not said, so all go (the live
	 * ones are mapped again as they come; frees are rare). */
	if (freed != s->pmap_freed[q]) {
		for (i = 0; i < DDPI_ZC_CACHE; i++)
			pmap_drop(&pm[i]);
		s->pmap_freed[q] = freed;
	}
	for (i = 0; i < DDPI_ZC_CACHE; i++) {
		if (pm[i].id == z->id && pm[i].len == z->len) {
			pm[i].used = ++s->pmap_clock;
			return pm[i].base;
		}
		if (pm[i].used < pm[lru].used)
			lru = i;
	}
	snprintf(path, sizeof(path), "/proc/%d/fd/%d", ddpi_shm_pid_of(s, q), (int)z->fd);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		*err = -errno;
		return NULL;
	}
	/* The descriptor is the region q means (not one reused meanwhile, nor
	 * one of another pid namespace's process mounted as /proc). */
	if (fstat(fd, &st) < 0 || (uint64_t)st.st_ino != z->ino || (uint64_t)st.st_size < z->len) {
		close(fd);
		*err = -ESTALE;
		return NULL;
	}
	m = mmap(NULL, z->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	*err = m == MAP_FAILED ? -errno : 0;
	close(fd);
	if (m == MAP_FAILED)
		return NULL;
	/* The least recently used entry makes room. */
	pmap_drop(&pm[lru]);
	pm[lru].id = z->id;
	pm[lru].base = m;
	pm[lru].len = z->len;
	pm[lru].used = ++s->pmap_clock;
	return m;
}

int ddpi_shm_zc_begin(struct ddpi_shm *s, void *buf, size_t bytes, int64_t deadline,
		      const char *what, char **peer)
{
	int rc;

	ddpi_shm_zc_declare(s, buf, bytes);
	if ((rc = ddpi_shm_sync_all(s, deadline, what)) < 0)
		return rc;
	return ddpi_shm_zc_decide(s, buf, deadline, what, peer);
}

int ddpi_shm_zc_decide(struct ddpi_shm *s, void *buf, int64_t deadline, const char *what,
		       char **peer)
{
	struct ddpi_zc_decl *my = decl_of(s, s->me);
	int rc, err = 0, q;

	/* What the peers declared stays put while it is read: a rank's next
	 * declaration goes to the other parity, and it cannot get past its
	 * next collective's first step (every path waits for every rank there)
	 * before the others have left this one (DDP_TEST_ZC_PAUSE makes one
	 * late, ddp_coll zcrace). */
	if (s->zc_test_pause_ms > 0) /* test hook: a reader that is slow to look */
		nanosleep(&(struct timespec){s->zc_test_pause_ms / 1000,
					     s->zc_test_pause_ms % 1000 * 1000000L},
			  NULL);
	for (q = 0; q < s->lws; q++)
		if (!ddpi_shm_zc_declared(s, q))
			return 0; /* the same answer on every rank: no second step */
	my->ok = 1;
	for (q = 0; q < s->lws && my->ok; q++) {
		const struct ddpi_zc_decl *z = decl_of(s, q);
		char *base = q == s->me ? (char *)buf - z->off : peer_base(s, q, &err);
		if (base == NULL) {
			my->ok = 0;
			break;
		}
		peer[q] = base + z->off;
	}
	if ((rc = ddpi_shm_wait_all(s, ddpi_shm_publish(s), deadline, what)) < 0)
		return rc; /* a peer that gave up on this call may have freed its buffer */
	if (!my->ok)	   /* said only now: the peers were all still in this call */
		fprintf(stderr,
			"[rank%d] libddp: %s: cannot map the shared buffer of rank %d (%s): no "
			"collective reads the peers' buffers in place from now on\n",
			ddpi_shm_rank_of(s, s->me), what, ddpi_shm_rank_of(s, q), strerror(-err));
	for (q = 0; q < s->lws; q++)
		if (!decl_of(s, q)->ok) {
			s->zc_off = 1; /* every rank saw the same flags */
			return 0;
		}
	return 1;
}

int ddpi_shm_mem_init(struct ddpi_shm *s, int rank)
{
	/* Test hook: DDP_TEST_ZC_PAUSE=<rank>:<ms>, that rank pauses after the
	 * agreement's first step, before it reads what the others declared. */
	const char *v = getenv("DDP_TEST_ZC_PAUSE");

	if (v && strchr(v, ':') && atoi(v) == rank)
		s->zc_test_pause_ms = atoi(strchr(v, ':') + 1);
	/* DDP_TEST_ZC_STOP=<rank>:<n>: that rank stops itself (SIGSTOP) before
	 * its nth copy of a direct collective, or at its last step after them. */
	v = getenv("DDP_TEST_ZC_STOP");
	if (v && strchr(v, ':') && atoi(v) == rank)
		s->zc_test_stop_nth = atoi(strchr(v, ':') + 1);
	s->pmaps = calloc((size_t)s->lws * DDPI_ZC_CACHE, sizeof(*s->pmaps));
	s->pmap_freed = calloc((size_t)s->lws, sizeof(*s->pmap_freed));
	return s->pmaps && s->pmap_freed ? 0 : -ENOMEM;
}

void ddpi_shm_mem_close(struct ddpi_shm *s)
{
	struct ddpi_shm_region *r, *next;

	for (r = s->regions; r; r = next) {
		next = r->next;
		region_free(r);
	}
	s->regions = NULL;
	for (size_t i = 0; s->pmaps && i < (size_t)s->lws * DDPI_ZC_CACHE; i++)
		if (s->pmaps[i].id)
			munmap(s->pmaps[i].base, s->pmaps[i].len);
	free(s->pmaps);
	free(s->pmap_freed);
	s->pmaps = NULL;
	s->pmap_freed = NULL;
}
