/* Unit tests for the hang verdict (launcher/hang_dump.c, and
 * launcher/hang_torch.c for PyTorch's ranks): which ranks are named as not
 * where the others are, and (launcher/coord_report.c) that a
 * hang's end decides the job's status over the failures its SIGABRTs
 * cause. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "coord_int.h"
#include "hang.h"
#include "progress_slot.h"

#define IN(r, n, o)                                                                          \
	{                                                                                    \
		.rank = (r), .libddp = true, .in = true, .entered = (n), .completed = (n)-1, \
		.op = (o)                                                                    \
	}
#define OUT(r, n)                                                             \
	{                                                                     \
		.rank = (r), .libddp = true, .entered = (n), .completed = (n) \
	}
#define OTHER(r)            \
	{                   \
		.rank = (r) \
	}
/* Inside collective n of op o, waiting for w (enum ddpi_progress_wait). */
#define GPU(r, n, o, w)                                                                      \
	{                                                                                    \
		.rank = (r), .libddp = true, .in = true, .entered = (n), .completed = (n)-1, \
		.op = (o), .wait = (w)                                                       \
	}
/* Inside ddp_init, after collective c (0: a first context). */
#define INIT(r, c)                                                                          \
	{                                                                                   \
		.rank = (r), .libddp = true, .init = true, .entered = (c), .completed = (c) \
	}
#define EXITED(r)                           \
	{                                   \
		.rank = (r), .exited = true \
	}
/* Its node sent no positions. */
#define UNKNOWN(r)                           \
	{                                    \
		.rank = (r), .unknown = true \
	}
#define GONE               \
	{                  \
		.rank = -1 \
	}

/* The verdict over n positions, into buf (1024 bytes), naming want culprits. */
static void verdict(const struct hang_where *w, int n, int want, char *buf)
{
	int culprits;
	char *v = hang_verdict(w, n, "", &culprits);

	assert_non_null(v);
	assert_true(strlen(v) < 1024);
	strcpy(buf, v);
	free(v);
	assert_int_equal(culprits, want);
}

static void test_the_sleeping_rank_is_named_and_the_waiters_grouped(void **state)
{
	struct hang_where w[] = {IN(0, 42, 1), OUT(1, 41), IN(2, 42, 1), IN(3, 42, 1)};
	int culprits;
	char *buf = hang_verdict(w, 4, "  ", &culprits);

	assert_int_equal(culprits, 1);
	assert_string_equal(buf, "  rank 1 is in no collective (last completed #41)\n"
				 "  ranks 0,2-3 wait in all_reduce #42\n");
	free(buf);
}

static void test_a_rank_in_an_earlier_collective_is_named_too(void **state)
{
	struct hang_where w[] = {IN(0, 7, 4), IN(1, 6, 2), IN(2, 7, 4),
				 OUT(3, 5),   IN(4, 6, 2), GONE};
	char buf[1024];

	verdict(w, 6, 3, buf);
	assert_string_equal(buf, "ranks 1,4 wait in broadcast #6\n"
				 "rank 3 is in no collective (last completed #5)\n"
				 "ranks 0,2 wait in barrier #7\n");
}

static void test_every_rank_in_the_same_collective_names_nobody(void **state)
{
	struct hang_where w[] = {IN(0, 3, 1), IN(1, 3, 1)};
	char buf[1024];

	verdict(w, 2, 0, buf);
	assert_non_null(strstr(buf, "ranks 0-1 wait in all_reduce #3\n"));
	assert_non_null(strstr(buf, "every rank is in the same collective"));
}

/* A node's ranks whose positions never came may be the ones the others
 * wait for: the ranks in one collective are no proof that the hang is
 * inside it (the verdict cleared the hung rank so). */
static void test_ranks_whose_place_is_not_known_are_named_and_conclude_nothing(void **state)
{
	struct hang_where w[] = {IN(0, 4, 1), IN(1, 4, 1), UNKNOWN(2), UNKNOWN(3)};
	struct hang_where init[] = {INIT(0, 0), UNKNOWN(1)};
	struct hang_where none[] = {UNKNOWN(0), UNKNOWN(1)};
	char buf[1024];

	verdict(w, 4, 0, buf);
	assert_string_equal(buf, "ranks 2-3: not known where they are (their node sent no "
				 "positions); the others may be waiting for them\n"
				 "ranks 0-1 wait in all_reduce #4\n");
	verdict(init, 2, 0, buf);
	assert_null(strstr(buf, "every rank is in ddp_init"));
	assert_non_null(strstr(buf, "rank 1: not known where it is (its node"));
	verdict(none, 2, 0, buf);
	assert_null(strstr(buf, "no rank reports its collectives"));
}

static void test_no_libddp_rank_says_the_stacks_tell(void **state)
{
	struct hang_where w[] = {OTHER(0), OTHER(1)};
	char buf[1024];

	verdict(w, 2, 0, buf);
	assert_non_null(strstr(buf, "no rank reports its collectives"));
}

static void test_ranks_without_libddp_are_listed_apart(void **state)
{
	struct hang_where w[] = {IN(0, 2, 1), OUT(1, 1), OTHER(2)};
	char buf[1024];

	verdict(w, 3, 1, buf);
	assert_string_equal(buf,
			    "rank 1 is in no collective (last completed #1)\n"
			    "rank 0 waits in all_reduce #2\n"
			    "rank 2 reports no collectives (not libddp, or before ddp_init)\n");
}

static void test_rank_lists_use_ranges(void **state)
{
	int r[] = {0, 1, 2, 4, 6, 7};
	char buf[64];

	hang_rank_list(r, 6, buf, sizeof(buf));
	assert_string_equal(buf, "0-2,4,6-7");
}

/* A list longer than its buffer keeps whole entries and counts the rest:
 * it was cut in the middle of a number ("...,278,280,28" for 282, a rank
 * named that was not in it). */
static void test_a_long_rank_list_is_cut_between_entries(void **state)
{
	int r[4096];
	char buf[64];

	(void)state;
	for (int i = 0; i < 4096; i++)
		r[i] = 2 * i;
	hang_rank_list(r, 4096, buf, sizeof(buf));
	assert_string_equal(buf, "0,2,4,6,8,10,12,14,16,18,20,22,24,26,28 and 4081 more");
	hang_rank_list(r, 3, buf, 8);
	assert_string_equal(buf, "3 more");
	hang_rank_list(r, 3, buf, sizeof(buf));
	assert_string_equal(buf, "0,2,4");
}

/* The same in a verdict over a node's most ranks, every other one stopped:
 * every rank the stopped line names is one of them, in order. */
static void test_a_verdict_over_many_ranks_names_only_theirs(void **state)
{
	static struct hang_where w[4096];
	char *buf;
	const char *p, *end;
	int culprits, prev = -1;

	(void)state;
	for (int i = 0; i < 4096; i++) {
		w[i] = (struct hang_where)IN(i, 4, 1);
		w[i].stopped = i % 2 == 0;
	}
	buf = hang_verdict(w, 4096, "", &culprits);
	assert_int_equal(culprits, 2048);
	assert_true(strncmp(buf, "ranks 0,2,4,", 12) == 0);
	end = strstr(buf, " more are stopped (");
	assert_non_null(end);
	for (p = buf + 6; p < end;) {
		char *q;
		long v = strtol(p, &q, 10);

		if (*q == ' ') /* " and N more" */
			break;
		assert_true(v > prev && v % 2 == 0);
		prev = (int)v;
		p = q + 1;
	}
	assert_true(prev > 0);
	free(buf);
}

/* Ranks at many places: the verdict is not cut (it was, at 4096 bytes, in
 * the middle of a line, and lost the waiters' line at its end). */
static void test_a_verdict_over_many_places_keeps_every_line(void **state)
{
	static struct hang_where w[120];
	char *buf;
	int culprits;

	(void)state;
	for (int i = 0; i < 118; i++)
		w[i] = (struct hang_where)OUT(i, i + 1);
	w[118] = (struct hang_where)IN(118, 200, 1);
	w[119] = (struct hang_where)IN(119, 200, 1);
	buf = hang_verdict(w, 120, "  ", &culprits);
	assert_int_equal(culprits, 118);
	assert_true(strlen(buf) > 4096);
	assert_non_null(strstr(buf, "  rank 80 is in no collective (last completed #81)\n"));
	assert_non_null(strstr(buf, "  ranks 118-119 wait in all_reduce #200\n"));
	assert_true(buf[strlen(buf) - 1] == '\n');
	free(buf);
}

/* On the GPU: a rank whose collective never started (its own work before it
 * still runs) is not where the others are, though it entered the same one. */
static void test_a_rank_behind_its_own_gpu_work_is_named(void **state)
{
	struct hang_where w[] = {GPU(0, 9, 1, DDPI_WAIT_GPU_PEERS),
				 GPU(1, 9, 1, DDPI_WAIT_OWN_GPU_WORK),
				 GPU(2, 9, 1, DDPI_WAIT_GPU_PEERS), IN(3, 9, 1)};
	char buf[1024];

	verdict(w, 3, 1, buf);
	assert_string_equal(buf, "rank 1 waits in all_reduce #9 (its own GPU work queued before "
				 "the collective has not finished)\n"
				 "ranks 0,2 wait in all_reduce #9 (the collective runs on the "
				 "GPU, waiting for its peers)\n");
	/* Rank 3 has not said what it waits for: the group's line says nothing
	 * it cannot say of every rank in it. */
	verdict(w, 4, 1, buf);
	assert_non_null(strstr(buf, "\nranks 0,2-3 wait in all_reduce #9\n"));
}

/* Seen on an H200: one rank whose own host function held the stream, its
 * all_reduce queued behind. No peer is to blame, and the verdict says so. */
static void test_every_rank_behind_its_own_gpu_work_blames_no_peer(void **state)
{
	struct hang_where one[] = {GPU(0, 1, 1, DDPI_WAIT_OWN_GPU_WORK)};
	struct hang_where two[] = {GPU(0, 4, 1, DDPI_WAIT_OWN_GPU_WORK),
				   GPU(1, 4, 1, DDPI_WAIT_OWN_GPU_WORK)};
	char buf[1024];

	verdict(one, 1, 1, buf);
	assert_string_equal(buf, "rank 0 waits in all_reduce #1 (its own GPU work queued before "
				 "the collective has not finished)\n"
				 "the collective never started on its GPU: the program's own GPU "
				 "work before it (a kernel or host function) is stuck or slow, "
				 "not a peer\n");
	verdict(two, 2, 2, buf);
	assert_non_null(strstr(buf, "never started on their GPUs"));
	assert_null(strstr(buf, "lost peer"));
}

/* Nodes exchange positions through the store: the wait travels when known,
 * and a record of six (no wait: the cpu backend, or an older ddprun) reads. */
static void test_positions_cross_nodes_with_their_wait(void **state)
{
	struct hang_where w[] = {GPU(4, 7, 2, DDPI_WAIT_OWN_GPU_WORK),
				 {.rank = 5,
				  .libddp = true,
				  .entered = 6,
				  .completed = 6,
				  .wait = DDPI_WAIT_GPU_PEERS}, /* out of it: the wait is old */
				 GONE};
	struct hang_where *back = NULL;
	size_t n = 0;
	char *s = hang_where_encode(w, 3);
	const char *old = "[[8,1,1,3,2,1]]";

	assert_non_null(s);
	assert_string_equal(s, "[[4,1,1,7,6,2,1],[5,1,0,6,6,0]]");
	assert_int_equal(hang_where_decode(s, strlen(s), &back, &n), 2);
	assert_int_equal(n, 2);
	assert_int_equal(back[0].rank, 4);
	assert_int_equal(back[0].wait, DDPI_WAIT_OWN_GPU_WORK);
	assert_int_equal(back[1].wait, 0);
	assert_int_equal(back[1].completed, 6);
	assert_int_equal(hang_where_decode(old, strlen(old), &back, &n), 1);
	assert_int_equal(n, 3);
	assert_int_equal(back[2].rank, 8);
	assert_int_equal(back[2].entered, 3);
	assert_int_equal(back[2].wait, 0);
	free(back);
	free(s);
}

/* A stopped rank (SIGSTOP, ^Z, a debugger) is named first, whatever its
 * place: out of it, or inside the collective the others wait in (where the
 * verdict would otherwise blame the collective), or not libddp at all. */
static void test_a_stopped_rank_is_named_before_the_places(void **state)
{
	struct hang_where out[] = {IN(0, 42, 1), OUT(1, 41), IN(2, 42, 1)};
	struct hang_where in[] = {IN(0, 42, 1), IN(1, 42, 1), IN(2, 42, 1), IN(3, 42, 1)};
	struct hang_where other[] = {OTHER(0), OTHER(1)};
	char buf[1024];

	out[1].stopped = true;
	verdict(out, 3, 1, buf);
	assert_string_equal(buf, "rank 1 is stopped (a stop signal, as ^Z sends, or a debugger): "
				 "nothing runs there until it is continued (SIGCONT)\n"
				 "rank 1 is in no collective (last completed #41)\n"
				 "ranks 0,2 wait in all_reduce #42\n");
	in[1].stopped = in[3].stopped = true;
	verdict(in, 4, 2, buf);
	assert_string_equal(buf, "ranks 1,3 are stopped (a stop signal, as ^Z sends, or a "
				 "debugger): nothing runs there until they are continued "
				 "(SIGCONT)\n"
				 "ranks 0-3 wait in all_reduce #42\n");
	other[0].stopped = true;
	verdict(other, 2, 1, buf);
	assert_non_null(strstr(buf, "rank 0 is stopped"));
	assert_non_null(strstr(buf, "none uses libddp"));
}

/* Across nodes the stopped ranks follow the records in an object, which an
 * older ddprun skips: every record stays six or seven values, as it reads
 * them. */
static void test_a_stopped_rank_crosses_nodes(void **state)
{
	struct hang_where w[] = {OUT(1, 41), IN(2, 42, 1), GPU(3, 42, 1, DDPI_WAIT_GPU_PEERS)};
	struct hang_where *back = NULL;
	size_t n = 0;
	char *s;

	w[0].stopped = true;
	s = hang_where_encode(w, 3);
	assert_non_null(s);
	assert_string_equal(s, "[[1,1,0,41,41,0],[2,1,1,42,41,1],[3,1,1,42,41,1,2],"
			       "{\"stopped\":[1]}]");
	assert_int_equal(hang_where_decode(s, strlen(s), &back, &n), 3);
	assert_true(back[0].stopped);
	assert_false(back[1].stopped);
	assert_false(back[2].stopped);
	assert_int_equal(back[2].wait, DDPI_WAIT_GPU_PEERS);
	/* A second node's value marks only its own records (rank 2 named: a bad
	 * value, yet the first node's record of rank 2 does not change). */
	const char *more = "[[4,1,0,41,41,0],{\"stopped\":[4,2,\"x\"]}]";
	assert_int_equal(hang_where_decode(more, strlen(more), &back, &n), 1);
	assert_int_equal(n, 4);
	assert_true(back[3].stopped);
	assert_true(back[0].stopped);
	assert_false(back[1].stopped);
	free(back);
	free(s);
}

/* ddp_init waits for every rank to join: the ranks that never called it are
 * the ones named, not lumped with programs that do not use libddp. */
static void test_ranks_in_ddp_init_name_the_rank_that_never_came(void **state)
{
	struct hang_where one[] = {INIT(0, 0), INIT(1, 0), OTHER(2), INIT(3, 0)};
	struct hang_where two[] = {OTHER(0), INIT(1, 0), OTHER(2)};
	char buf[1024];

	verdict(one, 4, 1, buf);
	assert_string_equal(buf, "ranks 0-1,3 wait in ddp_init (joining its peers)\n"
				 "rank 2 never called ddp_init (it is in its own code before it, "
				 "or not libddp): the ranks in ddp_init wait for it\n");
	verdict(two, 3, 2, buf);
	assert_string_equal(buf,
			    "rank 1 waits in ddp_init (joining its peers)\n"
			    "ranks 0,2 never called ddp_init (they are in their own code "
			    "before it, or not libddp): the ranks in ddp_init wait for them\n");
}

/* Every rank in ddp_init: the join itself hangs, no rank is to blame; a
 * stopped one among them is. */
static void test_every_rank_in_ddp_init_blames_the_join(void **state)
{
	struct hang_where w[] = {INIT(0, 0), INIT(1, 0)};
	char buf[1024];

	verdict(w, 2, 0, buf);
	assert_non_null(strstr(buf, "ranks 0-1 wait in ddp_init (joining its peers)\n"));
	assert_non_null(strstr(buf, "every rank is in ddp_init: the join itself"));
	w[1].stopped = true;
	verdict(w, 2, 1, buf);
	assert_non_null(strstr(buf, "rank 1 is stopped"));
	assert_null(strstr(buf, "the join itself"));
}

/* A later context's ddp_init comes after the collectives of the one before:
 * a rank still in an earlier collective is behind it, one in a later
 * collective ahead of it. */
static void test_a_later_contexts_ddp_init_is_placed_among_the_collectives(void **state)
{
	struct hang_where behind[] = {INIT(0, 5), IN(1, 5, 1), INIT(2, 5)};
	struct hang_where ahead[] = {INIT(0, 5), IN(1, 6, 1)};
	char buf[1024];

	verdict(behind, 3, 1, buf);
	assert_string_equal(buf, "rank 1 waits in all_reduce #5\n"
				 "ranks 0,2 wait in ddp_init (joining its peers)\n");
	verdict(ahead, 2, 1, buf);
	assert_string_equal(buf, "rank 0 waits in ddp_init (joining its peers)\n"
				 "rank 1 waits in all_reduce #6\n");
}

/* Across nodes, the ranks in ddp_init go in the object after the records
 * (an older ddprun reads them as libddp ranks in no collective). */
static void test_ranks_in_ddp_init_cross_nodes(void **state)
{
	struct hang_where w[] = {INIT(0, 0), OUT(1, 0), INIT(2, 0)};
	struct hang_where *back = NULL;
	size_t n = 0;
	char *s;

	w[2].stopped = true;
	s = hang_where_encode(w, 3);
	assert_non_null(s);
	/* In the records as ranks without libddp, as an older ddprun read them
	 * before (it would take a libddp rank in no collective for one in its
	 * own code). */
	assert_string_equal(s, "[[0,0,0,0,0,0],[1,1,0,0,0,0],[2,0,0,0,0,0],"
			       "{\"init\":[0,2],\"stopped\":[2]}]");
	assert_int_equal(hang_where_decode(s, strlen(s), &back, &n), 3);
	assert_true(back[0].init);
	assert_false(back[1].init);
	assert_true(back[2].init);
	assert_true(back[2].stopped);
	assert_false(back[0].stopped);
	assert_true(back[0].libddp);
	/* A rank inside a collective is not in ddp_init. */
	const char *bad = "[[3,0,0,0,0,0],[4,1,1,2,1,1],{\"init\":[3,4]}]";
	assert_int_equal(hang_where_decode(bad, strlen(bad), &back, &n), 2);
	assert_true(back[3].init);
	assert_false(back[4].init);
	free(back);
	free(s);
}

/* A rank that exited (status 0: a failure would have stopped the job) while
 * the others wait: named, and no claim that the hang is inside the
 * collective or the join. */
static void test_a_rank_that_exited_is_named(void **state)
{
	struct hang_where init[] = {INIT(0, 0), EXITED(1), INIT(2, 0)};
	struct hang_where coll[] = {IN(0, 4, 1), EXITED(1), IN(2, 4, 1)};
	struct hang_where none[] = {OTHER(0), EXITED(1)};
	char buf[1024];

	verdict(init, 3, 1, buf);
	assert_string_equal(buf, "rank 1 exited (status 0) while the others run: no collective or "
				 "ddp_init they wait in can complete without it\n"
				 "ranks 0,2 wait in ddp_init (joining its peers)\n");
	verdict(coll, 3, 1, buf);
	assert_string_equal(buf, "rank 1 exited (status 0) while the others run: no collective or "
				 "ddp_init they wait in can complete without it\n"
				 "ranks 0,2 wait in all_reduce #4\n");
	verdict(none, 2, 1, buf);
	assert_non_null(strstr(buf, "rank 1 exited"));
	assert_non_null(strstr(buf, "none uses libddp"));
}

/* Across nodes a rank that exited goes only in the object after the
 * records (an older ddprun would take its record for a running rank); a
 * reader adds it, once, and skips what is not a rank. */
static void test_a_rank_that_exited_crosses_nodes(void **state)
{
	struct hang_where w[] = {IN(0, 4, 1), EXITED(1)};
	struct hang_where *back = NULL;
	size_t n = 0;
	char *s = hang_where_encode(w, 2);

	assert_non_null(s);
	assert_string_equal(s, "[[0,1,1,4,3,1],{\"exited\":[1]}]");
	assert_int_equal(hang_where_decode(s, strlen(s), &back, &n), 2);
	assert_int_equal(n, 2);
	assert_int_equal(back[1].rank, 1);
	assert_true(back[1].exited);
	assert_false(back[1].libddp);
	const char *odd = "[[2,1,0,3,3,0],{\"exited\":[2,3,3.5,-1,1e300,\"4\"]}]";
	assert_int_equal(hang_where_decode(odd, strlen(odd), &back, &n), 2);
	assert_int_equal(n, 4);
	assert_false(back[2].exited);
	assert_int_equal(back[3].rank, 3);
	assert_true(back[3].exited);
	free(back);
	free(s);
}

/* A value holds at most a node's ranks (CLI_MAX_NPROC): longer lists are
 * ignored and records beyond it dropped, so that no value costs more than
 * that many matches per entry (the requester's loop waits meanwhile). */
static void test_positions_beyond_a_nodes_ranks_are_dropped(void **state)
{
	size_t cap = CLI_MAX_NPROC, len = 64 + 32 * (cap + 2), k = 0;
	char *s = malloc(len);
	struct hang_where *back = NULL;
	size_t n = 0;

	assert_non_null(s);
	k += (size_t)snprintf(s + k, len - k, "[");
	for (size_t r = 0; r <= cap; r++)
		k += (size_t)snprintf(s + k, len - k, "[%zu,1,0,0,0,0],", r);
	k += (size_t)snprintf(s + k, len - k, "{\"exited\":[");
	for (size_t r = 0; r <= cap; r++)
		k += (size_t)snprintf(s + k, len - k, "%s%zu", r ? "," : "", cap + 1 + r);
	snprintf(s + k, len - k, "]}]");
	assert_int_equal(hang_where_decode(s, strlen(s), &back, &n), (int)cap);
	assert_int_equal(n, cap);
	free(back);
	free(s);
}

/* A rank's record counts once, the first node's: a node that also sends
 * another node's rank, or one of its own twice, named it twice in the
 * verdict ("ranks 0,0 wait in ..."). */
static void test_a_rank_sent_twice_is_counted_once(void **state)
{
	const char *node0 = "[[0,1,1,5,4,1],[1,1,0,4,4,0]]";
	const char *node1 = "[[2,1,1,5,4,1],[0,1,0,3,3,0],[3,1,1,5,4,1],[2,1,1,5,4,1]]";
	struct hang_where *w = NULL;
	size_t n = 0;
	char buf[1024];

	assert_int_equal(hang_where_decode(node0, strlen(node0), &w, &n), 2);
	assert_int_equal(hang_where_decode(node1, strlen(node1), &w, &n), 4);
	n = hang_where_unique(w, n);
	assert_int_equal(n, 4);
	for (int r = 0; r < 4; r++)
		assert_int_equal(w[r].rank, r);
	assert_true(w[0].in); /* node 0's rank 0, not node 1's */
	verdict(w, (int)n, 1, buf);
	assert_non_null(strstr(buf, "rank 1 is in no collective (last completed #4)"));
	assert_non_null(strstr(buf, "ranks 0,2-3 wait in"));
	assert_int_equal(hang_where_unique(w, 1), 1);
	assert_int_equal(hang_where_unique(w, 0), 0);
	free(w);
	(void)state;
}

/* One object of lists per value (the encoder writes no more; each costs
 * its lists times the records, so a store client's thousand made the
 * requester's loop stall for minutes), and its exited ranks only up to a
 * node's bound. */
static void test_a_values_lists_are_read_once_and_bounded(void **state)
{
	const char *two = "[[0,1,0,3,3,0],[1,1,0,3,3,0],{\"stopped\":[0]},{\"stopped\":[1]}]";
	size_t cap = CLI_MAX_NPROC, len = 64 + 32 * cap, k = 0;
	char *s = malloc(len);
	struct hang_where *w = NULL;
	size_t n = 0;

	assert_int_equal(hang_where_decode(two, strlen(two), &w, &n), 2);
	assert_true(w[0].stopped);
	assert_false(w[1].stopped);
	free(w);
	w = NULL;
	n = 0;
	/* cap - 2 records, then 10 ranks that exited: 2 of them fit. */
	assert_non_null(s);
	k += (size_t)snprintf(s + k, len - k, "[");
	for (size_t r = 0; r < cap - 2; r++)
		k += (size_t)snprintf(s + k, len - k, "[%zu,1,0,0,0,0],", r);
	snprintf(s + k, len - k, "{\"exited\":[%zu,%zu,%zu,%zu,%zu,%zu,%zu,%zu,%zu,%zu]}]", cap,
		 cap + 1, cap + 2, cap + 3, cap + 4, cap + 5, cap + 6, cap + 7, cap + 8, cap + 9);
	assert_int_equal(hang_where_decode(s, strlen(s), &w, &n), (int)cap);
	assert_int_equal(n, cap);
	assert_true(w[cap - 1].exited);
	free(w);
	free(s);
	(void)state;
}

/* A record with a value its field cannot hold is skipped, not converted
 * (undefined for a double out of range; fuzz_launch_hang found 8.9e21). */
static void test_positions_out_of_range_are_skipped(void **state)
{
	const char *in = "[[1e300,1,1,7,6,2],[3,1,1,7,6,2],[2,0,0,0,8888888888888888888880,0],"
			 "[4,1,1,-5,0,0],[5,1,1,7,6,4294967296],[2147483647,1,0,0,0,0],"
			 "[-2,0,0,0,0,0],[6,1,1,7,6,1,1e20]]";
	struct hang_where *w = NULL;
	size_t n = 0;

	assert_int_equal(hang_where_decode(in, strlen(in), &w, &n), 1);
	assert_int_equal(n, 1);
	assert_int_equal(w[0].rank, 3);
	assert_int_equal(w[0].entered, 7);
	free(w);
}

/* ---- PyTorch's ranks, placed from their native stacks (hang_torch.c) ---- */

/* eu-stack's output for torch 2.6's gloo ranks (cut to the frames that
 * matter): the main thread in a collective's wait, the process group's
 * threads idle; the main thread asleep in the program's own code; one in
 * init_process_group's join. */
static const char stack_coll[] =
	"PID 31147 - process\n"
	"TID 31147:\n"
	"#0  0x00007fb4d9df372e\n"
	"#3  0x00007fb4d9deae98 pthread_cond_wait\n"
	"#4  0x00007fb4c705e063 c10d::Work::wait(std::chrono::duration<long, std::ratio<1l, "
	"1000l> >)\n"
	"#9  0x00000000005637bc _PyEval_EvalFrameDefault\n"
	"TID 31189:\n"
	"#0  0x00007fb4d9df372e\n"
	"#4  0x00007fb4c6fde101 c10d::ProcessGroupGloo::runLoop(int)\n";
static const char stack_own[] = "PID 31148 - process\n"
				"TID 31148:\n"
				"#0  0x00007fe60a75f72e\n"
				"#2  0x00007fe60a7a0cfa clock_nanosleep\n"
				"#6  0x00000000005637bc _PyEval_EvalFrameDefault\n"
				"TID 31185:\n"
				"#0  0x00007fe60a75f72e\n"
				"#4  0x00007fe6062b2f5e gloo::transport::tcp::Loop::run()\n"
				"TID 31186:\n"
				"#0  0x00007fe60a75f72e\n"
				"#4  0x00007fe5f6fde101 c10d::ProcessGroupGloo::runLoop(int)\n";
static const char stack_store[] =
	"TID 32077:\n"
	"#0  0x00007f4c5d29bc20 poll\n"
	"#5  0x00007f4c4f009fd4 c10d::TCPStore::doWait(c10::ArrayRef<std::string>, "
	"std::chrono::duration<long, std::ratio<1l, 1000l> >)\n"
	"#12 0x00007f4c5d290ca5 gloo::rendezvous::Context::connectFullMesh("
	"gloo::rendezvous::Store&, std::shared_ptr<gloo::transport::Device>&)\n";
static const char stack_bare[] = "TID 32078:\n"
				 "#0  0x00007fe60a75f72e\n"
				 "#2  0x00007fe60a7a0cfa clock_nanosleep\n"
				 "#5  0x000000000054c9f2 PyObject_Vectorcall\n";
/* gdb's layout, and a tool that does not demangle. */
static const char stack_gdb[] =
	"Thread 1 (Thread 0x7f (LWP 9) \"python3\"):\n"
	"#0  0x00007f in __futex_abstimed_wait_common () from /lib/libc.so.6\n"
	"#2  0x00007f in c10d::Work::wait(std::chrono::duration<long, std::ratio<1l, 1000l> >) "
	"() from /usr/lib/libtorch_cpu.so\n";
/* gloo's recv overrides the wait (so does monitored_barrier's). */
static const char stack_recv[] =
	"TID 9:\n"
	"#0  0x00007f0000000001 pthread_cond_wait\n"
	"#1  0x00007f0000000002 c10d::ProcessGroupGloo::RecvWork::wait(std::chrono::duration<long, "
	"std::ratio<1l, 1000l> >)\n"
	"TID 10:\n"
	"#0  0x00007f0000000003 c10d::ProcessGroupGloo::runLoop(int)\n";
static const char stack_mangled[] =
	"TID 9:\n#0  0x1 _ZN4c10d4Work4waitENSt6chrono8durationIlSt5ratioILl1ELl1000EEEE\n";
/* NCCL: its collectives wait on the GPU, in frames without names. */
static const char stack_nccl[] =
	"TID 9:\n"
	"#0  0x00007f0000000001\n"
	"#1  0x00007f0000000002\n"
	"TID 10:\n"
	"#0  0x00007f0000000003 c10d::ProcessGroupNCCL::ncclCommWatchdog()\n";

/* A thread of its own waits in a collective while the main one sleeps. */
static const char stack_side[] = "TID 40:\n"
				 "#0  0x1 clock_nanosleep\n"
				 "TID 41:\n"
				 "#0  0x2 pthread_cond_wait\n"
				 "#1  0x3 c10d::Work::wait(std::chrono::duration<long>)\n"
				 "TID 42:\n"
				 "#0  0x4 c10d::ProcessGroupGloo::runLoop(int)\n";
/* gdb lists the main thread last. */
static const char stack_gdb_last[] =
	"Thread 2 (Thread 0x7f01 (LWP 10) \"python3\"):\n"
	"#0  0x1 in c10d::ProcessGroupGloo::runLoop(int) () from /usr/lib/libtorch_cpu.so\n"
	"Thread 1 (Thread 0x7f00 (LWP 9) \"python3\"):\n"
	"#0  0x2 in clock_nanosleep () from /lib/libc.so.6\n";
/* gdb with the libraries' debugging symbols, and libraries from a
 * directory whose name says cuda: the path names no function. */
static const char stack_gdb_paths[] =
	"Thread 1 (Thread 0x7f00 (LWP 9) \"python3\"):\n"
	"#0  0x2 in clock_nanosleep () from /opt/cuda12/lib/libc.so.6\n"
	"#1  0x3 in take (x=1) at /src/nccl_tools/t.c:9\n"
	"Thread 2 (Thread 0x7f01 (LWP 10) \"python3\"):\n"
	"#0  0x1 in c10d::ProcessGroupGloo::runLoop (this=0x5, workerIndex=0) at "
	"/src/ProcessGroupGloo.cpp:9\n";
static const char stack_gdb_dbg[] =
	"Thread 1 (Thread 0x7f00 (LWP 9) \"python3\"):\n"
	"#0  0x2 in c10d::Work::wait (this=0x5, timeout=...) at /src/Work.cpp:90\n";
/* DistributedDataParallel's backward waits for its buckets' all_reduce. */
static const char stack_ddp[] = "TID 50:\n"
				"#0  0x1 pthread_cond_wait\n"
				"#2  0x2 c10d::Reducer::finalize_backward()\n";

#define PLACE(s, pid, python, whole) hang_torch_place((s), strlen(s), (pid), (python), (whole))

static void test_torch_ranks_are_placed_from_their_stacks(void **state)
{
	assert_int_equal(PLACE(stack_coll, 31147, true, true), HANG_TORCH_COLL);
	assert_int_equal(PLACE(stack_gdb, 9, true, true), HANG_TORCH_COLL);
	assert_int_equal(PLACE(stack_mangled, 9, true, true), HANG_TORCH_COLL);
	assert_int_equal(PLACE(stack_recv, 9, true, true), HANG_TORCH_COLL);
	assert_int_equal(PLACE(stack_ddp, 50, true, true), HANG_TORCH_COLL);
	assert_int_equal(PLACE(stack_store, 32077, true, true), HANG_TORCH_STORE);
	assert_int_equal(PLACE(stack_own, 31148, true, true), HANG_TORCH_OWN);
	assert_int_equal(PLACE(stack_bare, 32078, true, true), HANG_TORCH_NOGROUP);
	/* The main thread's place is the rank's: one that sleeps while
	 * another thread waits is not a waiter (nor named the one waited
	 * for). */
	assert_int_equal(PLACE(stack_side, 40, true, true), HANG_TORCH_MIXED);
	assert_int_equal(PLACE(stack_side, 41, true, true), HANG_TORCH_COLL);
	/* gdb's order; a main thread that is not in the text is not placed. */
	assert_int_equal(PLACE(stack_gdb_last, 9, true, true), HANG_TORCH_OWN);
	assert_int_equal(PLACE(stack_own, 999, true, true), HANG_TORCH_UNKNOWN);
	assert_int_equal(PLACE(stack_gdb_paths, 9, true, true), HANG_TORCH_OWN);
	assert_int_equal(PLACE(stack_gdb_dbg, 9, true, true), HANG_TORCH_COLL);
	/* A wait is a wait however much came; waiting nowhere needs it all
	 * (gdb's main thread last, cut: not even its own frames are whole). */
	assert_int_equal(PLACE(stack_coll, 31147, true, false), HANG_TORCH_COLL);
	assert_int_equal(PLACE(stack_own, 31148, true, false), HANG_TORCH_UNKNOWN);
	assert_int_equal(PLACE(stack_bare, 32078, true, false), HANG_TORCH_UNKNOWN);
	assert_int_equal(PLACE(stack_side, 40, true, false), HANG_TORCH_MIXED);
	assert_int_equal(PLACE(stack_gdb_last, 9, true, false), HANG_TORCH_UNKNOWN);
	/* Not Python (a wrapper that runs the program as its child). */
	assert_int_equal(PLACE(stack_bare, 32078, false, true), HANG_TORCH_UNKNOWN);
	/* NCCL: not placed; no frame at all (the tool failed): not placed. */
	assert_int_equal(PLACE(stack_nccl, 9, true, true), HANG_TORCH_UNKNOWN);
	assert_int_equal(PLACE("(cannot run eu-stack: No such file)\n", 9, true, true),
			 HANG_TORCH_UNKNOWN);
	assert_int_equal(hang_torch_place(NULL, 0, 9, true, true), HANG_TORCH_UNKNOWN);
	/* The length bounds the search (the text is not NUL-terminated). */
	assert_int_equal(hang_torch_place(stack_coll, 60, 31147, false, true), HANG_TORCH_UNKNOWN);
}

#define TORCH(r, p)                       \
	{                                 \
		.rank = (r), .torch = (p) \
	}

static void test_the_torch_rank_in_its_own_code_is_named(void **state)
{
	struct hang_where w[] = {TORCH(0, HANG_TORCH_COLL), TORCH(1, HANG_TORCH_OWN),
				 TORCH(2, HANG_TORCH_COLL)};
	char buf[1024];

	verdict(w, 3, 1, buf);
	assert_string_equal(buf, "rank 1 is in its own code, in no torch.distributed collective "
				 "(see its stack): the others wait for it\n"
				 "ranks 0,2 wait in a torch.distributed collective or send/recv "
				 "(a wait of c10d's in their stacks)\n");
	assert_true(hang_torch_culprit(w, 3, 1));
	assert_false(hang_torch_culprit(w, 3, 0));
	assert_false(hang_torch_culprit(w, 3, 2));
}

static void test_a_torch_rank_without_its_group_is_named_by_the_joining(void **state)
{
	struct hang_where w[] = {TORCH(0, HANG_TORCH_STORE), TORCH(1, HANG_TORCH_NOGROUP),
				 TORCH(2, HANG_TORCH_NOGROUP)};
	char buf[1024];

	verdict(w, 3, 2, buf);
	assert_string_equal(buf,
			    "ranks 1-2 have not formed their process group (no torch.distributed "
			    "in their stacks): the others wait for them\n"
			    "rank 0 waits on the store (joining the process group in "
			    "init_process_group, or a key of the program's)\n");
	assert_true(hang_torch_culprit(w, 3, 2));
}

static void test_every_torch_rank_waiting_names_nobody(void **state)
{
	struct hang_where w[] = {TORCH(0, HANG_TORCH_COLL), TORCH(1, HANG_TORCH_COLL)};
	struct hang_where own[] = {TORCH(0, HANG_TORCH_OWN), TORCH(1, HANG_TORCH_OWN)};
	char buf[1024];

	verdict(w, 2, 0, buf);
	assert_non_null(strstr(buf, "every rank waits in a torch.distributed collective: the "
				    "hang is among them"));
	/* Nobody waits: no rank is one the others wait for. */
	verdict(own, 2, 0, buf);
	assert_non_null(strstr(buf, "ranks 0-1 are in their own code"));
	assert_null(strstr(buf, "wait for"));
	assert_non_null(strstr(buf, "no rank waits in torch.distributed"));
	assert_false(hang_torch_culprit(own, 2, 0));
}

/* A rank whose place is not known (NCCL, no stack), stopped, or on a node
 * that sent nothing: no conclusion over every rank is drawn, and the
 * stopped one is not placed again. */
static void test_torch_ranks_not_placed_stop_the_conclusions(void **state)
{
	struct hang_where w[] = {TORCH(0, HANG_TORCH_COLL), TORCH(1, HANG_TORCH_COLL),
				 TORCH(2, HANG_TORCH_UNKNOWN)};
	struct hang_where lost[] = {TORCH(0, HANG_TORCH_COLL), UNKNOWN(1)};
	struct hang_where stopped[] = {TORCH(0, HANG_TORCH_COLL), TORCH(1, HANG_TORCH_OWN)};
	char buf[1024];

	verdict(w, 3, 0, buf);
	assert_non_null(strstr(buf, "ranks 0-1 wait in a torch.distributed collective"));
	assert_non_null(strstr(buf, "1 other rank: not known where"));
	assert_null(strstr(buf, "every rank"));
	verdict(lost, 2, 0, buf);
	assert_non_null(strstr(buf, "rank 1: not known where it is"));
	assert_null(strstr(buf, "every rank"));
	/* A rank whose main thread sleeps while another thread waits: said,
	 * neither a waiter nor the one waited for. */
	struct hang_where side[] = {TORCH(0, HANG_TORCH_COLL), TORCH(1, HANG_TORCH_MIXED)};
	verdict(side, 2, 0, buf);
	assert_string_equal(buf, "rank 1: its main thread is in its own code, another of its "
				 "threads waits in torch.distributed (see its stack)\n"
				 "rank 0 waits in a torch.distributed collective or send/recv (a "
				 "wait of c10d's in its stack)\n");
	assert_false(hang_torch_culprit(side, 2, 1));
	stopped[1].stopped = true;
	verdict(stopped, 2, 1, buf);
	assert_non_null(strstr(buf, "rank 1 is stopped"));
	assert_null(strstr(buf, "own code"));
	assert_false(hang_torch_culprit(stopped, 2, 1));
}

/* The places cross nodes in the list object after the records; an older
 * ddprun's value (none) and bad lists leave them unknown; a libddp record
 * is never given one. */
static void test_torch_places_cross_nodes(void **state)
{
	struct hang_where w[] = {TORCH(0, HANG_TORCH_COLL),    TORCH(1, HANG_TORCH_OWN),
				 TORCH(2, HANG_TORCH_STORE),   TORCH(3, HANG_TORCH_NOGROUP),
				 TORCH(4, HANG_TORCH_UNKNOWN), TORCH(5, HANG_TORCH_MIXED)};
	struct hang_where *back = NULL;
	size_t n = 0;
	char *s = hang_where_encode(w, 6);

	assert_non_null(s);
	assert_int_equal(hang_where_decode(s, strlen(s), &back, &n), 6);
	for (int i = 0; i < 6; i++) {
		assert_int_equal(back[i].rank, i);
		assert_int_equal(back[i].torch, w[i].torch);
	}
	free(back);
	free(s);
	back = NULL;
	n = 0;
	const char *bad = "[[0,0,0,0,0,0],[1,1,0,3,3,0],"
			  "{\"torch_coll\":\"0\",\"torch_own\":[1,\"x\"],\"torch_store\":[0]}]";
	assert_int_equal(hang_where_decode(bad, strlen(bad), &back, &n), 2);
	assert_int_equal(back[0].torch, HANG_TORCH_STORE);
	assert_int_equal(back[1].torch, HANG_TORCH_UNKNOWN); /* libddp's */
	free(back);
}

/* The hang's end (rank -1, observed when the hang was found) beats the
 * SIGABRT failures it caused, which hang_dump.c marks secondary. */
static void test_the_hangs_end_decides_124_over_the_aborts_it_caused(void **state)
{
	struct rdzv_end end = {.kind = RDZV_END_FAIL,
			       .node = 1,
			       .rank = -1,
			       .status = HANG_EXIT,
			       .time_us = 100,
			       .final = true};
	struct report_entry aborted[2] = {
		{.global_rank = 0,
		 .exitcode = -6,
		 .time_us = 200,
		 .caused_by = (char *)"the hang (--hang-timeout)"},
		{.global_rank = 3,
		 .exitcode = -6,
		 .time_us = 150,
		 .caused_by = (char *)"the hang (--hang-timeout)"},
	};
	size_t root;
	int status;

	coord_verdict(&end, aborted, 2, false, &status, &root);
	assert_int_equal(status, HANG_EXIT);
	assert_int_equal(root, 2);
	/* A node whose workers all died ends the round later than they died
	 * (agent.c's finished()): the marker keeps the aborts secondary. */
	end.time_us = 300;
	coord_verdict(&end, aborted, 2, false, &status, &root);
	assert_int_equal(status, HANG_EXIT);
	assert_int_equal(root, 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_the_sleeping_rank_is_named_and_the_waiters_grouped),
		cmocka_unit_test(test_a_rank_in_an_earlier_collective_is_named_too),
		cmocka_unit_test(test_every_rank_in_the_same_collective_names_nobody),
		cmocka_unit_test(
			test_ranks_whose_place_is_not_known_are_named_and_conclude_nothing),
		cmocka_unit_test(test_no_libddp_rank_says_the_stacks_tell),
		cmocka_unit_test(test_ranks_without_libddp_are_listed_apart),
		cmocka_unit_test(test_rank_lists_use_ranges),
		cmocka_unit_test(test_a_long_rank_list_is_cut_between_entries),
		cmocka_unit_test(test_a_verdict_over_many_ranks_names_only_theirs),
		cmocka_unit_test(test_a_verdict_over_many_places_keeps_every_line),
		cmocka_unit_test(test_a_rank_behind_its_own_gpu_work_is_named),
		cmocka_unit_test(test_every_rank_behind_its_own_gpu_work_blames_no_peer),
		cmocka_unit_test(test_positions_cross_nodes_with_their_wait),
		cmocka_unit_test(test_a_stopped_rank_is_named_before_the_places),
		cmocka_unit_test(test_a_stopped_rank_crosses_nodes),
		cmocka_unit_test(test_ranks_in_ddp_init_name_the_rank_that_never_came),
		cmocka_unit_test(test_every_rank_in_ddp_init_blames_the_join),
		cmocka_unit_test(test_a_later_contexts_ddp_init_is_placed_among_the_collectives),
		cmocka_unit_test(test_ranks_in_ddp_init_cross_nodes),
		cmocka_unit_test(test_a_rank_that_exited_is_named),
		cmocka_unit_test(test_a_rank_that_exited_crosses_nodes),
		cmocka_unit_test(test_positions_beyond_a_nodes_ranks_are_dropped),
		cmocka_unit_test(test_a_rank_sent_twice_is_counted_once),
		cmocka_unit_test(test_a_values_lists_are_read_once_and_bounded),
		cmocka_unit_test(test_positions_out_of_range_are_skipped),
		cmocka_unit_test(test_torch_ranks_are_placed_from_their_stacks),
		cmocka_unit_test(test_the_torch_rank_in_its_own_code_is_named),
		cmocka_unit_test(test_a_torch_rank_without_its_group_is_named_by_the_joining),
		cmocka_unit_test(test_every_torch_rank_waiting_names_nobody),
		cmocka_unit_test(test_torch_ranks_not_placed_stop_the_conclusions),
		cmocka_unit_test(test_torch_places_cross_nodes),
		cmocka_unit_test(test_the_hangs_end_decides_124_over_the_aborts_it_caused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
