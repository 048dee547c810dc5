/* hang_torch: where a PyTorch rank is in torch.distributed, read from its
 * native stack, and the verdict's lines about such ranks (see hang.h).
 *
 * A rank without libddp reports no collectives, but PyTorch's waits are in
 * its stack by name (eu-stack and gdb both demangle; the C++ symbols of
 * libtorch are exported). The rank's main thread decides, as it is where
 * the program is (a thread of its own may wait while the main one sleeps):
 * blocked in a collective or a send/recv it waits in c10d::Work::wait or an
 * override (gloo, MPI; NCCL's with blocking wait in WorkNCCL), or in DDP's
 * backward (Reducer::finalize_backward, a future's wait); joining its
 * group or waiting on a key it is in the store's client (TCPStore,
 * PrefixStore, gloo's rendezvous). A rank whose gloo process group runs
 * (its threads are in the stack) but whose main thread waits in neither is
 * in its own code; one whose other thread waits says both; a Python rank
 * with nothing of torch.distributed at all has not formed its group yet.
 * NCCL's collectives run on the GPU: a rank waiting for one blocks in the
 * CUDA runtime, whose symbols libtorch does not export, so a rank with NCCL
 * or CUDA in its stack and no named wait is not placed, nor is one whose
 * stack did not come whole. A rank that waits for its one Python program
 * (a wrapper script's, a launcher's) is read from that program's stack
 * (hang_dump.c, stack_process). */
#include "hang.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text.h"

/* Where the line [line, end of line) turns to the frame's library or source
 * (gdb's "... from /usr/local/cuda/lib/x.so", "... at f.c:9"), which names
 * no function (a directory called cuda12 is no GPU wait); NULL: nowhere. */
static const char *path_of(const char *line, const char *end)
{
	const char *nl = memchr(line, '\n', (size_t)(end - line));
	size_t n = nl ? (size_t)(nl - line) : (size_t)(end - line);
	const char *from = memmem(line, n, " from /", 7), *at = memmem(line, n, ") at ", 5);

	return from == NULL ? at : at == NULL || from < at ? from : at;
}

/* The stack text (not NUL-terminated) names needle in a frame's function.
 * Linear: each line's start and path are found once. */
static bool has(const char *s, size_t len, const char *needle)
{
	size_t nlen = strlen(needle);
	const char *end = s + len, *p = s, *line = s, *path = path_of(s, end), *m;

	while ((m = memmem(p, (size_t)(end - p), needle, nlen)) != NULL) {
		/* (only the text since the last match: it is line's after it) */
		const char *nl = memrchr(p, '\n', (size_t)(m - p));

		if (nl != NULL) { /* a later line than the last match's */
			line = nl + 1;
			path = path_of(line, end);
		}
		if (path == NULL || m < path)
			return true;
		p = m + 1;
	}
	return false;
}

static bool has_any(const char *s, size_t len, const char *const *needles)
{
	for (; *needles != NULL; needles++)
		if (has(s, len, *needles))
			return true;
	return false;
}

/* Demangled (eu-stack, gdb) and mangled (a tool that does not demangle):
 * c10d::Work::wait and its overrides (gloo's SendWork and RecvWork, which
 * monitored_barrier uses too, NCCL's WorkNCCL, MPI's WorkMPI), and
 * DistributedDataParallel's backward, which waits for its buckets'
 * all_reduce on their future (c10::ivalue::Future::wait, inlined). */
static const char *const coll_waits[] = {
	"Work::wait(",
	"Work::wait (", /* gdb, with the library's debugging symbols */
	"Work4wait",
	"c10d::ProcessGroupNCCL::WorkNCCL::synchronize",
	"c10d::Reducer::finalize_backward",
	"Reducer17finalize_backward",
	"ivalue::Future::wait(",
	"ivalue::Future::wait (",
	"Future4wait",
	NULL,
};

/* The store's client (not its server, TCPStoreMasterDaemon, which some rank
 * may host and which always waits). */
static const char *const store_waits[] = {
	"c10d::TCPStore::",	 "_ZN4c10d8TCPStore",	 "c10d::PrefixStore::",
	"_ZN4c10d11PrefixStore", "c10d::FileStore::",	 "c10d::HashStore::",
	"gloo::rendezvous::",	 "_ZN4gloo10rendezvous", NULL,
};

/* Only a rank whose process group is gloo's is known to wait nowhere else
 * when it waits in neither (see above). */
static const char *const gloo_group[] = {
	"c10d::ProcessGroupGloo::",
	"_ZN4c10d16ProcessGroupGloo",
	NULL,
};

static const char *const gpu_or_any_group[] = {
	"nccl", "NCCL", "cuda", "CUDA", "c10d::", "_ZN4c10d", "gloo::", "_ZN4gloo", NULL,
};

static const char *const gpu[] = {"nccl", "NCCL", "cuda", "CUDA", NULL};

/* HANG_TORCH_COLL or _STORE: what the frames s[0..len) wait in; 0: none. */
static uint8_t wait_in(const char *s, size_t len)
{
	if (has_any(s, len, coll_waits))
		return HANG_TORCH_COLL;
	if (has_any(s, len, store_waits))
		return HANG_TORCH_STORE;
	return 0;
}

/* The thread a header line starts (its tid), or -1 when the line is none:
 * eu-stack's "TID <tid>:", gdb's "Thread <n> (Thread 0x... (LWP <tid>)
 * ...):". */
static long thread_of(const char *line, size_t n)
{
	const char *p = NULL, *lwp;
	long tid = 0;
	int digits = 0;

	if (n > 4 && memcmp(line, "TID ", 4) == 0)
		p = line + 4;
	else if (n > 7 && memcmp(line, "Thread ", 7) == 0 &&
		 (lwp = memmem(line, n, "(LWP ", 5)) != NULL)
		p = lwp + 5;
	if (p == NULL)
		return -1;
	for (; p < line + n && *p >= '0' && *p <= '9' && digits < 10; p++, digits++)
		tid = tid * 10 + (*p - '0');
	return digits > 0 ? tid : -1;
}

/* The frames of the rank's main thread (tid pid) in s[0..len): *n bytes
 * from the return, *cut when they run to the end of the text (the text may
 * have been cut in them). Output without thread headers is all the main
 * thread's. NULL: its thread is not in the text. */
static const char *main_frames(const char *s, size_t len, long pid, size_t *n, bool *cut)
{
	const char *p = s, *end = s + len, *from = NULL;
	bool headers = false;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t ln = nl ? (size_t)(nl - p) : (size_t)(end - p);
		long tid = thread_of(p, ln);

		if (tid >= 0) {
			if (from != NULL) {
				*n = (size_t)(p - from);
				*cut = false;
				return from;
			}
			headers = true;
			if (tid == pid)
				from = nl ? nl + 1 : end;
		}
		p = nl ? nl + 1 : end;
	}
	if (!headers)
		from = s;
	if (from == NULL)
		return NULL;
	*n = (size_t)(end - from);
	*cut = true;
	return from;
}

uint8_t hang_torch_place(const char *stack, size_t len, long pid, bool python, bool whole)
{
	const char *m;
	size_t mlen = 0;
	bool mcut = true;
	uint8_t mw, any;

	/* No frame (the tool could not run, or attach): nothing seen. */
	if (stack == NULL || !has(stack, len, "#0"))
		return HANG_TORCH_UNKNOWN;
	/* The main thread is where the program is: a thread of its own may
	 * wait in a collective while the main one sleeps (and is the one the
	 * others wait for). */
	m = main_frames(stack, len, pid, &mlen, &mcut);
	if (m == NULL)
		return HANG_TORCH_UNKNOWN;
	if ((mw = wait_in(m, mlen)) != 0)
		return mw;
	/* Waiting nowhere is known only from the whole of its frames, and of
	 * every thread's to tell which of the rest it is. */
	if (mcut && !whole)
		return HANG_TORCH_UNKNOWN;
	any = wait_in(stack, len);
	if (any != 0)
		return HANG_TORCH_MIXED;
	if (!whole || has_any(stack, len, gpu))
		return HANG_TORCH_UNKNOWN;
	if (has_any(stack, len, gloo_group))
		return HANG_TORCH_OWN;
	/* A Python rank with no process group; anything else (a shell that
	 * runs the program as its child) may be waiting for one that has. */
	return python && !has_any(stack, len, gpu_or_any_group) ? HANG_TORCH_NOGROUP
								: HANG_TORCH_UNKNOWN;
}

/* A running rank without libddp, not named already (stopped, exited, on a
 * node that sent nothing). */
static bool others(const struct hang_where *w)
{
	return w->rank >= 0 && !w->exited && !w->unknown && !w->stopped && !w->libddp;
}

static bool placed(const struct hang_where *w)
{
	return others(w) && w->torch != HANG_TORCH_UNKNOWN;
}

static bool waits(const struct hang_where *w)
{
	return placed(w) && (w->torch == HANG_TORCH_COLL || w->torch == HANG_TORCH_STORE);
}

bool hang_torch_culprit(const struct hang_where *w, size_t n, size_t i)
{
	size_t j;

	if (!placed(&w[i]) || (w[i].torch != HANG_TORCH_OWN && w[i].torch != HANG_TORCH_NOGROUP))
		return false;
	for (j = 0; j < n; j++)
		if (waits(&w[j]))
			return true;
	return false;
}

static int cmp_int(const void *x, const void *y)
{
	int a = *(const int *)x, b = *(const int *)y;

	return (a > b) - (a < b);
}

/* The placed ranks at place, listed into list; how many. */
static size_t ranks_at(const struct hang_where *w, size_t n, uint8_t place, int *ranks, char *list,
		       size_t len)
{
	size_t i, k = 0;

	for (i = 0; i < n; i++)
		if (placed(&w[i]) && w[i].torch == place)
			ranks[k++] = w[i].rank;
	qsort(ranks, k, sizeof(int), cmp_int);
	hang_rank_list(ranks, k, list, len);
	return k;
}

/* What k ranks not where the others are end their line with: while others
 * wait, that they wait for them. */
static const char *waited_for(size_t k, bool waiters)
{
	return !waiters ? "" : k == 1 ? ": the others wait for it" : ": the others wait for them";
}

int hang_torch_verdict(struct text *t, const struct hang_where *w, size_t n, const char *indent,
		       bool all_placed)
{
	char own_l[512], none_l[512], coll_l[512], store_l[512], mixed_l[512];
	int *ranks = malloc((n + 1) * sizeof(int));
	size_t own, none, coll, store, mixed, i, unplaced = 0;

	if (ranks == NULL)
		return -1;
	own = ranks_at(w, n, HANG_TORCH_OWN, ranks, own_l, sizeof(own_l));
	none = ranks_at(w, n, HANG_TORCH_NOGROUP, ranks, none_l, sizeof(none_l));
	coll = ranks_at(w, n, HANG_TORCH_COLL, ranks, coll_l, sizeof(coll_l));
	store = ranks_at(w, n, HANG_TORCH_STORE, ranks, store_l, sizeof(store_l));
	mixed = ranks_at(w, n, HANG_TORCH_MIXED, ranks, mixed_l, sizeof(mixed_l));
	free(ranks);
	if (own + coll + store + mixed == 0)
		return -1; /* nothing of torch.distributed seen: nothing to say */
	for (i = 0; i < n; i++)
		unplaced += others(&w[i]) && !placed(&w[i]);
	/* Those not where the others are first, then the waiters. */
	if (own > 0)
		text_printf(t,
			    "%s%s %s %s in %s own code, in no torch.distributed collective (see "
			    "%s)%s\n",
			    indent, own == 1 ? "rank" : "ranks", own_l, own == 1 ? "is" : "are",
			    own == 1 ? "its" : "their", own == 1 ? "its stack" : "their stacks",
			    waited_for(own, coll + store > 0));
	if (none > 0)
		text_printf(
			t,
			"%s%s %s %s not formed %s process group (no torch.distributed in %s)%s\n",
			indent, none == 1 ? "rank" : "ranks", none_l, none == 1 ? "has" : "have",
			none == 1 ? "its" : "their", none == 1 ? "its stack" : "their stacks",
			waited_for(none, coll + store > 0));
	if (mixed > 0)
		text_printf(t,
			    "%s%s %s: %s main thread%s in %s own code, another of %s threads "
			    "waits in torch.distributed (see %s)\n",
			    indent, mixed == 1 ? "rank" : "ranks", mixed_l,
			    mixed == 1 ? "its" : "their", mixed == 1 ? " is" : "s are",
			    mixed == 1 ? "its" : "their", mixed == 1 ? "its" : "their",
			    mixed == 1 ? "its stack" : "their stacks");
	if (coll > 0)
		text_printf(t,
			    "%s%s %s %s in a torch.distributed collective or send/recv (a wait "
			    "of c10d's in %s)\n",
			    indent, coll == 1 ? "rank" : "ranks", coll_l,
			    coll == 1 ? "waits" : "wait", coll == 1 ? "its stack" : "their stacks");
	if (store > 0)
		text_printf(t,
			    "%s%s %s %s on the store (joining the process group in "
			    "init_process_group, or a key of the program's)\n",
			    indent, store == 1 ? "rank" : "ranks", store_l,
			    store == 1 ? "waits" : "wait");
	if (unplaced > 0)
		text_printf(t,
			    "%s%zu other rank%s: not known where (no libddp; %s no wait of "
			    "torch.distributed's, or did not come whole)\n",
			    indent, unplaced, unplaced == 1 ? "" : "s",
			    unplaced == 1 ? "its stack names" : "their stacks name");
	if (all_placed && unplaced == 0 && own + none + store + mixed == 0)
		text_printf(
			t,
			"%severy rank waits in a torch.distributed collective: the hang is among "
			"them (ranks in different collectives, or a lost peer or message), not "
			"in one rank's own code\n",
			indent);
	else if (coll + store + none + mixed == 0 && unplaced == 0 && all_placed)
		text_printf(
			t,
			"%sno rank waits in torch.distributed: the hang is in the program's own "
			"code (see the stacks)\n",
			indent);
	return coll + store > 0 ? (int)(own + none) : 0;
}
