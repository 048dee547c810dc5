/* libFuzzer target for libddp's launcher environment (ddp_internal.h:
 * ddpi_env_parse): the input is "NAME=VALUE\0NAME=VALUE..." read through
 * the getenv callback. What it accepts must be consistent: ranks below their
 * sizes, sizes that fit each other. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "ddp_internal.h"

#define MAX_VARS 256

struct vars {
	char *v[MAX_VARS];
	int n;
};

static const char *fuzz_getenv(const char *name, void *arg)
{
	const struct vars *vs = arg;
	size_t n = strlen(name);
	int i;

	for (i = 0; i < vs->n; i++)
		if (strncmp(vs->v[i], name, n) == 0 && vs->v[i][n] == '=')
			return vs->v[i] + n + 1;
	return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = malloc(size + 1), *p;
	struct vars vs = {.n = 0};
	struct ddp_env e;
	int rc;

	if (buf == NULL)
		return 0;
	memcpy(buf, data, size);
	buf[size] = '\0';
	for (p = buf; p < buf + size; p += strlen(p) + 1)
		if (vs.n < MAX_VARS)
			vs.v[vs.n++] = p;
	rc = ddpi_env_parse(fuzz_getenv, &vs, &e);
	CHECK(rc == 0 || rc == DDP_EENV);
	if (rc != 0) {
		CHECK(ddp_errmsg()[0] != '\0');
		goto out;
	}
	CHECK(e.rank >= 0 && e.rank < e.world);
	CHECK(e.local_rank >= 0 && e.local_rank < e.local_world && e.local_world <= e.world);
	CHECK(e.local_rank <= e.rank);
	CHECK(e.node >= 0 && e.node < e.nnodes && e.nnodes <= e.world);
	CHECK(e.master_port >= 0 && e.master_port <= 65535);
	CHECK(memchr(e.master_addr, '\0', sizeof(e.master_addr)) != NULL);
	CHECK(memchr(e.run_id, '\0', sizeof(e.run_id)) != NULL && e.run_id[0] != '\0');
	CHECK(memchr(e.print_ranks, '\0', sizeof(e.print_ranks)) != NULL);
	CHECK(memchr(e.shm_nonce, '\0', sizeof(e.shm_nonce)) != NULL);
	CHECK(memchr(e.tcp_cc, '\0', sizeof(e.tcp_cc)) != NULL && e.tcp_cc[0] != '\0');
	CHECK(e.restart >= 0 && e.timeout_ms > 0);
	CHECK(e.quiet == 0 || e.quiet == 1);
	CHECK(e.async == 0 || e.async == 1);
	CHECK(e.shm_cma >= -1 && e.shm_cma <= 1);
	CHECK(e.use_store == 0 || (e.master_addr[0] != '\0' && e.master_port > 0));
out:
	free(buf);
	return 0;
}
