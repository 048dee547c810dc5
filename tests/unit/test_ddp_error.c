/* Unit tests for libddp's secondary-failure marker (worker-runtime/src/error.c):
 * an error caused by another rank's failure carries that rank; when a context
 * breaks (or ddp_init fails) that way, libddp writes the error file at once,
 * with message.extraInfo.ddp_caused_by, and every later ddp_record_error or
 * ddp_fatal carries it too. The launcher's parser of that file is tested in
 * test_launch_report.c, the two together end to end in
 * tests/e2e/test_ddp_ddprun.py (a unit test links only its own part). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cJSON.h>

#include "ddp_internal.h"

static char path[] = "/tmp/ddp-error-XXXXXX";

static int setup(void **state)
{
	int fd = mkstemp(path);

	if (fd < 0)
		return -1;
	close(fd);
	unlink(path);
	setenv("TORCHELASTIC_ERROR_FILE", path, 1);
	return 0;
}

static int teardown(void **state)
{
	unlink(path);
	unsetenv("TORCHELASTIC_ERROR_FILE");
	return 0;
}

static int reset(void **state)
{
	unlink(path);
	ddpi_forget_failure();
	return 0;
}

/* The error file as JSON; NULL when there is none. */
static cJSON *error_file(void)
{
	char buf[16384];
	int fd = open(path, O_RDONLY);
	ssize_t n;

	if (fd < 0)
		return NULL;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	assert_true(n > 0);
	buf[n] = '\0';
	return cJSON_Parse(buf);
}

static const char *extra(cJSON *doc, const char *name)
{
	cJSON *m = cJSON_GetObjectItem(doc, "message");

	return cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "extraInfo"), name));
}

static const char *message(cJSON *doc)
{
	return cJSON_GetStringValue(
		cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "message"), "message"));
}

static void test_the_cause_goes_with_the_error(void **state)
{
	assert_int_equal(ddpi_err(-EINVAL, "bad count"), -EINVAL);
	assert_string_equal(ddpi_cause(), ""); /* a rank's own error */
	assert_int_equal(
		ddpi_caused_by(ddpi_err(DDP_EPEER, "barrier: rank %d (pid %d) exited", 2, 41),
			       "rank %d (pid %d) exited", 2, 41),
		DDP_EPEER);
	assert_string_equal(ddp_errmsg(), "barrier: rank 2 (pid 41) exited");
	assert_string_equal(ddpi_cause(), "rank 2 (pid 41) exited");
	/* A prefix keeps it; the next error is a new story. */
	ddpi_err_prefix(DDP_EPEER, "ddp_init");
	assert_string_equal(ddpi_cause(), "rank 2 (pid 41) exited");
	ddpi_err(-ENOMEM, "out of memory");
	assert_string_equal(ddpi_cause(), "");
}

static void test_a_peer_loss_writes_a_marked_error_file_at_once(void **state)
{
	cJSON *doc;

	ddpi_caused_by(ddpi_err(DDP_EPEER, "all_reduce: rank 2 (pid 41) exited"),
		       "rank 2 (pid 41) exited");
	ddpi_note_failure();
	doc = error_file();
	assert_non_null(doc);
	assert_string_equal(message(doc), "all_reduce: rank 2 (pid 41) exited");
	assert_string_equal(extra(doc, "ddp_caused_by"), "rank 2 (pid 41) exited");
	assert_non_null(strstr(extra(doc, "py_callstack"), "C backtrace"));
	assert_non_null(extra(doc, "timestamp"));
	cJSON_Delete(doc);
	/* The program's own fatal message later still says what caused it. */
	assert_int_equal(ddp_record_error("giving up at step 7"), 0);
	doc = error_file();
	assert_string_equal(message(doc), "giving up at step 7");
	assert_string_equal(extra(doc, "ddp_caused_by"), "rank 2 (pid 41) exited");
	cJSON_Delete(doc);
	/* A new context starts clean. */
	ddpi_forget_failure();
	assert_int_equal(ddp_record_error("x"), 0);
	doc = error_file();
	assert_null(extra(doc, "ddp_caused_by"));
	cJSON_Delete(doc);
}

static void test_an_error_of_its_own_writes_nothing(void **state)
{
	cJSON *doc;

	ddpi_err(-EINVAL, "all_reduce: mismatched collectives");
	ddpi_note_failure();
	assert_null(error_file()); /* the program decides what to record */
	assert_int_equal(ddp_record_error("mismatch"), 0);
	doc = error_file();
	assert_null(extra(doc, "ddp_caused_by"));
	cJSON_Delete(doc);
}

static void test_the_first_peer_lost_stays_the_cause(void **state)
{
	cJSON *doc;

	ddpi_caused_by(ddpi_err(DDP_EPEER, "a"), "rank 2 (pid 41) exited");
	ddpi_note_failure();
	ddpi_caused_by(ddpi_err(-ETIMEDOUT, "b"), "rank 3 (pid 42) timed out");
	ddpi_note_failure();
	assert_int_equal(ddp_record_error("c"), 0);
	doc = error_file();
	assert_string_equal(extra(doc, "ddp_caused_by"), "rank 2 (pid 41) exited");
	cJSON_Delete(doc);
}

static void test_ddp_fatal_carries_the_marker(void **state)
{
	int wstatus;
	pid_t pid = fork();
	cJSON *doc;

	assert_true(pid >= 0);
	if (pid == 0) {
		ddpi_caused_by(ddpi_err(DDP_EPEER, "barrier: the previous node's leader is gone"),
			       "rank 4 (the leader of node 1) disconnected");
		ddpi_note_failure();
		int null = open("/dev/null", O_WRONLY);

		dup2(null, 2); /* the fatal line is not this test's output */
		ddp_fatal(NULL, "step %d failed", 3);
	}
	assert_int_equal(waitpid(pid, &wstatus, 0), pid);
	assert_true(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 1);
	doc = error_file();
	assert_non_null(doc);
	assert_string_equal(message(doc), "step 3 failed");
	assert_string_equal(extra(doc, "ddp_caused_by"),
			    "rank 4 (the leader of node 1) disconnected");
	cJSON_Delete(doc);
}

/* A message in bytes that are not UTF-8 (a Latin-1 file name): the file is
 * still valid JSON for Python's json.load (torchrun reads it), each such byte
 * U+FFFD. */
static void test_bytes_that_are_not_utf8_become_replacement_characters(void **state)
{
	cJSON *doc;

	assert_int_equal(ddp_record_error("cannot open /data/caf\xe9.bin: \xff"), 0);
	doc = error_file();
	assert_non_null(doc);
	assert_string_equal(message(doc), "cannot open /data/caf\xef\xbf\xbd.bin: \xef\xbf\xbd");
	cJSON_Delete(doc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_the_cause_goes_with_the_error, reset),
		cmocka_unit_test_setup(test_a_peer_loss_writes_a_marked_error_file_at_once, reset),
		cmocka_unit_test_setup(test_an_error_of_its_own_writes_nothing, reset),
		cmocka_unit_test_setup(test_the_first_peer_lost_stays_the_cause, reset),
		cmocka_unit_test_setup(test_ddp_fatal_carries_the_marker, reset),
		cmocka_unit_test_setup(test_bytes_that_are_not_utf8_become_replacement_characters,
				       reset),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
