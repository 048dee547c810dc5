/* libFuzzer target for torchelastic error files (launcher/report.h): the
 * input is the file as a worker wrote it (not NUL-terminated), parsed as
 * report_entry_init does and then shown in a failure summary. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "report.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct report_entry e;
	char *msg = NULL, *cause = NULL, *text;
	int64_t ts;
	size_t n;
	int rc;

	if (size > REPORT_MAX_ERROR_FILE)
		return 0;
	rc = report_parse_error_json((const char *)data, size, &msg, &cause, &ts);
	CHECK(rc == 0 || rc == -EINVAL || rc == -ENOMEM);
	if (rc != 0) {
		CHECK(cause == NULL);
		return 0;
	}
	CHECK(msg != NULL);
	CHECK(ts == REPORT_NO_TIMESTAMP || (ts > -1000000000000000000 && ts < 1000000000000000000));
	n = strlen(msg);
	CHECK(n == 0 || (msg[n - 1] != '\n' && msg[n - 1] != '\r'));
	if (cause != NULL) {
		CHECK(cause[0] != '\0' && strlen(cause) <= REPORT_CAUSE_MAX);
		for (const char *p = cause; *p != '\0'; p++)
			CHECK((unsigned char)*p >= ' ');
	}
	/* As the agent shows it. */
	memset(&e, 0, sizeof(e));
	e.global_rank = 3;
	e.exitcode = 1;
	e.message = msg;
	e.caused_by = cause;
	text = report_format("train.py", "host", &e, 1);
	CHECK(text != NULL && text[0] != '\0' && text[strlen(text) - 1] == '\n');
	free(text);
	report_entry_free(&e);
	return 0;
}
