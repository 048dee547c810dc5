/* hang_torch: where a PyTorch rank is in torch.distributed, read from its
 * native stack, and the verdict's lines about such ranks (see hang.h).
 *
 * A rank without libddp reports no collectives, but PyTorch's waits are in
 * its stack by name (eu-stack and gdb both demangle; the C++ symbols of
 * libtorch are exported): a Python thread blocked in a collective or a
 * send/recv waits in c10d::Work::wait (gloo, MPI; NCCL's with blocking wait
 * in WorkNCCL), one joining its group or waiting on a key in the store's
 * client (TCPStore, PrefixStore, gloo's rendezvous). A rank whose gloo
 * process group runs (its threads are in the stack) but that waits in
 * neither is in its own code; a Python rank with nothing of
 * torch.distributed at all has not formed its group yet. NCCL's collectives
 * run on the GPU: a rank waiting for one blocks in the CUDA runtime, whose
 * symbols libtorch does not export, so a rank with NCCL or CUDA in its
 * stack and no named wait is not placed. */
#include "hang.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text.h"

/* memmem over the stack text, which is not NUL-terminated. */
static bool has(const char *s, size_t len, const char *needle)
{
	return memmem(s, len, needle, strlen(needle)) != NULL;
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
 * monitored_barrier uses too, NCCL's WorkNCCL, MPI's WorkMPI). */
static const char *const coll_waits[] = {
	"Work::wait(",
	"Work4wait",
	"c10d::ProcessGroupNCCL::WorkNCCL::synchronize",
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

uint8_t hang_torch_place(const char *stack, size_t len, bool python, bool whole)
{
	/* No frame (the tool could not run, or attach): nothing seen. */
	if (stack == NULL || !has(stack, len, "#0"))
		return HANG_TORCH_UNKNOWN;
	if (has_any(stack, len, coll_waits))
		return HANG_TORCH_COLL;
	if (has_any(stack, len, store_waits))
		return HANG_TORCH_STORE;
	/* Waiting nowhere is known only from every thread's frames. */
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

	if (!placed(&w[i]) || waits(&w[i]))
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

int hang_torch_verdict(struct text *t, const struct hang_where *w, size_t n, const char *indent,
		       bool all_placed)
{
	char own_l[512], none_l[512], coll_l[512], store_l[512];
	int *ranks = malloc((n + 1) * sizeof(int));
	size_t own, none, coll, store, i, unplaced = 0;

	if (ranks == NULL)
		return -1;
	own = ranks_at(w, n, HANG_TORCH_OWN, ranks, own_l, sizeof(own_l));
	none = ranks_at(w, n, HANG_TORCH_NOGROUP, ranks, none_l, sizeof(none_l));
	coll = ranks_at(w, n, HANG_TORCH_COLL, ranks, coll_l, sizeof(coll_l));
	store = ranks_at(w, n, HANG_TORCH_STORE, ranks, store_l, sizeof(store_l));
	free(ranks);
	if (own + coll + store == 0)
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
			    coll + store > 0 ? (own == 1 ? ": the others wait for it"
							 : ": the others wait for them")
					     : "");
	if (none > 0)
		text_printf(
			t,
			"%s%s %s %s not formed %s process group (no torch.distributed in %s)%s\n",
			indent, none == 1 ? "rank" : "ranks", none_l, none == 1 ? "has" : "have",
			none == 1 ? "its" : "their", none == 1 ? "its stack" : "their stacks",
			coll + store > 0 ? (none == 1 ? ": the others wait for it"
						      : ": the others wait for them")
					 : "");
	if (coll > 0)
		text_printf(t,
			    "%s%s %s %s in a torch.distributed collective or send/recv "
			    "(c10d::Work::wait)\n",
			    indent, coll == 1 ? "rank" : "ranks", coll_l,
			    coll == 1 ? "waits" : "wait");
	if (store > 0)
		text_printf(t,
			    "%s%s %s %s on the store (joining the process group in "
			    "init_process_group, or a key of the program's)\n",
			    indent, store == 1 ? "rank" : "ranks", store_l,
			    store == 1 ? "waits" : "wait");
	if (unplaced > 0)
		text_printf(t,
			    "%s%zu other rank%s: not known where (no libddp, and no wait of "
			    "torch.distributed's named in the stack)\n",
			    indent, unplaced, unplaced == 1 ? "" : "s");
	if (all_placed && unplaced == 0 && own + none + store == 0)
		text_printf(
			t,
			"%severy rank waits in a torch.distributed collective: the hang is among "
			"them (ranks in different collectives, or a lost peer or message), not "
			"in one rank's own code\n",
			indent);
	else if (coll + store == 0 && none == 0 && unplaced == 0 && all_placed)
		text_printf(
			t,
			"%sno rank waits in torch.distributed: the hang is in the program's own "
			"code (see the stacks)\n",
			indent);
	return coll + store > 0 ? (int)(own + none) : 0;
}
