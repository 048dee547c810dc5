/* libFuzzer target for --rdzv-conf (rendezvous/rdzv_conf.h): the input is the
 * option's value (cut at its first NUL), parsed over the defaults. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "rdzv_conf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1), err[256];
	/* On the heap, exactly its size: a write past it is caught. */
	struct rdzv_conf *c = malloc(sizeof(*c));
	int rc;

	if (s == NULL || c == NULL)
		goto out;
	memcpy(s, data, size);
	s[size] = '\0';
	err[0] = '\0';
	rdzv_conf_default(c);
	rc = rdzv_conf_parse(s, c, err, sizeof(err));
	CHECK(rc == 0 || rc == -EINVAL);
	if (rc != 0) {
		CHECK(err[0] != '\0' && strchr(err, '\n') == NULL);
		goto out;
	}
	CHECK(memchr(c->unknown, '\0', sizeof(c->unknown)) != NULL);
	CHECK(c->join_timeout_ms > 0 && c->heartbeat_timeout_ms > 0 &&
	      c->keep_alive_interval_ms > 0 && c->read_timeout_ms > 0 && c->timeout_ms > 0);
	CHECK(c->last_call_timeout_ms >= 0 && c->close_timeout_ms >= 0 &&
	      c->exit_barrier_timeout_ms >= 0);
	CHECK(c->keep_alive_max_attempt >= 1);
	CHECK(c->is_host >= -1 && c->is_host <= 1);
out:
	free(s);
	free(c);
	return 0;
}
