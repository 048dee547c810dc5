/* Unit tests for the multi-node verdict (launcher/coord_report.c): the exit
 * status every node ends with and node 0's root cause come from the failures
 * every node published and the round's end, by the root-cause rule of
 * report.h, whichever failure won the race to end the round. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "coord_int.h"

#define CAUSE (char *)"rank 2 (pid 9) exited"

/* Ranks 0 and 1 (node 0) failed because rank 2 (node 1) exited with 7; the
 * agent of node 1 was slow: node 0's failures were seen first. */
static struct report_entry crash[4] = {
	{.global_rank = 0, .exitcode = 3, .time_us = 100, .caused_by = CAUSE},
	{.global_rank = 1, .exitcode = 3, .time_us = 101, .caused_by = CAUSE},
	{.global_rank = 2, .exitcode = 7, .time_us = 500},
	{.global_rank = 3, .exitcode = -15, .time_us = 501, .caused_by = CAUSE},
};

static struct rdzv_end fail_end(int node, int rank, int status, int64_t t, const char *cause)
{
	struct rdzv_end e = {.kind = RDZV_END_FAIL, .node = node, .rank = rank, .status = status};

	e.time_us = t;
	strcpy(e.caused_by, cause ? cause : "");
	return e;
}

static void test_a_consequence_that_ended_the_round_is_not_the_root_cause(void **state)
{
	struct rdzv_end end = fail_end(0, 0, 3, 100, CAUSE);
	size_t root;
	int status;

	coord_verdict(&end, crash, 4, false, &status, &root);
	assert_int_equal(status, 7);
	assert_int_equal(root, 2);
	/* Node 1's order of publishing changes nothing. */
	coord_verdict(&end, crash + 2, 2, false, &status, &root);
	assert_int_equal(status, 7);
	assert_int_equal(root, 0);
}

/* A failure after the stop (its error file came then: a SIGTERM handler
 * that failed) neither ends as the root cause nor sets the status, even as a
 * primary failure before a secondary one, or alone beside the end's own. */
static void test_a_failure_after_the_stop_decides_nothing(void **state)
{
	struct report_entry e[2] = {
		{.global_rank = 0, .exitcode = 3, .time_us = 100, .caused_by = CAUSE},
		{.global_rank = 1, .exitcode = 2, .time_us = 50, .stopped = true, .late = true},
	};
	struct rdzv_end end = fail_end(0, 0, 3, 100, CAUSE);
	size_t root;
	int status;

	coord_verdict(&end, e, 2, false, &status, &root);
	assert_int_equal(status, 3);
	assert_int_equal(root, 0);
	/* Only the late one listed: the end's own failure decides. */
	coord_verdict(&end, e + 1, 1, false, &status, &root);
	assert_int_equal(status, 3);
	assert_int_equal(root, 1); /* none of the list */
	/* ... and a node that never told leaves it lost, as without it. */
	coord_verdict(&end, e + 1, 1, true, &status, &root);
	assert_int_equal(status, COORD_EXIT_LOST);
}

static void test_the_earliest_primary_failure_wins(void **state)
{
	struct report_entry e[3] = {
		{.global_rank = 4, .exitcode = 5, .time_us = 300},
		{.global_rank = 1, .exitcode = 6, .time_us = 200},
		{.global_rank = 0, .exitcode = 9, .time_us = 200},
	};
	struct rdzv_end end = fail_end(2, 4, 5, 300, NULL);
	size_t root;
	int status;

	coord_verdict(&end, e, 3, false, &status, &root);
	assert_int_equal(root, 2); /* tie at 200: the lower global rank */
	assert_int_equal(status, 9);
}

static void test_only_secondary_failures_the_earliest_decides(void **state)
{
	/* Every rank timed out waiting for the others: nobody failed on its own. */
	struct report_entry e[2] = {
		{.global_rank = 1, .exitcode = 3, .time_us = 20, .caused_by = CAUSE},
		{.global_rank = 0, .exitcode = 4, .time_us = 10, .caused_by = CAUSE},
	};
	struct rdzv_end end = fail_end(1, 1, 3, 20, CAUSE);
	size_t root;
	int status;

	coord_verdict(&end, e, 2, false, &status, &root);
	assert_int_equal(root, 1);
	assert_int_equal(status, 4);
}

static void test_a_node_that_never_told_with_only_consequences_seen_is_lost(void **state)
{
	/* Node 1 died with its workers (kill -9) after node 0's consequence
	 * ended the round: its list never came. */
	struct rdzv_end end = fail_end(0, 0, 3, 100, CAUSE);
	size_t root;
	int status;

	coord_verdict(&end, crash, 2, true, &status, &root);
	assert_int_equal(status, COORD_EXIT_LOST);
	assert_int_equal(root, 2);
	/* A primary failure seen anywhere still decides. */
	coord_verdict(&end, crash, 3, true, &status, &root);
	assert_int_equal(status, 7);
	assert_int_equal(root, 2);
}

static void test_the_ends_own_failure_counts_when_no_list_holds_it(void **state)
{
	/* A worker's failure ended the round; its node died before publishing. */
	struct rdzv_end end = fail_end(1, 2, 7, 500, NULL);
	size_t root;
	int status;

	coord_verdict(&end, crash, 2, true, &status, &root);
	assert_int_equal(status, 7);
	assert_int_equal(root, 2); /* no entry: the end itself */
	/* The same end, as a consequence, when no primary is seen: lost. */
	end = fail_end(1, 3, 3, 50, CAUSE);
	coord_verdict(&end, crash, 2, true, &status, &root);
	assert_int_equal(status, COORD_EXIT_LOST);
	assert_int_equal(root, 2);
	/* No failure listed at all: the end's. */
	end = fail_end(1, 2, 7, 500, NULL);
	coord_verdict(&end, NULL, 0, false, &status, &root);
	assert_int_equal(status, 7);
	assert_int_equal(root, 0);
}

static void test_a_signal_to_a_ddprun_is_a_primary_failure(void **state)
{
	/* SIGTERM to node 1's ddprun at t=300 (no worker: rank -1). */
	struct rdzv_end end = fail_end(1, -1, 143, 300, NULL);
	struct report_entry later = {.global_rank = 0, .exitcode = 1, .time_us = 400};
	struct report_entry earlier = {.global_rank = 0, .exitcode = 1, .time_us = 200};
	size_t root;
	int status;

	/* What it broke does not hide it. */
	coord_verdict(&end, crash, 2, false, &status, &root);
	assert_int_equal(status, 143);
	assert_int_equal(root, 2);
	/* A worker that failed on its own after it does not either... */
	coord_verdict(&end, &later, 1, false, &status, &root);
	assert_int_equal(status, 143);
	assert_int_equal(root, 1);
	/* ...but one that failed before it is the root cause. */
	coord_verdict(&end, &earlier, 1, false, &status, &root);
	assert_int_equal(status, 1);
	assert_int_equal(root, 0);
}

static void test_a_lost_node_is_75_unless_a_worker_failed_on_its_own(void **state)
{
	struct rdzv_end end = {.kind = RDZV_END_LOST, .node = 1, .rank = -1};
	size_t root;
	int status;

	coord_verdict(&end, NULL, 0, false, &status, &root);
	assert_int_equal(status, COORD_EXIT_LOST);
	assert_int_equal(root, 0);
	/* Ranks that failed because the node went: still lost. */
	coord_verdict(&end, crash, 2, false, &status, &root);
	assert_int_equal(status, COORD_EXIT_LOST);
	assert_int_equal(root, 2);
	/* A primary worker failure: its status. */
	coord_verdict(&end, crash, 4, false, &status, &root);
	assert_int_equal(status, 7);
	assert_int_equal(root, 2);
}

static void test_every_node_agrees_whatever_order_the_lists_come_in(void **state)
{
	struct report_entry a[4], b[4];
	struct rdzv_end end = fail_end(0, 1, 3, 101, CAUSE);
	size_t ra, rb;
	int sa, sb;

	/* Node 0 lists its own first, node 1 its own first. */
	memcpy(a, crash, sizeof(a));
	memcpy(b, crash + 2, 2 * sizeof(*b));
	memcpy(b + 2, crash, 2 * sizeof(*b));
	coord_verdict(&end, a, 4, false, &sa, &ra);
	coord_verdict(&end, b, 4, false, &sb, &rb);
	assert_int_equal(sa, sb);
	assert_int_equal(a[ra].global_rank, b[rb].global_rank);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_a_consequence_that_ended_the_round_is_not_the_root_cause),
		cmocka_unit_test(test_a_failure_after_the_stop_decides_nothing),
		cmocka_unit_test(test_the_earliest_primary_failure_wins),
		cmocka_unit_test(test_only_secondary_failures_the_earliest_decides),
		cmocka_unit_test(test_a_node_that_never_told_with_only_consequences_seen_is_lost),
		cmocka_unit_test(test_the_ends_own_failure_counts_when_no_list_holds_it),
		cmocka_unit_test(test_a_signal_to_a_ddprun_is_a_primary_failure),
		cmocka_unit_test(test_a_lost_node_is_75_unless_a_worker_failed_on_its_own),
		cmocka_unit_test(test_every_node_agrees_whatever_order_the_lists_come_in),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
