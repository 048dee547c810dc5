/* store_client_int: what store_client.c (the connection, deadline-bound I/O)
 * shares with store_client_ops.c (the operations). Every I/O call gives 0 or
 * a negative errno; deadlines are util_now_ms() values, -1 for none. */
#ifndef DDP_STORE_CLIENT_INT_H
#define DDP_STORE_CLIENT_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store_client.h"
#include "store_proto.h"

struct store_client {
	int fd;
	int64_t op_timeout_ms;
	char *prefix;
	bool broken;
	uint32_t nonce;
	struct store_buf req;
};

/* The deadline ms from now (-1 when ms <= 0: none). */
int64_t store_client_deadline(int64_t ms);
int store_client_send(struct store_client *c, const uint8_t *p, size_t n, int64_t deadline);
int store_client_recv(struct store_client *c, void *dst, size_t n, int64_t deadline);
/* A length-prefixed value, NUL-terminated for convenience; the caller frees. */
int store_client_recv_bytes(struct store_client *c, void **val, size_t *len, int64_t deadline);
/* rc, marking the client unusable when rc < 0 (its stream is out of step). */
int store_client_fail(struct store_client *c, int rc);

#endif
