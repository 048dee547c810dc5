/* Unit tests for launcher/slurm.c: Slurm hostlist syntax and SLURM_* derivation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "slurm.h"

/* Expand list and compare with the space-separated expectation. */
static void expect_hosts(const char *list, const char *want)
{
	char **hosts = NULL;
	size_t n = 0;
	char got[4096] = "";

	assert_int_equal(slurm_hostlist_expand(list, &hosts, &n), 0);
	for (size_t i = 0; i < n; i++) {
		if (i)
			strcat(got, " ");
		strcat(got, hosts[i]);
	}
	slurm_hosts_free(hosts, n);
	assert_string_equal(got, want);
}

static void expect_error(const char *list, int err)
{
	char **hosts = (char **)0x1;
	size_t n = 12345;
	char first[64];

	assert_int_equal(slurm_hostlist_expand(list, &hosts, &n), err);
	assert_ptr_equal(hosts, (char **)0x1); /* untouched on failure */
	assert_int_equal(n, 12345);
	if (err == -EINVAL && list != NULL)
		assert_int_not_equal(slurm_hostlist_first(list, first, sizeof(first)), 0);
}

static void test_plain_names(void **state)
{
	expect_hosts("node1", "node1");
	expect_hosts("a,b,c", "a b c");
	expect_hosts("node-1.cluster.example", "node-1.cluster.example");
}

static void test_ranges_and_padding(void **state)
{
	expect_hosts("node[01-04,07],gpu-a[1-2]",
		     "node01 node02 node03 node04 node07 gpu-a1 gpu-a2");
	expect_hosts("n[8-11]", "n8 n9 n10 n11");
	expect_hosts("n[098-101]", "n098 n099 n100 n101");
	expect_hosts("n[0]", "n0");
	expect_hosts("n[5,3,4]", "n5 n3 n4"); /* order as written */
	expect_hosts("[1-2]x", "1x 2x");
}

static void test_cross_product(void **state)
{
	expect_hosts("rack[1-2]-n[1-3]", "rack1-n1 rack1-n2 rack1-n3 rack2-n1 rack2-n2 rack2-n3");
	expect_hosts("r[1-2]s,x[3]", "r1s r2s x3");
}

static void test_first_host(void **state)
{
	char first[64];

	assert_int_equal(slurm_hostlist_first("node[01-04,07],gpu-a[1-2]", first, sizeof(first)),
			 0);
	assert_string_equal(first, "node01");
	assert_int_equal(slurm_hostlist_first("gpu[3-4]-x[7]", first, sizeof(first)), 0);
	assert_string_equal(first, "gpu3-x7");
	/* A huge range is not expanded just to read the first host. */
	assert_int_equal(slurm_hostlist_first("n[0-999999999]", first, sizeof(first)), 0);
	assert_string_equal(first, "n0");
	assert_int_equal(slurm_hostlist_first("node[01-04]", first, 4), -ENAMETOOLONG);
}

static void test_malformed(void **state)
{
	expect_error("", -EINVAL);
	expect_error(NULL, -EINVAL);
	expect_error("node[1-3", -EINVAL);
	expect_error("node1-3]", -EINVAL);
	expect_error("node[[1-3]]", -EINVAL);
	expect_error("node[]", -EINVAL);
	expect_error("node[3-1]", -EINVAL);
	expect_error("node[a-b]", -EINVAL);
	expect_error("node[1-]", -EINVAL);
	expect_error("node[-1]", -EINVAL);
	expect_error("node[1,]", -EINVAL);
	expect_error("node[,1]", -EINVAL);
	expect_error("node[1--2]", -EINVAL);
	expect_error("node[ 1]", -EINVAL);
	/* White space strtoll would skip is no digit either (fuzz_launch_slurm). */
	expect_error("node[\n1]", -EINVAL);
	expect_error("node[1-\r2]", -EINVAL);
	expect_error("a,,b", -EINVAL);
	expect_error("a,", -EINVAL);
	expect_error(",a", -EINVAL);
}

static void test_limits(void **state)
{
	char name[300];

	expect_error("n[0-99999999]", -E2BIG); /* more than SLURM_MAX_HOSTS */
	memset(name, 'x', sizeof(name) - 1);
	name[sizeof(name) - 1] = '\0';
	expect_error(name, -E2BIG);
}

/* A fake environment for slurm_info_read. */
static const char *const *fake_env;
static const char *fake_getenv(const char *name)
{
	size_t n = strlen(name);

	for (const char *const *e = fake_env; *e != NULL; e++)
		if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
			return *e + n + 1;
	return NULL;
}

static void test_info_outside_allocation(void **state)
{
	static const char *const env[] = {"SLURM_NNODES=4", NULL};
	struct slurm_info info;
	char err[256] = "";

	fake_env = env;
	assert_int_equal(slurm_info_read(fake_getenv, SLURM_NEED_ALL, &info, err, sizeof(err)), 0);
	assert_int_equal(info.in_allocation, 0);
	assert_int_equal(info.nnodes, -1);
	assert_string_equal(info.stray, "SLURM_NNODES");
}

static void test_info_nothing_stray(void **state)
{
	static const char *const env[] = {"SLURM_CONF=/etc/slurm/slurm.conf", NULL};
	struct slurm_info info;
	char err[256] = "";

	fake_env = env;
	assert_int_equal(slurm_info_read(fake_getenv, SLURM_NEED_ALL, &info, err, sizeof(err)), 0);
	assert_null(info.stray);
}

/* srun -N1 in a 3-node job: the step's own node hosts the store. */
static void test_info_step_nodelist_first(void **state)
{
	static const char *const env[] = {
		"SLURM_JOB_ID=7",	  "SLURM_STEP_ID=1",	       "SLURM_NNODES=1",
		"SLURM_NODEID=0",	  "SLURM_JOB_NODELIST=n[1-3]", "SLURM_STEP_NODELIST=n2",
		"SLURM_STEP_NUM_NODES=1", "SLURM_STEP_NUM_TASKS=1",    NULL};
	struct slurm_info info;
	char err[256] = "";

	fake_env = env;
	assert_int_equal(slurm_info_read(fake_getenv, SLURM_NEED_ALL, &info, err, sizeof(err)), 0);
	assert_string_equal(info.master, "n2");
	assert_int_equal(info.nnodes, 1);
}

static void test_info_two_tasks_per_node(void **state)
{
	static const char *const env[] = {"SLURM_JOB_ID=7",
					  "SLURM_STEP_ID=0",
					  "SLURM_NNODES=3",
					  "SLURM_NODEID=1",
					  "SLURM_JOB_NODELIST=n[1-3]",
					  "SLURM_STEP_NUM_NODES=3",
					  "SLURM_STEP_NUM_TASKS=6",
					  NULL};
	struct slurm_info info;
	char err[256] = "";

	fake_env = env;
	assert_int_equal(slurm_info_read(fake_getenv, SLURM_NEED_ALL, &info, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "srun started 6 tasks on 3 nodes"));
	assert_non_null(strstr(err, "--ntasks-per-node=1"));
}

static void test_info_allocation(void **state)
{
	static const char *const env[] = {"SLURM_JOB_ID=123",
					  "SLURM_STEP_ID=0",
					  "SLURM_NNODES=5",
					  "SLURM_NODEID=2",
					  "SLURM_JOB_NODELIST=gpu-a[07-09],gpu-b[1-2]",
					  NULL};
	struct slurm_info info;
	char err[256] = "";

	fake_env = env;
	assert_int_equal(slurm_info_read(fake_getenv, SLURM_NEED_ALL, &info, err, sizeof(err)), 0);
	assert_int_equal(info.in_allocation, 1);
	assert_int_equal(info.nnodes, 5);
	assert_int_equal(info.node_rank, 2);
	assert_string_equal(info.master, "gpu-a07");
	assert_string_equal(info.job_id, "123");
	assert_string_equal(info.run_id, "123.0");
}

/* A requeued job keeps its id and numbers its steps from 0 again: the run id
 * tells the runs apart by SLURM_RESTART_COUNT; the first (0) keeps JOB.STEP. */
static void test_info_requeued_job(void **state)
{
	static const char *const env[] = {"SLURM_JOB_ID=19", "SLURM_STEP_ID=0",
					  "SLURM_RESTART_COUNT=0", NULL};
	static const char *const again[] = {"SLURM_JOB_ID=19", "SLURM_STEP_ID=0",
					    "SLURM_RESTART_COUNT=2", NULL};
	static const char *const batch[] = {"SLURM_JOB_ID=19", "SLURM_RESTART_COUNT=1", NULL};
	struct slurm_info info;
	char err[256] = "";

	(void)state;
	fake_env = env;
	assert_int_equal(slurm_info_read(fake_getenv, 0, &info, err, sizeof(err)), 0);
	assert_string_equal(info.run_id, "19.0");
	fake_env = again;
	assert_int_equal(slurm_info_read(fake_getenv, 0, &info, err, sizeof(err)), 0);
	assert_string_equal(info.run_id, "19.0.r2");
	fake_env = batch;
	assert_int_equal(slurm_info_read(fake_getenv, 0, &info, err, sizeof(err)), 0);
	assert_string_equal(info.run_id, "19.r1");
}

/* The default run id is whole or none: a requeued job's JOB.STEP.rN longer
 * than a run id may be (RDZV_RUN_ID_MAX - 1: libddp refuses a longer
 * TORCHELASTIC_RUN_ID, the store's runs/ leaves it out) was taken as it was,
 * or cut at 135 bytes; a step id cut at 60 bytes could be another step's.
 * Too long, it is an error when needed (--rdzv-id not given), else "". */
static void test_info_a_run_id_is_whole_or_an_error(void **state)
{
	char job[80], step[80], e_step[100], e_long[100], e_max[100];
	const char *const with_step[] = {e_step, "SLURM_JOB_ID=7", NULL};
	const char *const too_long[] = {e_long, job, "SLURM_RESTART_COUNT=12345", NULL};
	const char *const longest[] = {e_max, job, "SLURM_RESTART_COUNT=1", NULL};
	struct slurm_info info;
	char err[256] = "";

	(void)state;
	/* SLURM_JOB_ID of 60 digits, a step id of 70 and of 60 bytes. */
	snprintf(job, sizeof(job), "SLURM_JOB_ID=%060d", 1);
	snprintf(step, sizeof(step), "%070d", 2);
	snprintf(e_step, sizeof(e_step), "SLURM_STEP_ID=%s", step);
	snprintf(e_long, sizeof(e_long), "SLURM_STEP_ID=%060d", 2);
	snprintf(e_max, sizeof(e_max), "SLURM_STEP_ID=%063d", 2);

	fake_env = with_step;
	assert_int_equal(slurm_info_read(fake_getenv, SLURM_NEED_RUN_ID, &info, err, sizeof(err)),
			 0);
	assert_int_equal(strlen(info.run_id), 72);
	assert_string_equal(info.run_id + 2, step);

	/* 60 + 1 + 63 + 3 bytes: the longest. */
	fake_env = longest;
	assert_int_equal(slurm_info_read(fake_getenv, SLURM_NEED_RUN_ID, &info, err, sizeof(err)),
			 0);
	assert_int_equal(strlen(info.run_id), RDZV_RUN_ID_MAX - 1);
	assert_string_equal(info.run_id + RDZV_RUN_ID_MAX - 4, ".r1");

	/* 60 + 1 + 60 + 7 bytes. */
	fake_env = too_long;
	assert_int_equal(slurm_info_read(fake_getenv, SLURM_NEED_RUN_ID, &info, err, sizeof(err)),
			 -EINVAL);
	assert_string_equal(err, "the run id SLURM_JOB_ID.SLURM_STEP_ID.rSLURM_RESTART_COUNT would "
				 "be 128 bytes long, more than the 127 a run id may have: give "
				 "--rdzv-id");
	assert_int_equal(slurm_info_read(fake_getenv, 0, &info, err, sizeof(err)), 0);
	assert_string_equal(info.run_id, "");
}

/* The batch script of a 3-node job (no step): no other node would start
 * ddprun. With one node, or --nnodes given, it runs. */
static void test_info_batch_script_of_several_nodes(void **state)
{
	static const char *const three[] = {"SLURM_JOB_ID=123", "SLURM_NNODES=3", "SLURM_NODEID=0",
					    "SLURM_JOB_NODELIST=n[1-3]", NULL};
	static const char *const one[] = {"SLURM_JOB_ID=123", "SLURM_NNODES=1", "SLURM_NODEID=0",
					  "SLURM_JOB_NODELIST=n1", NULL};
	struct slurm_info info;
	char err[256] = "";

	fake_env = three;
	assert_int_equal(slurm_info_read(fake_getenv, SLURM_NEED_ALL, &info, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "SLURM_NNODES=3, but this is no srun step"));
	assert_non_null(strstr(err, "srun ddprun"));
	assert_int_equal(slurm_info_read(fake_getenv, SLURM_NEED_NODE_RANK | SLURM_NEED_MASTER,
					 &info, err, sizeof(err)),
			 0);
	fake_env = one;
	assert_int_equal(slurm_info_read(fake_getenv, SLURM_NEED_ALL, &info, err, sizeof(err)), 0);
	assert_string_equal(info.run_id, "123"); /* no step */
}

/* sbatch run from inside a step (srun --pty bash) passes that step's
 * variables on to the batch script: not this job's, so not used (the store
 * was looked for on the other job's node), and said. */
static void test_info_step_variables_of_another_job(void **state)
{
	static const char *const one[] = {
		"SLURM_JOB_ID=9",	  "SLURM_NNODES=1",	    "SLURM_NODEID=0",
		"SLURM_JOB_NODELIST=n1",  "SLURM_STEP_ID=0",	    "SLURM_STEP_NODELIST=n3",
		"SLURM_STEP_NUM_NODES=1", "SLURM_STEP_NUM_TASKS=1", NULL};
	static const char *const two[] = {"SLURM_JOB_ID=7",
					  "SLURM_NNODES=2",
					  "SLURM_NODEID=0",
					  "SLURM_JOB_NODELIST=n[1-2]",
					  "SLURM_STEP_ID=0",
					  "SLURM_STEP_NODELIST=n1",
					  "SLURM_STEP_NUM_NODES=1",
					  "SLURM_STEP_NUM_TASKS=1",
					  NULL};
	struct slurm_info info;
	char err[400] = "";

	(void)state;
	fake_env = one;
	assert_int_equal(slurm_info_read(fake_getenv, SLURM_NEED_ALL, &info, err, sizeof(err)), 0);
	assert_string_equal(info.master, "n1");
	assert_string_equal(info.master_var, "SLURM_JOB_NODELIST");
	assert_string_equal(info.run_id, "9");
	assert_non_null(strstr(info.step_ignored,
			       "SLURM_STEP_NODELIST=n3 is not within SLURM_JOB_NODELIST=n1"));
	fake_env = two;
	assert_int_equal(slurm_info_read(fake_getenv, SLURM_NEED_ALL, &info, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "SLURM_NNODES=2, but this is no srun step "
				    "(SLURM_STEP_NUM_NODES=1 is not SLURM_NNODES=2: the "
				    "SLURM_STEP_* variables are another job's"));
	assert_int_equal(slurm_step(fake_getenv, err, sizeof(err)), SLURM_STEP_STALE);
}

/* salloc's shell under LaunchParameters=use_interactive_step is a step of
 * Slurm's own on one node, with the job's SLURM_NNODES: no other node
 * starts ddprun there (it waited for them until join_timeout). */
static void test_info_interactive_step(void **state)
{
	static const char *const env[] = {"SLURM_JOB_ID=3",
					  "SLURM_NNODES=3",
					  "SLURM_NODEID=0",
					  "SLURM_JOB_NODELIST=n[1-3]",
					  "SLURM_STEP_ID=4294967290",
					  "SLURM_STEP_NODELIST=n1",
					  "SLURM_STEP_NUM_NODES=1",
					  "SLURM_STEP_NUM_TASKS=1",
					  NULL};
	struct slurm_info info;
	char err[400] = "";

	(void)state;
	fake_env = env;
	assert_int_equal(slurm_step(fake_getenv, err, sizeof(err)), SLURM_STEP_OWN);
	assert_int_equal(slurm_info_read(fake_getenv, SLURM_NEED_ALL, &info, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "SLURM_NNODES=3, but this is no srun step (SLURM_STEP_ID="
				    "4294967290: salloc's interactive step"));
	assert_int_equal(slurm_info_read(fake_getenv, SLURM_NEED_NODE_RANK | SLURM_NEED_MASTER,
					 &info, err, sizeof(err)),
			 0);
	assert_string_equal(info.run_id, "3");
	assert_string_equal(info.step_ignored, "");
}

/* srun --het-group=0,1: SLURM_NODEID goes component by component (n3 of
 * component 0 is node 0), SLURM_STEP_NODELIST is sorted (n1 first): the
 * store was looked for on n1 while n3 hosted it. */
static void test_info_heterogeneous_step(void **state)
{
	static const char *const het[] = {"SLURM_JOB_ID=3",
					  "SLURM_STEP_ID=0",
					  "SLURM_NNODES=3",
					  "SLURM_NODEID=1",
					  "SLURM_JOB_NODELIST=n[1-3]",
					  "SLURM_STEP_NODELIST=n[1-3]",
					  "SLURM_STEP_NUM_NODES=3",
					  "SLURM_STEP_NUM_TASKS=3",
					  "SLURM_HET_SIZE=2",
					  "SLURM_JOB_NODELIST_HET_GROUP_0=n3",
					  "SLURM_JOB_NODELIST_HET_GROUP_1=n[1-2]",
					  NULL};
	static const char *const pack[] = {"SLURM_JOB_ID=3",
					   "SLURM_STEP_ID=0",
					   "SLURM_NNODES=3",
					   "SLURM_STEP_NODELIST=n[1-3]",
					   "SLURM_PACK_SIZE=2",
					   "SLURM_JOB_NODELIST_PACK_GROUP_0=n[2-3]",
					   "SLURM_JOB_NODELIST_PACK_GROUP_1=n1",
					   NULL};
	static const char *const one[] = {"SLURM_JOB_ID=3",
					  "SLURM_STEP_ID=1",
					  "SLURM_NNODES=2",
					  "SLURM_NODEID=0",
					  "SLURM_STEP_NODELIST=n[1-2]",
					  "SLURM_STEP_NUM_NODES=2",
					  "SLURM_HET_SIZE=2",
					  "SLURM_JOB_NODELIST_HET_GROUP_0=n[1-2]",
					  "SLURM_JOB_NODELIST_HET_GROUP_1=n3",
					  NULL};
	static const char *const within[] = {"SLURM_JOB_ID=3",
					     "SLURM_STEP_ID=2",
					     "SLURM_NNODES=2",
					     "SLURM_NODEID=0",
					     "SLURM_STEP_NODELIST=n[2-3]",
					     "SLURM_STEP_NUM_NODES=2",
					     "SLURM_HET_SIZE=2",
					     "SLURM_JOB_NODELIST_HET_GROUP_0=n[1-3]",
					     "SLURM_JOB_NODELIST_HET_GROUP_1=n4",
					     NULL};
	/* Components 1 and 2 of three (--het-group=1,2): not the job's first
	 * two, so node 0 cannot be told. */
	static const char *const part[] = {"SLURM_JOB_ID=3",
					   "SLURM_STEP_ID=0",
					   "SLURM_NNODES=2",
					   "SLURM_STEP_NODELIST=n[1-2]",
					   "SLURM_HET_SIZE=2",
					   "SLURM_JOB_NODELIST_HET_GROUP_0=n3",
					   "SLURM_JOB_NODELIST_HET_GROUP_1=n1",
					   NULL};
	struct slurm_info info;
	char err[600] = "";

	(void)state;
	fake_env = het;
	assert_int_equal(slurm_info_read(fake_getenv, SLURM_NEED_ALL, &info, err, sizeof(err)), 0);
	assert_string_equal(info.master, "n3");
	assert_string_equal(info.master_var, "SLURM_JOB_NODELIST_HET_GROUP_0");
	fake_env = pack;
	assert_int_equal(slurm_info_read(fake_getenv, SLURM_NEED_MASTER, &info, err, sizeof(err)),
			 0);
	assert_string_equal(info.master, "n2");
	assert_string_equal(info.master_var, "SLURM_JOB_NODELIST_PACK_GROUP_0");
	/* One component's step (srun without --het-group: component 0; the
	 * script's SLURM_HET_SIZE inherited): its sorted list numbers it. */
	fake_env = one;
	assert_int_equal(slurm_info_read(fake_getenv, SLURM_NEED_ALL, &info, err, sizeof(err)), 0);
	assert_string_equal(info.master, "n1");
	assert_string_equal(info.master_var, "SLURM_STEP_NODELIST");
	/* Part of one component (srun -N2 in a component of 3): the same. */
	fake_env = within;
	assert_int_equal(slurm_info_read(fake_getenv, SLURM_NEED_ALL, &info, err, sizeof(err)), 0);
	assert_string_equal(info.master, "n2");
	fake_env = part;
	assert_int_equal(slurm_info_read(fake_getenv, SLURM_NEED_ALL, &info, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "a heterogeneous step (SLURM_HET_SIZE=2)"));
	assert_non_null(strstr(err, "--master-addr"));
	/* Without a --master-addr to find, nothing to refuse. */
	assert_int_equal(slurm_info_read(fake_getenv, SLURM_NEED_NNODES, &info, err, sizeof(err)),
			 0);
}

static void test_info_alternate_names(void **state)
{
	static const char *const env[] = {"SLURM_JOBID=9",	   "SLURM_STEPID=0",
					  "SLURM_JOB_NUM_NODES=2", "SLURM_NODEID=1",
					  "SLURM_NODELIST=x[1-2]", NULL};
	struct slurm_info info;
	char err[256] = "";

	fake_env = env;
	assert_int_equal(slurm_info_read(fake_getenv, SLURM_NEED_ALL, &info, err, sizeof(err)), 0);
	assert_int_equal(info.nnodes, 2);
	assert_int_equal(info.node_rank, 1);
	assert_string_equal(info.master, "x1");
}

/* A variable the caller does not need is not read: its flag was given. */
static void test_info_reads_only_what_is_needed(void **state)
{
	static const char *const env[] = {"SLURM_JOB_ID=9", "SLURM_NNODES=many", "SLURM_NODEID=x",
					  "SLURM_JOB_NODELIST=n[1-", NULL};
	struct slurm_info info;
	char err[256] = "";

	fake_env = env;
	assert_int_equal(slurm_info_read(fake_getenv, 0, &info, err, sizeof(err)), 0);
	assert_int_equal(info.nnodes, -1);
	assert_int_equal(info.node_rank, -1);
	assert_string_equal(info.master, "");
	assert_int_equal(
		slurm_info_read(fake_getenv, SLURM_NEED_NODE_RANK, &info, err, sizeof(err)),
		-EINVAL);
	assert_non_null(strstr(err, "SLURM_NODEID='x'"));
	assert_non_null(strstr(err, "set --node-rank instead"));
	assert_int_equal(slurm_info_read(fake_getenv, SLURM_NEED_MASTER, &info, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "set --master-addr instead"));
}

/* A slurm.conf in a temporary file; its path in path (size 64). */
static void conf_file(char *path, const char *text)
{
	FILE *f;
	int fd;

	snprintf(path, 64, "/tmp/ddp-slurmconf-XXXXXX");
	fd = mkstemp(path);
	assert_true(fd >= 0);
	f = fdopen(fd, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void test_conf_value_last_line_wins_any_case(void **state)
{
	char path[64], v[64];

	(void)state;
	conf_file(path, "# ProctrackType=proctrack/pgid\n"
			"ProctrackTypeX=1\n"
			"ProctrackType=proctrack/linuxproc\n"
			"  proctracktype = proctrack/pgid   # old nodes\n");
	assert_int_equal(slurm_conf_value(path, "ProctrackType", v, sizeof(v)), 0);
	assert_string_equal(v, "proctrack/pgid");
	assert_false(slurm_proctrack_linuxproc(path));
	assert_int_equal(slurm_conf_value(path, "TaskPlugin", v, sizeof(v)), -ENOENT);
	unlink(path);
	conf_file(path, "ProctrackType=proctrack/cgroup\n");
	assert_false(slurm_proctrack_linuxproc(path));
	unlink(path);
	conf_file(path, "ProctrackType = Proctrack/LinuxProc\n");
	assert_true(slurm_proctrack_linuxproc(path));
	unlink(path);
	/* Unreadable: Slurm's default, proctrack/cgroup. */
	assert_false(slurm_proctrack_linuxproc(path));
	assert_int_equal(slurm_conf_value(path, "ProctrackType", v, sizeof(v)), -ENOENT);
}

static void test_info_malformed(void **state)
{
	static const char *const bad_nodes[] = {"SLURM_JOB_ID=1", "SLURM_NNODES=two", NULL};
	static const char *const bad_rank[] = {"SLURM_JOB_ID=1", "SLURM_NNODES=2", "SLURM_NODEID=2",
					       NULL};
	static const char *const bad_list[] = {"SLURM_JOB_ID=1", "SLURM_JOB_NODELIST=n[1-", NULL};
	struct slurm_info info;
	char err[256];

	fake_env = bad_nodes;
	assert_int_equal(slurm_info_read(fake_getenv, SLURM_NEED_ALL, &info, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "SLURM_NNODES='two'"));
	fake_env = bad_rank;
	assert_int_equal(slurm_info_read(fake_getenv, SLURM_NEED_ALL, &info, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "SLURM_NODEID=2"));
	fake_env = bad_list;
	assert_int_equal(slurm_info_read(fake_getenv, SLURM_NEED_ALL, &info, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "SLURM_JOB_NODELIST"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_plain_names),
		cmocka_unit_test(test_ranges_and_padding),
		cmocka_unit_test(test_cross_product),
		cmocka_unit_test(test_first_host),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_limits),
		cmocka_unit_test(test_info_outside_allocation),
		cmocka_unit_test(test_info_nothing_stray),
		cmocka_unit_test(test_info_step_nodelist_first),
		cmocka_unit_test(test_info_two_tasks_per_node),
		cmocka_unit_test(test_info_allocation),
		cmocka_unit_test(test_info_requeued_job),
		cmocka_unit_test(test_info_a_run_id_is_whole_or_an_error),
		cmocka_unit_test(test_info_batch_script_of_several_nodes),
		cmocka_unit_test(test_info_alternate_names),
		cmocka_unit_test(test_info_step_variables_of_another_job),
		cmocka_unit_test(test_info_interactive_step),
		cmocka_unit_test(test_info_heterogeneous_step),
		cmocka_unit_test(test_info_reads_only_what_is_needed),
		cmocka_unit_test(test_info_malformed),
		cmocka_unit_test(test_conf_value_last_line_wins_any_case),
	};

	return cmocka_run_group_tests_name("slurm", tests, NULL, NULL);
}
