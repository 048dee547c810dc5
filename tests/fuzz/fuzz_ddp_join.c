/* libFuzzer target for the init join's records as read from the store
 * (worker-runtime/src/join.h: join/members), then checked as the last rank
 * and a failing rank check them. A record that parses formats back to
 * itself. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "join.h"

/* The world ddpi_join_missing is asked about: the env's, capped here. */
#define WORLD_MAX 65536

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ddpi_join_rec *recs = NULL, *back = NULL;
	char msg[512], line[512];
	size_t n = 0, n2 = 0, i;
	int rc, world;

	rc = ddpi_join_parse((const char *)data, size, &recs, &n);
	CHECK(rc == 0 || rc == -EPROTO || rc == -ENOMEM);
	if (rc != 0)
		return 0;
	for (i = 0; i < n; i++) {
		const struct ddpi_join_rec *r = &recs[i];
		int len;

		CHECK(r->rank >= 0 && r->world >= 1 && r->local_rank >= 0 && r->local_world >= 1 &&
		      r->node >= 0 && r->nnodes >= 1);
		CHECK(memchr(r->backend, '\0', sizeof(r->backend)) != NULL &&
		      memchr(r->version, '\0', sizeof(r->version)) != NULL &&
		      memchr(r->host, '\0', sizeof(r->host)) != NULL);
		len = ddpi_join_rec_format(r, line, sizeof(line));
		CHECK(len > 0);
		CHECK(ddpi_join_parse(line, (size_t)len, &back, &n2) == 0 && n2 == 1);
		CHECK(back[0].rank == r->rank && back[0].world == r->world &&
		      back[0].local_rank == r->local_rank &&
		      back[0].local_world == r->local_world && back[0].node == r->node &&
		      back[0].nnodes == r->nnodes && back[0].pid == r->pid &&
		      strcmp(back[0].backend, r->backend) == 0 &&
		      strcmp(back[0].version, r->version) == 0 &&
		      strcmp(back[0].host, r->host) == 0);
		free(back);
		back = NULL;
	}
	rc = ddpi_join_duplicates(recs, n, msg, sizeof(msg));
	CHECK(rc == 0 || rc == DDP_EENV);
	CHECK(rc == 0 || msg[0] != '\0');
	for (int complete = 0; complete < 2; complete++) {
		rc = ddpi_join_check(recs, n, complete, msg, sizeof(msg));
		CHECK(rc == 0 || rc == DDP_EENV);
		CHECK(rc == 0 || msg[0] != '\0');
	}
	world = n > 0 && recs[0].world <= WORLD_MAX ? recs[0].world : 1;
	rc = ddpi_join_missing(recs, n, world, msg, sizeof(msg));
	CHECK(rc >= 0 && rc <= world);
	CHECK(memchr(msg, '\0', sizeof(msg)) != NULL);
	free(recs);
	return 0;
}
