/* Unit tests for launcher/report.c: torchelastic error files in both formats
 * and libddp's secondary-failure marker, the root-cause rule (primary before
 * secondary, earliest observed, lowest rank), exit statuses, and torchrun's
 * summary layout. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "report.h"

#define EXITED(c) ((c) << 8)
#define KILLED(s) (s)

static int utc(void **state)
{
	setenv("TZ", "UTC", 1);
	tzset();
	return 0;
}

static char *write_tmp(const char *text)
{
	static char path[64];
	FILE *f;

	snprintf(path, sizeof(path), "/tmp/test_launch_report_XXXXXX");
	close(mkstemp(path));
	f = fopen(path, "w");
	fputs(text, f);
	fclose(f);
	return path;
}

static void test_parse_record_format(void **state)
{
	const char *j = "{\"message\": {\"message\": \"ValueError: boom\", \"extraInfo\": "
			"{\"py_callstack\": \"Traceback:\\n  x\\nValueError: boom\\n\", "
			"\"timestamp\": \"1693822223\"}}}";
	char *msg = NULL, *cause = (char *)"stale";

	assert_int_equal(report_parse_error_json(j, strlen(j), &msg, &cause, NULL), 0);
	assert_string_equal(msg, "Traceback:\n  x\nValueError: boom");
	assert_null(cause); /* no marker: a primary failure */
	free(msg);
}

static void test_parse_other_formats(void **state)
{
	const char *plain = "{\"message\": \"plain text\", \"timestamp\": 17}";
	const char *nostack = "{\"message\": {\"message\": \"only msg\", \"extraInfo\": "
			      "{\"timestamp\": 5}}}";
	const char *nothing = "{\"message\": {}}";
	char *msg = NULL, *cause = NULL;

	assert_int_equal(report_parse_error_json(plain, strlen(plain), &msg, &cause, NULL), 0);
	assert_string_equal(msg, "plain text");
	assert_null(cause);
	free(msg);
	assert_int_equal(report_parse_error_json(nostack, strlen(nostack), &msg, &cause, NULL), 0);
	assert_string_equal(msg, "only msg");
	free(msg);
	assert_int_equal(report_parse_error_json(nothing, strlen(nothing), &msg, &cause, NULL), 0);
	assert_string_equal(msg, "<N/A>");
	free(msg);
	assert_int_equal(report_parse_error_json("[1]", 3, &msg, &cause, NULL), -EINVAL);
	assert_int_equal(report_parse_error_json("{\"message\": 3}", 14, &msg, &cause, NULL),
			 -EINVAL);
	assert_int_equal(report_parse_error_json("{\"mess", 6, &msg, &cause, NULL), -EINVAL);
	assert_null(cause);
}

/* libddp marks a failure another rank's caused: message.extraInfo.ddp_caused_by. */
static void test_parse_secondary_marker(void **state)
{
	const char *marked =
		"{\"message\": {\"message\": \"all_reduce: rank 2 (pid 77) exited\", "
		"\"extraInfo\": {\"py_callstack\": \"C backtrace\\nall_reduce: ...\", "
		"\"timestamp\": \"5\", \"ddp_caused_by\": \"rank 2 (pid 77) exited\"}}}";
	const char *empty = "{\"message\": {\"message\": \"m\", \"extraInfo\": "
			    "{\"ddp_caused_by\": \"\"}}}";
	const char *number = "{\"message\": {\"message\": \"m\", \"extraInfo\": "
			     "{\"ddp_caused_by\": 2}}}";
	const char *lines = "{\"message\": {\"message\": \"m\", \"extraInfo\": "
			    "{\"ddp_caused_by\": \"rank 1\\nexited\\t!\"}}}";
	const char *flat = "{\"message\": \"m\", \"ddp_caused_by\": \"rank 1 exited\"}";
	char *msg = NULL, *cause = NULL, big[600];

	assert_int_equal(report_parse_error_json(marked, strlen(marked), &msg, &cause, NULL), 0);
	assert_string_equal(msg, "C backtrace\nall_reduce: ...");
	assert_string_equal(cause, "rank 2 (pid 77) exited");
	free(msg);
	free(cause);
	/* An empty or non-string marker marks nothing. */
	assert_int_equal(report_parse_error_json(empty, strlen(empty), &msg, &cause, NULL), 0);
	assert_null(cause);
	free(msg);
	assert_int_equal(report_parse_error_json(number, strlen(number), &msg, &cause, NULL), 0);
	assert_null(cause);
	free(msg);
	/* Only in extraInfo, where libddp writes it. */
	assert_int_equal(report_parse_error_json(flat, strlen(flat), &msg, &cause, NULL), 0);
	assert_null(cause);
	free(msg);
	/* One line in the report, whatever the file says. */
	assert_int_equal(report_parse_error_json(lines, strlen(lines), &msg, &cause, NULL), 0);
	assert_string_equal(cause, "rank 1 exited !");
	free(msg);
	free(cause);
	/* Cut to REPORT_CAUSE_MAX. */
	snprintf(big, sizeof(big),
		 "{\"message\": {\"extraInfo\": {\"ddp_caused_by\": \"%0500d\"}}}", 0);
	assert_int_equal(report_parse_error_json(big, strlen(big), &msg, &cause, NULL), 0);
	assert_int_equal(strlen(cause), REPORT_CAUSE_MAX);
	free(msg);
	free(cause);
	/* Not JSON: nothing is returned. */
	cause = NULL;
	assert_int_equal(report_parse_error_json("{", 1, &msg, &cause, NULL), -EINVAL);
	assert_null(cause);
}

static void test_entry_without_error_file(void **state)
{
	struct report_entry e;

	assert_int_equal(
		report_entry_init(&e, 5, 1, 4242, EXITED(7), "/nonexistent/e.json", 0, 100), 0);
	assert_int_equal(e.exitcode, 7);
	assert_null(e.error_file);
	assert_null(e.caused_by);
	assert_int_equal(e.time_us, 100);
	assert_string_equal(
		e.message,
		"To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html");
	assert_int_equal(report_exit_status(&e), 7);
	report_entry_free(&e);

	assert_int_equal(report_entry_init(&e, 0, 0, 77, KILLED(SIGSEGV), NULL, 0, 100), 0);
	assert_int_equal(e.exitcode, -11);
	assert_string_equal(e.message, "Signal 11 (SIGSEGV) received by PID 77");
	assert_int_equal(report_exit_status(&e), 139);
	report_entry_free(&e);
	/* Real-time signals as Python's signal.Signals names them: the ends
	 * only, the others torchrun's "<N/A>" (they read SIG34, SIG37). */
	assert_int_equal(report_entry_init(&e, 0, 0, 77, KILLED(SIGRTMIN), NULL, 0, 100), 0);
	assert_string_equal(e.message, "Signal 34 (SIGRTMIN) received by PID 77");
	report_entry_free(&e);
	assert_int_equal(report_entry_init(&e, 0, 0, 77, KILLED(SIGRTMIN + 3), NULL, 0, 100), 0);
	assert_string_equal(e.message, "Signal 37 (<N/A>) received by PID 77");
	report_entry_free(&e);
	assert_int_equal(report_entry_init(&e, 0, 0, 77, KILLED(SIGRTMAX), NULL, 0, 100), 0);
	assert_string_equal(e.message, "Signal 64 (SIGRTMAX) received by PID 77");
	report_entry_free(&e);
}

/* A failure dates from the worker's error file when the file was written
 * between the worker's start and the failure's observation (an agent slow to
 * reap must not put a consequence elsewhere first), else from the
 * observation: no file, a stale file from before the start, a file written
 * after (clock steps). */
static void test_failure_time_is_the_error_files_when_in_between(void **state)
{
	char *path = write_tmp("{\"message\": \"x\"}");
	struct timespec at[2] = {{.tv_sec = 1000, .tv_nsec = 250000000}};
	const int64_t wrote = 1000250000;

	at[1] = at[0];
	assert_int_equal(utimensat(AT_FDCWD, path, at, 0), 0);
	assert_int_equal(report_failure_time_us(path, 999000000, 1002000000), wrote);
	assert_int_equal(report_failure_time_us(path, wrote, 1002000000), wrote);
	assert_int_equal(report_failure_time_us(path, 1001000000, 1002000000), 1002000000);
	assert_int_equal(report_failure_time_us(path, 999000000, 1000000000), 1000000000);
	assert_int_equal(report_failure_time_us(NULL, 999000000, 1002000000), 1002000000);
	unlink(path);
	assert_int_equal(report_failure_time_us(path, 999000000, 1002000000), 1002000000);
}

/* An error file written as soon as its worker started dates the failure: the
 * kernel dates a new file by its coarse clock, up to a tick (4 ms at HZ=250)
 * behind CLOCK_REALTIME, and a start read from that one made such a file
 * look stale (a late reaping then took the blame). Each file is created as
 * a worker's error file is, by the shell's > or PyTorch's open(..., "w"). */
/* A file system whose file times another machine (or a user-space server)
 * sets: NFS, 9p, SMB/CIFS, FUSE. */
static bool remote_fs(const char *path)
{
	struct statfs fs;

	if (statfs(path, &fs) != 0)
		return false;
	switch ((unsigned long)fs.f_type) {
	case 0x6969UL:	   /* NFS */
	case 0x01021997UL: /* 9p */
	case 0x517BUL:	   /* SMB */
	case 0xFF534D42UL: /* CIFS */
	case 0xFE534D42UL: /* SMB2 */
	case 0x65735546UL: /* FUSE */
		return true;
	default:
		return false;
	}
}

static void test_a_file_written_right_after_the_start_is_not_stale(void **state)
{
	char dir[] = "/tmp/test_launch_report_XXXXXX", path[64];
	int i;

	assert_non_null(mkdtemp(dir));
	if (remote_fs(dir)) { /* its file times are another machine's clock */
		rmdir(dir);
		skip();
	}
	for (i = 0; i < 20; i++) {
		int64_t started = report_start_us(), wrote;
		struct stat st;
		int fd;

		snprintf(path, sizeof(path), "%s/%d.json", dir, i);
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		assert_true(fd >= 0);
		assert_int_equal(write(fd, "{}", 2), 2);
		close(fd);
		assert_int_equal(stat(path, &st), 0);
		wrote = (int64_t)st.st_mtim.tv_sec * 1000000 + st.st_mtim.tv_nsec / 1000;
		assert_int_equal(report_failure_time_us(path, started, started + 10000000), wrote);
		unlink(path);
	}
	rmdir(dir);
}

static void test_entry_with_error_file(void **state)
{
	char *path = write_tmp("{\"message\": \"disk full\", \"timestamp\": 1000}");
	struct report_entry e;

	/* A timestamp from before the worker started (a stale file): the time
	 * is when the agent saw the failure. */
	assert_int_equal(report_entry_init(&e, 3, 3, 9, EXITED(1), path, 1500000000, 2000123456),
			 0);
	assert_string_equal(e.error_file, path);
	assert_string_equal(e.message, "disk full");
	assert_int_equal(e.time_us, 2000123456);
	assert_null(e.caused_by);
	report_entry_free(&e);
	unlink(path);

	path = write_tmp("{\"message\": {\"message\": \"barrier: rank 0 (pid 5) exited\", "
			 "\"extraInfo\": {\"ddp_caused_by\": \"rank 0 (pid 5) exited\"}}}");
	assert_int_equal(report_entry_init(&e, 3, 3, 9, EXITED(3), path, 0, 2000), 0);
	assert_string_equal(e.caused_by, "rank 0 (pid 5) exited");
	assert_string_equal(e.message, "barrier: rank 0 (pid 5) exited");
	report_entry_free(&e);
	unlink(path);

	path = write_tmp("not json");
	assert_int_equal(report_entry_init(&e, 3, 3, 9, EXITED(1), path, 0, 2000), 0);
	assert_string_equal(e.message, "<error file is not torchelastic JSON>");
	assert_int_equal(e.time_us, 2000);
	report_entry_free(&e);
	unlink(path);
}

/* torchrun's int() of the error file's timestamp: message.extraInfo's, or
 * the top level's beside a string message; none where torchrun's report
 * would raise (no such field, null, text int() does not read, an overflow)
 * or take 0 for a missing one. */
static void test_parse_timestamp_as_torchruns_int(void **state)
{
	static const struct {
		const char *ts; /* the JSON value of extraInfo.timestamp */
		int64_t want;
	} cases[] = {
		{"\"1714558272\"", 1714558272},
		{"1714558272", 1714558272},
		{"\" +1_714_558_272\\n\"", 1714558272},
		{"\"-0012\"", -12},
		{"1714558272.9", 1714558272},
		{"-1.9", -1},
		{"1.7e9", 1700000000},
		{"true", 1},
		{"\"1714558272.0\"", REPORT_NO_TIMESTAMP},
		{"\"1__7\"", REPORT_NO_TIMESTAMP},
		{"\"_17\"", REPORT_NO_TIMESTAMP},
		{"\"17_\"", REPORT_NO_TIMESTAMP},
		{"\"0x10\"", REPORT_NO_TIMESTAMP},
		{"\"- 5\"", REPORT_NO_TIMESTAMP},
		{"\"\"", REPORT_NO_TIMESTAMP},
		{"\"yesterday\"", REPORT_NO_TIMESTAMP},
		{"\"99999999999999999999\"", REPORT_NO_TIMESTAMP},
		{"1e400", REPORT_NO_TIMESTAMP},
		{"null", REPORT_NO_TIMESTAMP},
		{"[1]", REPORT_NO_TIMESTAMP},
	};
	char json[256], *msg, *cause;
	int64_t ts;
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(json, sizeof(json),
			 "{\"message\": {\"message\": \"x\", \"extraInfo\": {\"timestamp\": %s}}}",
			 cases[i].ts);
		assert_int_equal(report_parse_error_json(json, strlen(json), &msg, &cause, &ts), 0);
		if (ts != cases[i].want)
			fail_msg("timestamp %s: %lld, not %lld", cases[i].ts, (long long)ts,
				 (long long)cases[i].want);
		free(msg);
	}
	snprintf(json, sizeof(json), "{\"message\": {\"message\": \"x\"}}");
	assert_int_equal(report_parse_error_json(json, strlen(json), &msg, &cause, &ts), 0);
	assert_true(ts == REPORT_NO_TIMESTAMP);
	free(msg);
	snprintf(json, sizeof(json), "{\"message\": \"x\", \"timestamp\": \"1714558272\"}");
	assert_int_equal(report_parse_error_json(json, strlen(json), &msg, &cause, &ts), 0);
	assert_int_equal(ts, 1714558272);
	free(msg);
	snprintf(json, sizeof(json), "{\"message\": \"x\"}");
	assert_int_equal(report_parse_error_json(json, strlen(json), &msg, &cause, &ts), 0);
	assert_true(ts == REPORT_NO_TIMESTAMP);
	free(msg);
}

/* A failure is dated as torchrun dates it, by the timestamp in its error
 * file, when that second lies in the worker's life (its start to when it
 * was seen failing); within that second the finer time stays. Any other
 * (none, garbage, negative, 1970, later than the failure): the time seen. */
static void test_entry_time_is_the_error_files_timestamp(void **state)
{
	static const struct {
		const char *extra;
		int64_t want;
	} cases[] = {
		{"\"timestamp\": \"1500\"", 1500000000},
		{"\"timestamp\": 1000", 1000000000},
		{"\"timestamp\": \"2000\"", 2000123456},
		{"\"timestamp\": \"999\"", 2000123456},
		{"\"timestamp\": \"2001\"", 2000123456},
		{"\"timestamp\": \"-5\"", 2000123456},
		{"\"timestamp\": \"1\"", 2000123456},
		{"\"timestamp\": \"15:00\"", 2000123456},
		{"\"timestamp\": null", 2000123456},
		{"\"py_callstack\": \"no time\"", 2000123456},
	};
	char json[256], *path;
	struct report_entry e;
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(json, sizeof(json),
			 "{\"message\": {\"message\": \"x\", \"extraInfo\": {%s}}}",
			 cases[i].extra);
		path = write_tmp(json);
		assert_int_equal(
			report_entry_init(&e, 0, 0, 9, EXITED(1), path, 1000500000, 2000123456), 0);
		if (e.time_us != cases[i].want)
			fail_msg("%s: %lld, not %lld", cases[i].extra, (long long)e.time_us,
				 (long long)cases[i].want);
		report_entry_free(&e);
		unlink(path);
	}
	/* The string form's timestamp counts too; its absence is no 1970. */
	path = write_tmp("{\"message\": \"x\", \"timestamp\": 1800}");
	assert_int_equal(report_entry_init(&e, 0, 0, 9, EXITED(1), path, 1000500000, 2000123456),
			 0);
	assert_int_equal(e.time_us, 1800000000);
	report_entry_free(&e);
	unlink(path);
	path = write_tmp("{\"message\": \"x\"}");
	assert_int_equal(report_entry_init(&e, 0, 0, 9, EXITED(1), path, 1000500000, 2000123456),
			 0);
	assert_int_equal(e.time_us, 2000123456);
	report_entry_free(&e);
	unlink(path);
}

#define SECONDARY (char *)"rank 9 (pid 1) exited"

static void test_root_cause_is_the_earliest_observed(void **state)
{
	struct report_entry e[4] = {{.global_rank = 0, .time_us = 30},
				    {.global_rank = 1, .time_us = 10},
				    {.global_rank = 2, .time_us = 20},
				    {.global_rank = 3, .time_us = 11}};

	assert_int_equal(report_root_cause(e, 4), 1);
	assert_int_equal(report_root_cause(e, 1), 0);
	assert_int_equal(report_root_cause(e, 0), 0);
	/* Microseconds tell failures of one second apart. */
	e[3].time_us = 9;
	assert_int_equal(report_root_cause(e, 4), 3);
}

static void test_root_cause_ties_go_to_the_lower_global_rank(void **state)
{
	struct report_entry e[3] = {{.global_rank = 5, .time_us = 10},
				    {.global_rank = 2, .time_us = 10},
				    {.global_rank = 7, .time_us = 10}};

	assert_int_equal(report_root_cause(e, 3), 1);
	assert_true(report_cause_before(&e[1], &e[0]));
	assert_false(report_cause_before(&e[0], &e[1]));
	assert_false(report_cause_before(&e[0], &e[0]));
}

/* A failure whose error file came after the stop (its SIGTERM handler
 * failed, say) comes after every other, even a secondary one from before:
 * the stop may be what it failed of. The report says so on it. */
static void test_root_cause_a_failure_after_the_stop_comes_last(void **state)
{
	struct report_entry e[3] = {
		{.global_rank = 0, .time_us = 30, .caused_by = SECONDARY, .message = "a"},
		{.global_rank = 1, .time_us = 10, .stopped = true, .late = true, .message = "b"},
		{.global_rank = 2, .time_us = 20, .stopped = true, .message = "c"}};
	char *text;

	assert_int_equal(report_root_cause(e, 3), 2);
	assert_int_equal(report_root_cause(e, 2), 0);
	assert_false(report_cause_before(&e[1], &e[0]));
	assert_true(report_cause_before(&e[0], &e[1]));
	e[2].late = true;
	assert_int_equal(report_root_cause(e, 3), 0);
	e[0].late = true; /* among the late alone, the usual order */
	assert_int_equal(report_root_cause(e, 3), 1);
	text = report_format("t", "h", e, 3);
	assert_non_null(strstr(text,
			       "  rank      : 1 (local_rank: 0)\n"
			       "  exitcode  : 0 (pid: 0)\n"
			       "  error_file: <N/A>\n"
			       "  note      : failed after the stop began (its error file came "
			       "then)\n"));
	free(text);
}

static void test_root_cause_an_exit_before_the_stop_before_one_still_running(void **state)
{
	/* Ranks 0 and 1 had written their error files (first) but were still
	 * running when rank 2's exit stopped them: rank 2 is the root cause,
	 * unless it was itself caused by another's failure. */
	struct report_entry e[3] = {{.global_rank = 0, .time_us = 10, .stopped = true},
				    {.global_rank = 1, .time_us = 11, .stopped = true},
				    {.global_rank = 2, .time_us = 50}};

	assert_int_equal(report_root_cause(e, 3), 2);
	assert_true(report_cause_before(&e[2], &e[0]));
	assert_false(report_cause_before(&e[0], &e[2]));
	/* Among the stopped alone: the earliest. */
	assert_int_equal(report_root_cause(e, 2), 0);
	e[2].caused_by = SECONDARY;
	assert_int_equal(report_root_cause(e, 3), 0);
}

static void test_root_cause_primary_before_secondary(void **state)
{
	/* Ranks 0, 1 and 3 failed because rank 2 exited, and were seen first. */
	struct report_entry e[4] = {{.global_rank = 0, .time_us = 10, .caused_by = SECONDARY},
				    {.global_rank = 1, .time_us = 11, .caused_by = SECONDARY},
				    {.global_rank = 2, .time_us = 50},
				    {.global_rank = 3, .time_us = 12, .caused_by = SECONDARY}};

	assert_int_equal(report_root_cause(e, 4), 2);
	assert_true(report_cause_before(&e[2], &e[0]));
	assert_false(report_cause_before(&e[0], &e[2]));
	/* Among primaries: the earliest; among secondaries alone: the earliest too. */
	e[1].caused_by = NULL;
	assert_int_equal(report_root_cause(e, 4), 1);
	e[1].caused_by = SECONDARY;
	e[2].caused_by = SECONDARY;
	assert_int_equal(report_root_cause(e, 4), 0);
}

static void test_format_matches_torchrun(void **state)
{
	struct report_entry e[2] = {
		{.global_rank = 4,
		 .local_rank = 0,
		 .pid = 100,
		 .exitcode = 1,
		 .time_us = 1693822223000042,
		 .error_file = "/tmp/logs/a-long-run-id_abcdef/attempt_0/0/error.json",
		 .message = "Traceback (most recent call last):\n  File \"t.py\", line 1\nE: x"},
		{.global_rank = 5,
		 .local_rank = 1,
		 .pid = 101,
		 .exitcode = 3,
		 .time_us = 1693822223500000,
		 .caused_by = "rank 4 (pid 100) exited",
		 .message = "all_reduce: rank 4 (pid 100) exited"},
	};
	char *text = report_format("train.py", "node7", e, 2);
	const char *want = "============================================================\n"
			   "train.py FAILED\n"
			   "------------------------------------------------------------\n"
			   "Failures:\n"
			   "[1]:\n"
			   "  time      : 2023-09-04_10:10:23\n"
			   "  host      : node7\n"
			   "  rank      : 5 (local_rank: 1)\n"
			   "  exitcode  : 3 (pid: 101)\n"
			   "  error_file: <N/A>\n"
			   "  caused_by : rank 4 (pid 100) exited\n"
			   "  traceback : all_reduce: rank 4 (pid 100) exited\n"
			   "------------------------------------------------------------\n"
			   "Root Cause (first observed failure):\n"
			   "[0]:\n"
			   "  time      : 2023-09-04_10:10:23\n"
			   "  host      : node7\n"
			   "  rank      : 4 (local_rank: 0)\n"
			   "  exitcode  : 1 (pid: 100)\n"
			   "  error_file: /tmp/logs/a-long-run-id_abcdef/attempt_0/0/error.json\n"
			   "  traceback : Traceback (most recent call last):\n"
			   "    File \"t.py\", line 1\n"
			   "  E: x\n"
			   "============================================================\n";

	assert_non_null(text);
	assert_string_equal(text, want);
	free(text);
}

/* Every failure waited for rank 2 (libddp's timeout names it in its cause)
 * and rank 2 has none of its own: the root cause says, right after its
 * caused_by, that rank 2 was still running. Not where rank 2 failed too
 * (on this node or, given as the root, on another), nor for another cause
 * or a text that only looks like it (the worker wrote it). */
static void test_a_rank_waited_for_in_vain_is_named(void **state)
{
	static const char *const not_it[] = {
		"rank 2 (pid 12) exited",
		"rank 2 (pid 12) did not arrive within the timeout, or so",
		"rank  2 (pid 12) did not arrive within the timeout",
		"rank\n2 (pid 12) did not arrive within the timeout",
		"rank +2 (pid 12) did not arrive within the timeout",
		"rank 02 (pid 12) did not arrive within the timeout",
		"rank 4294967298 (pid 12) did not arrive within the timeout",
		"rank -2 (pid 12) did not arrive within the timeout",
	};
	struct report_entry e[2] = {
		{.global_rank = 0,
		 .pid = 10,
		 .exitcode = 3,
		 .time_us = 5,
		 .caused_by = "rank 2 (pid 12) did not arrive within the timeout",
		 .message = "all_reduce: timed out waiting for rank 2 (pid 12)"},
		{.global_rank = 1,
		 .pid = 11,
		 .exitcode = 3,
		 .time_us = 6,
		 .caused_by = "rank 0 (pid 10) failed",
		 .message = "all_reduce: rank 0 failed"},
	};
	char other[] = "node9";
	const char *note = "  caused_by : rank 2 (pid 12) did not arrive within the timeout\n"
			   "  note      : rank 2 (pid 12) has no failure of its own on record: it\n"
			   "              was still running when the others gave up waiting for\n"
			   "              it (ddprun --hang-timeout shows where such a rank is)\n"
			   "  traceback : all_reduce: timed out waiting for rank 2 (pid 12)\n"
			   "======";
	char *text = report_format("a", "h", e, 2);

	assert_non_null(text);
	assert_non_null(strstr(text, note));
	assert_true(strstr(text, note) > strstr(text, "Root Cause")); /* under it */
	free(text);
	/* Rank 2 failed too, but only after the stop: not a failure of its own. */
	e[1].global_rank = 2;
	e[1].late = true;
	text = report_format("a", "h", e, 2);
	assert_non_null(strstr(text, "has no failure of its own on record"));
	free(text);
	e[1].late = false;
	/* Rank 2 failed too, here or on another node: it is on record. */
	text = report_format("a", "h", e, 2);
	assert_null(strstr(text, "note"));
	free(text);
	e[1].host = other;
	text = report_format_root("a", "h", e, 2, 0, NULL);
	assert_null(strstr(text, "note"));
	free(text);
	e[1].global_rank = 1;
	e[1].host = NULL;
	for (size_t k = 0; k < sizeof(not_it) / sizeof(not_it[0]); k++) {
		e[0].caused_by = (char *)not_it[k];
		text = report_format("a", "h", e, 2);
		assert_non_null(text);
		assert_null(strstr(text, "note"));
		free(text);
	}
}

/* Every failure on record is a hang's SIGABRT (they come at once): the
 * root cause says it is first only by the clock, so that a rank the hang
 * stopped is not taken for the hang's cause. Not for another cause. */
static void test_a_root_cause_stopped_for_the_hang_says_so(void **state)
{
	struct report_entry e[2] = {
		{.global_rank = 0,
		 .pid = 10,
		 .exitcode = -6,
		 .time_us = 5,
		 .caused_by = "the hang (--hang-timeout)",
		 .message = "Hang: ddprun sent SIGABRT"},
		{.global_rank = 1,
		 .pid = 11,
		 .exitcode = -6,
		 .time_us = 5,
		 .caused_by = "the hang (--hang-timeout)",
		 .message = "Hang: ddprun sent SIGABRT"},
	};
	const char *note =
		"  caused_by : the hang (--hang-timeout)\n"
		"  note      : ddprun stopped this rank for the hang: it is first only by\n"
		"              the clock (the hang's verdict says which rank, if any,\n"
		"              the others waited for)\n";
	char *text = report_format("a", "h", e, 2);

	assert_non_null(text);
	assert_non_null(strstr(text, note));
	assert_true(strstr(text, note) > strstr(text, "Root Cause")); /* under it */
	assert_null(strstr(strstr(text, "note") + 1, "note"));	      /* once */
	free(text);
	/* The job's verdict named rank 1 (on another node, say) as the one
	 * the others waited for: its stop for the hang becomes a failure of
	 * its own, the root cause, without the note; another cause stays. */
	e[1].caused_by = strdup(REPORT_CAUSE_HANG);
	assert_int_equal(report_make_primary(e, 2, 1, REPORT_CAUSE_HANG), 1);
	assert_null(e[1].caused_by);
	assert_int_equal(report_make_primary(e, 2, 0, "rank 9 failed"), 0);
	assert_string_equal(e[0].caused_by, REPORT_CAUSE_HANG);
	text = report_format("a", "h", e, 2);
	assert_non_null(text);
	assert_null(strstr(text, "note"));
	assert_true(strstr(text, "rank      : 1 (") > strstr(text, "Root Cause"));
	free(text);
	e[1].caused_by = REPORT_CAUSE_HANG;
	/* Another cause: no note. */
	e[0].caused_by = e[1].caused_by = "rank 3 (pid 13) failed";
	text = report_format("a", "h", e, 2);
	assert_non_null(text);
	assert_null(strstr(text, "note"));
	free(text);
	/* One failed of its own (the rank the others waited for): it is the
	 * root cause, and no note. */
	e[0].caused_by = REPORT_CAUSE_HANG;
	e[1].caused_by = NULL;
	text = report_format("a", "h", e, 2);
	assert_non_null(text);
	assert_null(strstr(text, "note"));
	assert_true(strstr(text, "rank      : 1 (") > strstr(text, "Root Cause"));
	free(text);
}

static void test_format_narrow_and_alone(void **state)
{
	struct report_entry e = {.pid = 1, .exitcode = 2, .time_us = 0, .message = "short"};
	char *text = report_format("a", "h", &e, 1);

	/* Width is the widest line when under 60:
	 * "  time      : 1970-01-01_00:00:00". */
	assert_non_null(strstr(text, "\n  <NO_OTHER_FAILURES>\n"));
	assert_memory_equal(text, "=================================\na FAILED\n---", 46);
	free(text);
	/* Just before 1970 is the second before, not the one after. */
	e.time_us = -1;
	text = report_format("a", "h", &e, 1);
	assert_non_null(strstr(text, "  time      : 1969-12-31_23:59:59\n"));
	free(text);
}

static void test_entries_from_other_nodes_show_their_host_and_given_root(void **state)
{
	struct report_entry e[2] = {
		{.global_rank = 0, .pid = 7, .exitcode = -15, .time_us = 5, .message = "stopped"},
		{.global_rank = 3,
		 .pid = 9,
		 .exitcode = 4,
		 .time_us = 9,
		 .message = "boom",
		 .host = "node-b"},
	};
	/* The store says rank 3 failed first, whatever the clocks say. */
	char *text = report_format_root("t", "node-a", e, 2, 1, NULL);
	const char *root = strstr(text, "Root Cause");

	assert_non_null(root);
	assert_non_null(strstr(root, "  host      : node-b\n  rank      : 3 (local_rank: 0)"));
	assert_non_null(strstr(text, "  host      : node-a\n  rank      : 0 (local_rank: 0)"));
	/* torchrun 2.x names the signal; an exit status has no suffix. */
	assert_non_null(strstr(text, "  exitcode  : -15 (pid: 7)  (SIGTERM)\n"));
	assert_non_null(strstr(text, "  exitcode  : 4 (pid: 9)\n"));
	assert_true(strstr(text, "node-a") < root);
	free(text);
	e[0].exitcode = -40; /* a real-time signal: no name, as in Python */
	text = report_format_root("t", "node-a", e, 2, 1, NULL);
	assert_non_null(strstr(text, "  exitcode  : -40 (pid: 7)\n"));
	free(text);
}

/* A node that is not node 0 prints its own failures, as torchrun's agents
 * do: when the job's root cause ran elsewhere, its first is noted as only
 * its own (with the late rank's note, if that applies too, after it). */
static void test_a_nodes_own_first_failure_names_the_jobs_root_cause(void **state)
{
	struct report_entry e = {.global_rank = 3,
				 .pid = 9,
				 .exitcode = 1,
				 .time_us = 9,
				 .caused_by = "rank 2 (pid 12) did not arrive within the timeout",
				 .message = "boom"};
	const char *where = "rank 0 (local rank 0) on node 0 (host a)";
	char *text = report_format_root("t", "b", &e, 1, 0, where);

	assert_non_null(text);
	assert_non_null(strstr(text, "Root Cause (first observed failure):\n[0]:\n"));
	assert_non_null(strstr(
		text, "  caused_by : rank 2 (pid 12) did not arrive within the timeout\n"
		      "  note      : this node's first failure only: the job's root cause\n"
		      "              is rank 0 (local rank 0) on node 0 (host a)\n"
		      "              rank 2 (pid 12) has no failure of its own on record: it\n"));
	free(text);
	e.caused_by = NULL;
	text = report_format_root("t", "b", &e, 1, 0, where);
	assert_non_null(
		strstr(text, "  error_file: <N/A>\n"
			     "  note      : this node's first failure only: the job's root cause\n"
			     "              is rank 0 (local rank 0) on node 0 (host a)\n"
			     "  traceback : boom"));
	free(text);
	text = report_format_root("t", "b", &e, 1, 0, NULL);
	assert_null(strstr(text, "note"));
	free(text);
}

static void test_parent_error_file_gets_error_code(void **state)
{
	char *child = strdup(write_tmp("{\"message\": {\"message\": \"E: x\", \"extraInfo\": "
				       "{\"py_callstack\": \"tb\", \"timestamp\": \"5\"}}}"));
	char parent[] = "/tmp/test_launch_report_parent_XXXXXX";
	struct report_entry e;
	char buf[512] = "";
	FILE *f;

	close(mkstemp(parent));
	assert_int_equal(report_entry_init(&e, 0, 0, 1, EXITED(3), child, 0, 0), 0);
	assert_int_equal(report_write_parent_error(parent, &e), 0);
	f = fopen(parent, "r");
	assert_non_null(fgets(buf, sizeof(buf), f));
	fclose(f);
	assert_non_null(strstr(buf, "\"errorCode\":3"));
	assert_non_null(strstr(buf, "\"py_callstack\":\"tb\""));
	report_entry_free(&e);
	unlink(child);
	unlink(parent);
	free(child);
}

/* A hang's culprit, made primary after its file said "caused by the hang"
 * (report_make_primary): the outer launcher's copy says no cause either, or
 * it would take the job's root cause for a consequence. A failure still
 * secondary keeps its marker. */
static void test_parent_error_file_of_a_failure_made_primary_has_no_cause(void **state)
{
	char *child = strdup(write_tmp("{\"message\": {\"message\": \"Hang: x\", \"extraInfo\": "
				       "{\"py_callstack\": \"tb\", \"ddp_caused_by\": "
				       "\"" REPORT_CAUSE_HANG "\", \"ddp_caused_by\": \"x\", "
				       "\"DDP_CAUSED_BY\": \"y\"}}}"));
	char parent[] = "/tmp/test_launch_report_parent_XXXXXX";
	struct report_entry e;
	char buf[512];
	FILE *f;

	close(mkstemp(parent));
	assert_int_equal(report_entry_init(&e, 0, 0, 1, EXITED(3), child, 0, 0), 0);
	assert_string_equal(e.caused_by, REPORT_CAUSE_HANG);
	for (int primary = 0; primary < 2; primary++) {
		if (primary)
			assert_int_equal(report_make_primary(&e, 1, 0, REPORT_CAUSE_HANG), 1);
		assert_int_equal(report_write_parent_error(parent, &e), 0);
		f = fopen(parent, "r");
		memset(buf, 0, sizeof(buf));
		assert_non_null(fgets(buf, sizeof(buf), f));
		fclose(f);
		/* Every copy of the marker (a reader may take either), not a
		 * key that only differs in case. */
		assert_true((strstr(buf, "ddp_caused_by") == NULL) == primary);
		assert_non_null(strstr(buf, "\"DDP_CAUSED_BY\":\"y\""));
		assert_non_null(strstr(buf, "\"py_callstack\":\"tb\""));
		assert_non_null(strstr(buf, "\"errorCode\":3"));
	}
	report_entry_free(&e);
	unlink(child);
	unlink(parent);
	free(child);
}

static void test_tail_lines_as_a_terminal_shows_them(void **state)
{
	const char raw[] = "cut line\nline 1\r\n\x1b[31mred\x1b[0m\n\r 10%\r 90%\n\n";
	const char esc[] = "\x1b]0;TITLE\aa\x1b]8;;http://x\x1b\\b\x1b(Bc\x1b=d\x1b";
	char *t;

	t = report_tail_lines(raw, sizeof(raw) - 1, true, 20);
	assert_non_null(t);
	assert_string_equal(t, "line 1\nred\n 90%");
	free(t);
	/* Not cut: the first line is whole; at most max_lines, the last ones. */
	t = report_tail_lines(raw, sizeof(raw) - 1, false, 2);
	assert_string_equal(t, "red\n 90%");
	free(t);
	t = report_tail_lines("", 0, false, 20);
	assert_string_equal(t, "");
	free(t);
	/* One long cut line is all there is: kept. */
	t = report_tail_lines("xyz", 3, true, 20);
	assert_string_equal(t, "xyz");
	free(t);
	/* A window title (OSC, ended by BEL or ESC \\), a charset switch,
	 * a keypad mode: nothing of them stays ("]0;TITLE" did). */
	t = report_tail_lines(esc, sizeof(esc) - 1, false, 20);
	assert_string_equal(t, "abcd");
	free(t);
}

static void test_guess_cause(void **state)
{
	char *c;

	c = report_guess_cause(127, "x\n./m: error while loading shared libraries: libq.so.2: "
				    "cannot open shared object file: No such file or directory");
	assert_non_null(c);
	assert_string_equal(c, "the dynamic loader could not load the shared library libq.so.2 "
			       "(cannot open shared object file: No such file or directory): "
			       "install it, or add its directory to LD_LIBRARY_PATH");
	free(c);
	c = report_guess_cause(127, "sh: 1: frob: not found");
	assert_string_equal(c, "exit 127: a program the worker runs was not found: "
			       "\"sh: 1: frob: not found\"");
	free(c);
	c = report_guess_cause(127, "");
	assert_non_null(strstr(c, "was not found"));
	free(c);
	c = report_guess_cause(126, "sh: 1: /x: Permission denied\n");
	assert_non_null(strstr(c, "could not be executed"));
	assert_non_null(strstr(c, "\"sh: 1: /x: Permission denied\""));
	free(c);
	/* Not a hint of a file that cannot run: of a command line too long. */
	c = report_guess_cause(126, "sh: 1: /bin/echo: Argument list too long\n");
	assert_string_equal(c, "exit 126: a program the worker runs could not be executed (its "
			       "arguments and environment together are over the system's limit, "
			       "ARG_MAX): \"sh: 1: /bin/echo: Argument list too long\"");
	free(c);
	assert_null(report_guess_cause(3, "fatal: cannot open /data/shard-1"));
	assert_null(report_guess_cause(1, NULL));
}

static void test_add_output_for_a_worker_that_is_not_python(void **state)
{
	struct report_entry e;
	struct report_output o = {.tail = "oops\n", .tail_len = 5, .log_file = "/l/stderr.log"};
	char *text;

	assert_int_equal(report_entry_init(&e, 1, 1, 42, EXITED(3), NULL, 0, 0), 0);
	assert_int_equal(report_entry_add_output(&e, &o), 0);
	assert_string_equal(e.message, "<N/A> (no error file)");
	assert_null(e.interpreter);
	assert_null(e.cause);
	text = report_format("sh", "h", &e, 1);
	assert_non_null(strstr(text, "  traceback : <N/A> (no error file)\n"
				     "  stderr    : last 1 line (whole log: /l/stderr.log):\n"
				     "    oops\n"));
	assert_null(strstr(text, "pytorch.org"));
	free(text);
	report_entry_free(&e);
}

static void test_add_output_for_a_python_worker(void **state)
{
	struct report_entry e;
	struct report_output o = {.python = true,
				  .interpreter = "/nonexistent/python3",
				  .interp_name = "python3",
				  .tail = "",
				  .tail_len = 0};
	char *text;

	assert_int_equal(report_entry_init(&e, 0, 0, 42, EXITED(1), NULL, 0, 0), 0);
	assert_int_equal(report_entry_add_output(&e, &o), 0);
	assert_non_null(strstr(e.message, "pytorch.org")); /* torchrun's advice stays */
	assert_string_equal(e.interpreter, "/nonexistent/python3 (python3 found on PATH; "
					   "PYTHON_EXEC chooses another)");
	text = report_format("train.py", "h", &e, 1);
	assert_non_null(strstr(text, "  python    : /nonexistent/python3 (python3"));
	assert_non_null(strstr(text, "  stderr    : <empty>\n"));
	free(text);
	report_entry_free(&e);
}

static void test_file_tail(void **state)
{
	char buf[8];
	bool cut;
	char *path = write_tmp("0123456789");

	assert_int_equal(report_file_tail(path, buf, sizeof(buf), &cut), 8);
	assert_true(cut);
	assert_memory_equal(buf, "23456789", 8);
	unlink(path);
	assert_int_equal(report_file_tail(path, buf, sizeof(buf), &cut), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_record_format),
		cmocka_unit_test(test_parse_other_formats),
		cmocka_unit_test(test_parse_secondary_marker),
		cmocka_unit_test(test_entry_without_error_file),
		cmocka_unit_test(test_entry_with_error_file),
		cmocka_unit_test(test_parse_timestamp_as_torchruns_int),
		cmocka_unit_test(test_entry_time_is_the_error_files_timestamp),
		cmocka_unit_test(test_failure_time_is_the_error_files_when_in_between),
		cmocka_unit_test(test_a_file_written_right_after_the_start_is_not_stale),
		cmocka_unit_test(test_root_cause_is_the_earliest_observed),
		cmocka_unit_test(test_root_cause_ties_go_to_the_lower_global_rank),
		cmocka_unit_test(test_root_cause_an_exit_before_the_stop_before_one_still_running),
		cmocka_unit_test(test_root_cause_primary_before_secondary),
		cmocka_unit_test(test_format_matches_torchrun),
		cmocka_unit_test(test_a_root_cause_stopped_for_the_hang_says_so),
		cmocka_unit_test(test_format_narrow_and_alone),
		cmocka_unit_test(test_a_rank_waited_for_in_vain_is_named),
		cmocka_unit_test(test_entries_from_other_nodes_show_their_host_and_given_root),
		cmocka_unit_test(test_a_nodes_own_first_failure_names_the_jobs_root_cause),
		cmocka_unit_test(test_root_cause_a_failure_after_the_stop_comes_last),
		cmocka_unit_test(test_parent_error_file_gets_error_code),
		cmocka_unit_test(test_parent_error_file_of_a_failure_made_primary_has_no_cause),
		cmocka_unit_test(test_tail_lines_as_a_terminal_shows_them),
		cmocka_unit_test(test_guess_cause),
		cmocka_unit_test(test_add_output_for_a_worker_that_is_not_python),
		cmocka_unit_test(test_add_output_for_a_python_worker),
		cmocka_unit_test(test_file_tail),
	};

	return cmocka_run_group_tests(tests, utc, NULL);
}
