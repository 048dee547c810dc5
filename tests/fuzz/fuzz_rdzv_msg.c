/* libFuzzer target for the rendezvous values as read from the store
 * (rendezvous/rdzv_msg.h, through rdzv_codec.h for the JSON ones). The first
 * byte picks the decoder, the rest is the value (not NUL-terminated). What a
 * decoder accepts must encode and decode back to the same thing. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "rdzv_codec.h"
#include "rdzv_msg.h"

/* A closed value's participants are checked up to this many nodes. */
#define MEMBERS_MAX 4096

static void check_str(const char *s, size_t size)
{
	CHECK(memchr(s, '\0', size) != NULL);
}

static void node(const uint8_t *v, size_t len)
{
	struct rdzv_node a, b;
	char *s;

	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	if (rdzv_node_decode(v, len, &a) != 0)
		return;
	check_str(a.host, sizeof(a.host));
	check_str(a.addr, sizeof(a.addr));
	CHECK(a.nproc >= 1 && a.pid >= 0 && a.node_rank >= 0);
	CHECK(a.worker_port >= 0 && a.worker_port <= 65535);
	s = rdzv_node_encode(&a);
	CHECK(s != NULL && rdzv_node_decode(s, strlen(s), &b) == 0);
	CHECK(strcmp(a.host, b.host) == 0 && strcmp(a.addr, b.addr) == 0 && a.nproc == b.nproc &&
	      a.pid == b.pid && a.node_rank == b.node_rank && a.worker_port == b.worker_port);
	free(s);
}

static void config(const uint8_t *v, size_t len)
{
	struct rdzv_config a, b;
	char msg[1024];
	char *s;

	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	if (rdzv_config_decode(v, len, &a) != 0)
		return;
	check_str(a.backend, sizeof(a.backend));
	check_str(a.version, sizeof(a.version));
	check_str(a.host, sizeof(a.host));
	CHECK(a.min_nodes >= 1 && a.max_nodes >= 1 && a.max_restarts >= 0 && a.node_rank >= -1);
	s = rdzv_config_encode(&a);
	CHECK(s != NULL && rdzv_config_decode(s, strlen(s), &b) == 0);
	CHECK(rdzv_config_diff(&a, &b, msg, sizeof(msg)) == 0);
	CHECK(strcmp(a.host, b.host) == 0 && a.node_rank == b.node_rank);
	b.max_restarts = a.max_restarts == 0 ? 1 : 0;
	CHECK(rdzv_config_diff(&a, &b, msg, sizeof(msg)) == 1 && msg[0] != '\0');
	free(s);
}

static void closed(const uint8_t *v, size_t len)
{
	int n = 0, status = -1, *arr, *arr2, i, rc, n2 = 0;
	char msg[512];
	char *s;

	rc = rdzv_closed_decode(v, len, &n, &status, msg, sizeof(msg));
	CHECK(rc == 0 || rc == 1 || rc == -EINVAL);
	if (rc == 1) {
		CHECK(status >= 0 && status <= 255);
		check_str(msg, sizeof(msg));
		return;
	}
	if (rc != 0)
		return;
	CHECK(n >= 1);
	if (n > MEMBERS_MAX)
		return;
	arr = malloc((size_t)n * sizeof(int));
	arr2 = malloc((size_t)n * sizeof(int));
	CHECK(arr != NULL && arr2 != NULL);
	if (rdzv_closed_members(v, len, arr, n) == 0) {
		for (i = 0; i < n; i++)
			CHECK(arr[i] >= 1 && (i == 0 || arr[i] > arr[i - 1]));
		s = rdzv_closed_encode(arr, n);
		if (s != NULL) {
			CHECK(rdzv_closed_decode(s, strlen(s), &n2, &status, msg, sizeof(msg)) ==
			      0);
			CHECK(n2 == n && rdzv_closed_members(s, strlen(s), arr2, n) == 0);
			CHECK(memcmp(arr, arr2, (size_t)n * sizeof(int)) == 0);
			free(s);
		}
	}
	free(arr);
	free(arr2);
}

static void meta(const uint8_t *v, size_t len)
{
	int a = -1, b = -1;
	char *s;

	if (rdzv_meta_decode(v, len, &a) != 0)
		return;
	CHECK(a >= 0);
	s = rdzv_meta_encode(a);
	CHECK(s != NULL && rdzv_meta_decode(s, strlen(s), &b) == 0 && a == b);
	free(s);
}

static void end(const uint8_t *v, size_t len)
{
	struct rdzv_end a, b;
	char *s;

	if (rdzv_end_decode(v, len, &a) != 0)
		return;
	CHECK(a.kind >= RDZV_END_OK && a.kind <= RDZV_END_REJOIN);
	check_str(a.host, sizeof(a.host));
	check_str(a.caused_by, sizeof(a.caused_by));
	check_str(a.why, sizeof(a.why));
	s = rdzv_end_encode(&a);
	CHECK(s != NULL && rdzv_end_decode(s, strlen(s), &b) == 0);
	CHECK(a.kind == b.kind);
	if (a.kind == RDZV_END_LOST)
		CHECK(a.node == b.node && strcmp(a.why, b.why) == 0);
	if (a.kind == RDZV_END_FAIL)
		CHECK(a.node == b.node && strcmp(a.host, b.host) == 0 && a.rank == b.rank &&
		      a.local_rank == b.local_rank && a.pid == b.pid && a.status == b.status &&
		      a.signal == b.signal && a.final == b.final && a.time_us == b.time_us &&
		      strcmp(a.caused_by, b.caused_by) == 0);
	free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static void (*const dec[])(const uint8_t *, size_t) = {node, config, closed, meta, end};
	uint8_t *v;

	if (size < 1 || size - 1 > RDZV_MSG_MAX + 16)
		return 0;
	/* An exact copy, so that a read past the value is caught. */
	v = malloc(size - 1 ? size - 1 : 1);
	if (v == NULL)
		return 0;
	memcpy(v, data + 1, size - 1);
	dec[data[0] % (sizeof(dec) / sizeof(dec[0]))](v, size - 1);
	free(v);
	return 0;
}
