/* Unit tests for libddp's environment parsing (torchrun's variables and the
 * DDP_* knobs), the print-ranks spec, error texts and the torchelastic error
 * file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include <cJSON.h>

#include "ddp_internal.h"

/* A fake environment: "NAME=value" strings, NULL-terminated. */
static const char *table_get(const char *name, void *arg)
{
	const char *const *kv = arg;
	size_t n = strlen(name);
	for (; *kv; kv++)
		if (!strncmp(*kv, name, n) && (*kv)[n] == '=')
			return *kv + n + 1;
	return NULL;
}

static int parse(const char *const *kv, struct ddp_env *e)
{
	return ddpi_env_parse(table_get, (void *)kv, e);
}

static void test_nothing_set_is_a_world_of_one(void **state)
{
	const char *kv[] = {NULL};
	struct ddp_env e;
	assert_int_equal(parse(kv, &e), 0);
	assert_int_equal(e.rank, 0);
	assert_int_equal(e.world, 1);
	assert_int_equal(e.local_world, 1);
	assert_int_equal(e.nnodes, 1);
	assert_int_equal(e.under_launcher, 0);
	assert_string_equal(e.run_id, "none");
	assert_int_equal(e.timeout_ms, DDP_DEFAULT_TIMEOUT_MS);
	assert_int_equal(e.backend, DDP_BACKEND_AUTO);
	assert_int_equal(e.shm_cma, -1);
	assert_string_equal(e.tcp_cc, "auto");
}

/* DDP_TCP_CONGESTION: auto (unset), system, or a name as the kernel spells
 * them, up to its 15 characters (what the ring does with each:
 * tests/e2e/test_ddp_multinode.py). */
static void test_tcp_congestion(void **state)
{
	struct ddp_env e;
	const char *ok[] = {"cubic", "system", "auto", "reno", "a23456789_12345", "x-y"};

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		char kv[64];
		snprintf(kv, sizeof(kv), "DDP_TCP_CONGESTION=%s", ok[i]);
		assert_int_equal(parse((const char *[]){kv, NULL}, &e), 0);
		assert_string_equal(e.tcp_cc, ok[i]);
	}
	assert_int_equal(parse((const char *[]){"DDP_TCP_CONGESTION=", NULL}, &e), 0);
	assert_string_equal(e.tcp_cc, "auto"); /* empty is unset, as for every knob */
}

/* DDP_SOCKET_IFNAME: an interface's name, up to the kernel's 15 characters
 * (what the ring does with it: tests/e2e/test_multinode_netns.py). */
static void test_socket_ifname(void **state)
{
	struct ddp_env e;
	const char *bad[] = {"DDP_SOCKET_IFNAME=a23456789012345x", "DDP_SOCKET_IFNAME=a/b",
			     "DDP_SOCKET_IFNAME=eth 0", "DDP_SOCKET_IFNAME=eth0:1"};

	assert_int_equal(parse((const char *[]){NULL}, &e), 0);
	assert_string_equal(e.socket_ifname, "");
	assert_int_equal(parse((const char *[]){"DDP_SOCKET_IFNAME=a23456789012345", NULL}, &e), 0);
	assert_string_equal(e.socket_ifname, "a23456789012345");
	assert_int_equal(parse((const char *[]){"DDP_SOCKET_IFNAME=enp1s0f0", NULL}, &e), 0);
	assert_string_equal(e.socket_ifname, "enp1s0f0");
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(parse((const char *[]){bad[i], NULL}, &e), DDP_EENV);
}

static void test_torchrun_environment(void **state)
{
	const char *kv[] = {"RANK=5",
			    "WORLD_SIZE=8",
			    "LOCAL_RANK=1",
			    "LOCAL_WORLD_SIZE=4",
			    "GROUP_RANK=1",
			    "GROUP_WORLD_SIZE=2",
			    "MASTER_ADDR=node0",
			    "MASTER_PORT=29500",
			    "TORCHELASTIC_RUN_ID=job 7",
			    "TORCHELASTIC_RESTART_COUNT=2",
			    "DDP_TIMEOUT=1.5",
			    "DDP_BACKEND=cpu",
			    "DDP_PRINT_RANKS=0,5-6",
			    "DDP_SHM_CMA=0",
			    NULL};
	struct ddp_env e;
	assert_int_equal(parse(kv, &e), 0);
	assert_int_equal(e.rank, 5);
	assert_int_equal(e.world, 8);
	assert_int_equal(e.local_rank, 1);
	assert_int_equal(e.local_world, 4);
	assert_int_equal(e.node, 1);
	assert_int_equal(e.nnodes, 2);
	assert_string_equal(e.master_addr, "node0");
	assert_int_equal(e.master_port, 29500);
	assert_string_equal(e.run_id, "job 7");
	assert_int_equal(e.restart, 2);
	assert_int_equal(e.timeout_ms, 1500);
	assert_int_equal(e.backend, DDP_BACKEND_CPU);
	assert_string_equal(e.print_ranks, "0,5-6");
	assert_int_equal(e.shm_cma, 0);
	assert_int_equal(e.under_launcher, 1);
	assert_int_equal(e.use_store, 1);
}

/* Who joins at the store: every rank of a launched job that names one; not a
 * program started by hand, not DDP_STORE=0 (single node only). */
static void test_store_use(void **state)
{
	struct ddp_env e;

	assert_int_equal(parse((const char *[]){"RANK=0", "WORLD_SIZE=1", "MASTER_ADDR=h",
						"MASTER_PORT=1", NULL},
			       &e),
			 0);
	assert_int_equal(e.use_store, 1); /* a world of one under a launcher too */
	assert_int_equal(parse((const char *[]){"MASTER_ADDR=h", "MASTER_PORT=1", NULL}, &e), 0);
	assert_int_equal(e.use_store, 0); /* by hand: stray MASTER_* are ignored */
	assert_int_equal(parse((const char *[]){"RANK=0", "WORLD_SIZE=1", NULL}, &e), 0);
	assert_int_equal(e.use_store, 0);
	/* ddp_spawn's children: no store, no MASTER_*, shared memory alone */
	assert_int_equal(parse((const char *[]){"RANK=1", "WORLD_SIZE=4", "DDP_STORE=0", NULL}, &e),
			 0);
	assert_int_equal(e.use_store, 0);
	assert_int_equal(parse((const char *[]){"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=h",
						"MASTER_PORT=1", "DDP_STORE=0", NULL},
			       &e),
			 0);
	assert_int_equal(e.use_store, 0);
	assert_int_equal(parse((const char *[]){"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=h",
						"MASTER_PORT=1", "DDP_STORE=1", NULL},
			       &e),
			 0);
	assert_int_equal(e.use_store, 1);
}

static void test_shm_nonce_from_the_launcher(void **state)
{
	struct ddp_env e;

	assert_int_equal(parse((const char *[]){NULL}, &e), 0);
	assert_string_equal(e.shm_nonce, ""); /* not under ddprun: today's name */
	assert_int_equal(
		parse((const char *[]){"DDP_SHM_NONCE=0123456789abcdefABCDEF0123456789", NULL}, &e),
		0);
	assert_string_equal(e.shm_nonce, "0123456789abcdefABCDEF0123456789");
}

static void test_missing_local_values_are_derived(void **state)
{
	/* env:// style: only RANK/WORLD_SIZE/MASTER_*: one node of everything. */
	const char *kv[] = {"RANK=2", "WORLD_SIZE=3", "MASTER_ADDR=h", "MASTER_PORT=1", NULL};
	struct ddp_env e;
	assert_int_equal(parse(kv, &e), 0);
	assert_int_equal(e.local_rank, 2);
	assert_int_equal(e.local_world, 3);
	assert_int_equal(e.node, 0);
	assert_int_equal(e.nnodes, 1);
	/* LOCAL_WORLD_SIZE alone gives the nodes (torchrun numbers node by node). */
	const char *kv2[] = {"RANK=6",	      "WORLD_SIZE=8",  "LOCAL_WORLD_SIZE=4",
			     "MASTER_ADDR=h", "MASTER_PORT=1", NULL};
	assert_int_equal(parse(kv2, &e), 0);
	assert_int_equal(e.local_rank, 2);
	assert_int_equal(e.node, 1);
	assert_int_equal(e.nnodes, 2);
}

/* Each inconsistent environment fails with DDP_EENV and a message naming it. */
static void expect_eenv(const char *const *kv, const char *needle)
{
	struct ddp_env e;
	assert_int_equal(parse(kv, &e), DDP_EENV);
	if (!strstr(ddp_errmsg(), needle))
		fail_msg("message '%s' does not mention '%s'", ddp_errmsg(), needle);
}

static void test_inconsistent_values_are_clear_errors(void **state)
{
	expect_eenv(
		(const char *[]){"RANK=4", "WORLD_SIZE=4", "MASTER_ADDR=h", "MASTER_PORT=1", NULL},
		"RANK=4 is not below WORLD_SIZE=4");
	expect_eenv((const char *[]){"RANK=1", "WORLD_SIZE=2", "MASTER_PORT=1", NULL},
		    "MASTER_ADDR");
	expect_eenv((const char *[]){"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=h", NULL},
		    "MASTER_PORT");
	expect_eenv((const char *[]){"RANK=1", NULL}, "WORLD_SIZE");
	expect_eenv((const char *[]){"WORLD_SIZE=2", NULL}, "RANK");
	expect_eenv((const char *[]){"RANK=x", "WORLD_SIZE=2", NULL}, "RANK='x'");
	expect_eenv((const char *[]){"RANK=0", "WORLD_SIZE=0", NULL}, "WORLD_SIZE='0'");
	expect_eenv((const char *[]){"RANK=1", "WORLD_SIZE=4", "LOCAL_RANK=3", "LOCAL_WORLD_SIZE=2",
				     "MASTER_ADDR=h", "MASTER_PORT=1", NULL},
		    "LOCAL_RANK=3 is not below LOCAL_WORLD_SIZE=2");
	expect_eenv((const char *[]){"RANK=1", "WORLD_SIZE=5", "LOCAL_WORLD_SIZE=2",
				     "MASTER_ADDR=h", "MASTER_PORT=1", NULL},
		    "not a multiple");
	expect_eenv((const char *[]){"RANK=1", "WORLD_SIZE=4", "LOCAL_WORLD_SIZE=2", "GROUP_RANK=2",
				     "MASTER_ADDR=h", "MASTER_PORT=1", NULL},
		    "GROUP_RANK=2 is not below GROUP_WORLD_SIZE=2");
	expect_eenv((const char *[]){"RANK=1", "WORLD_SIZE=4", "LOCAL_WORLD_SIZE=2",
				     "GROUP_WORLD_SIZE=1", "MASTER_ADDR=h", "MASTER_PORT=1", NULL},
		    "GROUP_WORLD_SIZE=1");
	expect_eenv((const char *[]){"MASTER_PORT=70000", NULL}, "MASTER_PORT");
	expect_eenv((const char *[]){"DDP_BACKEND=gloo", NULL}, "DDP_BACKEND='gloo'");
	expect_eenv((const char *[]){"DDP_TIMEOUT=0", NULL}, "DDP_TIMEOUT");
	expect_eenv((const char *[]){"DDP_TIMEOUT=soon", NULL}, "DDP_TIMEOUT");
	{ /* Under a millisecond is one, not 0 (it was an error). */
		struct ddp_env e;

		assert_int_equal(parse((const char *[]){"DDP_TIMEOUT=0.0001", NULL}, &e), 0);
		assert_int_equal(e.timeout_ms, 1);
	}
	/* Past the upper limit: the message says where it is. (Under the
	 * millisecond the timeout counts in is one: util_parse_seconds_ms.) */
	expect_eenv((const char *[]){"DDP_TIMEOUT=1e10", NULL},
		    "DDP_TIMEOUT='1e10' is not a number of seconds above 0, at most 1000000000");
	expect_eenv((const char *[]){"DDP_PRINT_RANKS=1,,2", NULL}, "DDP_PRINT_RANKS");
	expect_eenv((const char *[]){"DDP_QUIET=yes", NULL}, "DDP_QUIET");
	expect_eenv((const char *[]){"DDP_ASYNC=2", NULL}, "DDP_ASYNC");
	expect_eenv((const char *[]){"DDP_SHM_CMA=yes", NULL},
		    "DDP_SHM_CMA='yes' is not 0, 1 or auto");
	expect_eenv((const char *[]){"DDP_STORE=no", NULL}, "DDP_STORE='no' is not 0 or 1");
	expect_eenv((const char *[]){"DDP_TCP_CONGESTION=Reno", NULL},
		    "DDP_TCP_CONGESTION='Reno' is not auto, system or an algorithm's name");
	expect_eenv((const char *[]){"DDP_TCP_CONGESTION=re no", NULL}, "DDP_TCP_CONGESTION");
	expect_eenv((const char *[]){"DDP_TCP_CONGESTION=a23456789_123456", NULL},
		    "up to 15 of a-z, 0-9, _ and -");
	/* the nonce ends a file name: nothing that could make it another's */
	expect_eenv((const char *[]){"DDP_SHM_NONCE=ab-c", NULL},
		    "DDP_SHM_NONCE='ab-c' is not 1 to 32 letters or digits");
	expect_eenv((const char *[]){"DDP_SHM_NONCE=../x", NULL}, "DDP_SHM_NONCE");
	expect_eenv((const char *[]){"DDP_SHM_NONCE=0123456789abcdef0123456789abcdef0", NULL},
		    "DDP_SHM_NONCE");
	expect_eenv((const char *[]){"RANK=1", "WORLD_SIZE=4", "LOCAL_WORLD_SIZE=2", "DDP_STORE=0",
				     NULL},
		    "DDP_STORE=0 but GROUP_WORLD_SIZE=2: nodes can only meet through the store");
}

/* The knobs shm.c and init.c act on are parsed with the others: a value
 * that is not one of theirs fails ddp_init instead of falling back unseen. */
static void test_shm_and_process_knobs(void **state)
{
	struct ddp_env e;
	struct ddp_ctx *ctx = NULL;

	assert_int_equal(parse((const char *[]){NULL}, &e), 0);
	assert_int_equal(e.pdeathsig, 1);
	assert_int_equal(e.shm_direct, 1);
	assert_int_equal(e.shm_slot_bytes, 1024 * 1024);
	assert_int_equal(parse((const char *[]){"DDP_PDEATHSIG=0", "DDP_SHM_DIRECT=0",
						"DDP_SHM_CHUNK_KB=4", NULL},
			       &e),
			 0);
	assert_int_equal(e.pdeathsig, 0);
	assert_int_equal(e.shm_direct, 0);
	assert_int_equal(e.shm_slot_bytes, 4096);
	assert_int_equal(parse((const char *[]){"DDP_PDEATHSIG=1", "DDP_SHM_DIRECT=1",
						"DDP_SHM_CHUNK_KB=1048576", NULL},
			       &e),
			 0);
	assert_int_equal(e.pdeathsig, 1);
	assert_int_equal(e.shm_direct, 1);
	assert_int_equal(e.shm_slot_bytes, (size_t)1 << 30);
	assert_int_equal(parse((const char *[]){"DDP_SHM_CHUNK_KB=", NULL}, &e), 0);
	assert_int_equal(e.shm_slot_bytes, 1024 * 1024); /* empty is unset */

	expect_eenv((const char *[]){"DDP_SHM_CHUNK_KB=0", NULL},
		    "DDP_SHM_CHUNK_KB='0' is not a number of KiB in [4, 1048576]");
	expect_eenv((const char *[]){"DDP_SHM_CHUNK_KB=-1", NULL}, "DDP_SHM_CHUNK_KB='-1'");
	expect_eenv((const char *[]){"DDP_SHM_CHUNK_KB=x", NULL}, "DDP_SHM_CHUNK_KB='x'");
	expect_eenv((const char *[]){"DDP_SHM_CHUNK_KB=3", NULL}, "DDP_SHM_CHUNK_KB='3'");
	expect_eenv((const char *[]){"DDP_SHM_CHUNK_KB=1048577", NULL},
		    "DDP_SHM_CHUNK_KB='1048577'");
	expect_eenv((const char *[]){"DDP_SHM_CHUNK_KB=64k", NULL}, "DDP_SHM_CHUNK_KB='64k'");
	expect_eenv((const char *[]){"DDP_PDEATHSIG=x", NULL}, "DDP_PDEATHSIG='x' is not 0 or 1");
	expect_eenv((const char *[]){"DDP_PDEATHSIG=2", NULL}, "DDP_PDEATHSIG='2'");
	expect_eenv((const char *[]){"DDP_SHM_DIRECT=off", NULL},
		    "DDP_SHM_DIRECT='off' is not 0 or 1");

	/* and ddp_init says so */
	unsetenv("RANK");
	unsetenv("WORLD_SIZE");
	setenv("DDP_SHM_CHUNK_KB", "0", 1);
	assert_int_equal(ddp_init(NULL, &ctx), DDP_EENV);
	assert_null(ctx);
	assert_non_null(strstr(ddp_errmsg(), "DDP_SHM_CHUNK_KB='0'"));
	unsetenv("DDP_SHM_CHUNK_KB");
	setenv("DDP_PDEATHSIG", "x", 1);
	assert_int_equal(ddp_init(NULL, &ctx), DDP_EENV);
	assert_non_null(strstr(ddp_errmsg(), "DDP_PDEATHSIG='x'"));
	unsetenv("DDP_PDEATHSIG");
}

static void test_print_rank_specs(void **state)
{
	int m = -1;
	assert_int_equal(ddpi_print_spec_match("all", 7, &m), 0);
	assert_int_equal(m, 1);
	assert_int_equal(ddpi_print_spec_match("none", 0, &m), 0);
	assert_int_equal(m, 0);
	assert_int_equal(ddpi_print_spec_match("0", 0, &m), 0);
	assert_int_equal(m, 1);
	assert_int_equal(ddpi_print_spec_match("0", 1, &m), 0);
	assert_int_equal(m, 0);
	assert_int_equal(ddpi_print_spec_match("1,3", 3, &m), 0);
	assert_int_equal(m, 1);
	assert_int_equal(ddpi_print_spec_match("0,2-5", 4, &m), 0);
	assert_int_equal(m, 1);
	assert_int_equal(ddpi_print_spec_match("0,2-5", 6, &m), 0);
	assert_int_equal(m, 0);
	const char *bad[] = {"", ",", "1,", "a", "1-", "3-1", "-1", "1 2", "all,0", NULL};
	for (int i = 0; bad[i]; i++)
		assert_int_equal(ddpi_print_spec_match(bad[i], 0, &m), -EINVAL);
}

static void test_error_texts(void **state)
{
	assert_string_equal(ddp_strerror(0), "success");
	assert_non_null(strstr(ddp_strerror(DDP_ENOTREADY), "never marked"));
	assert_non_null(strstr(ddp_strerror(-ETIMEDOUT), "timed out"));
	assert_string_equal(ddp_strerror(-99999), "unknown error");
	assert_int_equal(ddpi_err(-EINVAL, "x %d", 3), -EINVAL);
	assert_string_equal(ddp_errmsg(), "x 3");
	assert_int_equal(ddpi_err_prefix(-EINVAL, "what"), -EINVAL);
	assert_string_equal(ddp_errmsg(), "what: x 3");
}

static void test_error_file_is_torchelastic_format(void **state)
{
	char path[] = "/tmp/ddp-errfile-XXXXXX";
	int fd = mkstemp(path);
	char buf[8192];
	ssize_t n;

	assert_true(fd >= 0);
	setenv("TORCHELASTIC_ERROR_FILE", path, 1);
	assert_int_equal(ddp_record_error("all_reduce: rank 3 exited"), 0);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd); /* the old inode: the file was replaced by a rename */
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	unlink(path);
	unsetenv("TORCHELASTIC_ERROR_FILE");
	assert_true(n > 0);
	buf[n] = '\0';
	cJSON *root = cJSON_Parse(buf);
	assert_non_null(root);
	cJSON *m = cJSON_GetObjectItem(root, "message");
	assert_true(cJSON_IsObject(m));
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(m, "message")),
			    "all_reduce: rank 3 exited");
	cJSON *x = cJSON_GetObjectItem(m, "extraInfo");
	const char *tb = cJSON_GetStringValue(cJSON_GetObjectItem(x, "py_callstack"));
	assert_non_null(tb);
	assert_non_null(strstr(tb, "C backtrace (most recent call first):\n  #0 "));
	/* like a Python traceback, it ends with the error itself */
	const char *end = "\nall_reduce: rank 3 exited";
	assert_true(strlen(tb) > strlen(end));
	assert_string_equal(tb + strlen(tb) - strlen(end), end);
	const char *ts = cJSON_GetStringValue(cJSON_GetObjectItem(x, "timestamp"));
	assert_non_null(ts);
	assert_true(strtoll(ts, NULL, 10) > 1600000000);
	cJSON_Delete(root);
	/* No variable: nothing to do. */
	assert_int_equal(ddp_record_error("x"), 0);
}

static void test_one_context_per_process(void **state)
{
	struct ddp_ctx *a = NULL, *b = NULL;

	unsetenv("RANK");
	unsetenv("WORLD_SIZE");
	setenv("DDP_QUIET", "1", 1);
	assert_int_equal(ddp_init(NULL, &a), 0);
	assert_int_equal(ddp_world_size(a), 1);
	assert_int_equal(ddp_init(NULL, &b), -EBUSY);
	assert_null(b);
	assert_int_equal(ddp_finalize(a), 0);
	assert_int_equal(ddp_init(NULL, &b), 0);
	assert_int_equal(ddp_finalize(b), 0);
	/* a bad environment leaves no context behind either */
	setenv("DDP_BACKEND", "bogus", 1);
	assert_int_equal(ddp_init(NULL, &a), DDP_EENV);
	unsetenv("DDP_BACKEND");
	assert_int_equal(ddp_init(NULL, &a), 0);
	assert_int_equal(ddp_finalize(a), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_nothing_set_is_a_world_of_one),
		cmocka_unit_test(test_torchrun_environment),
		cmocka_unit_test(test_missing_local_values_are_derived),
		cmocka_unit_test(test_store_use),
		cmocka_unit_test(test_tcp_congestion),
		cmocka_unit_test(test_socket_ifname),
		cmocka_unit_test(test_shm_nonce_from_the_launcher),
		cmocka_unit_test(test_inconsistent_values_are_clear_errors),
		cmocka_unit_test(test_shm_and_process_knobs),
		cmocka_unit_test(test_print_rank_specs),
		cmocka_unit_test(test_error_texts),
		cmocka_unit_test(test_error_file_is_torchelastic_format),
		cmocka_unit_test(test_one_context_per_process),
	};
	return cmocka_run_group_tests_name("ddp_env", tests, NULL, NULL);
}
