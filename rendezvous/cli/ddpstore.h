/* ddpstore: shared pieces of the CLI (options, exit statuses). */
#ifndef DDP_DDPSTORE_H
#define DDP_DDPSTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rdzv_codec.h"
#include "store_proto.h"

/* Exit statuses (documented in ddpstore(1)). */
enum {
	EXIT_OK = 0,
	EXIT_ERROR = 1, /* any other failure */
	EXIT_USAGE = 2,
	EXIT_NOT_FOUND = 3,  /* get/check/del: key absent */
	EXIT_TIMEOUT = 4,    /* wait/get --wait: deadline passed */
	EXIT_CONN = 5,	     /* could not connect, or the connection was lost */
	EXIT_CAS_FAILED = 6, /* cas: the value was not the expected one */
};

/* serve's bounds (ddpstore(1)). A value of at least ddprun's longest
 * (RDZV_MSG_MAX), at most what a client takes in a reply (STORE_MAX_REPLY);
 * a connection buffer that holds a SET of the longest of both. */
#define SERVE_MAX_CONNS	      1000000
#define SERVE_MIN_VALUE_LEN   ((int64_t)RDZV_MSG_MAX)
#define SERVE_MAX_LEN	      ((int64_t)STORE_MAX_REPLY)
#define SERVE_MAX_CONN_BUFFER ((int64_t)4 << 30)
#define SERVE_SET_FRAMING     17 /* a SET's opcode and its two u64 lengths */

struct ddpstore_opts {
	const char *addr;   /* --addr HOST:PORT */
	const char *prefix; /* --prefix P */
	int64_t timeout_ms; /* --timeout S; -1: default */
	int64_t connect_timeout_ms;
	bool wait;	     /* get --wait */
	const char *rdzv_id; /* status --rdzv-id */
	/* serve */
	const char *host;
	int port; /* -1: default */
	const char *port_file;
	int64_t max_conns, max_key_len, max_value_len, max_multi_keys, max_conn_buffer;
	bool quiet;
};

struct store_client;

int ddpstore_serve(const struct ddpstore_opts *o);
/* The exit status for a client error (negative errno). */
int ddpstore_exit_for(int err);

/* ddpstore_sync.c: `keys [PREFIX]` and `barrier KEY N`. */
int ddpstore_cmd_keys(struct store_client *c, const struct ddpstore_opts *o, char **a, int n);
int ddpstore_cmd_barrier(struct store_client *c, const struct ddpstore_opts *o, char **a, int n);
/* ddpstore_status.c: the status command. */
int ddpstore_status(struct store_client *c, const struct ddpstore_opts *o, char **a, int n);
void ddpstore_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* what failed because the server closed the connection on op, which it may
 * not know (PyTorch's servers close on an unknown opcode): say so. */
void ddpstore_err_unsupported(const char *what, const char *op);
/* The server closed the connection of what (add, barrier), which adds to
 * key's counter: say why, as a second connection finds it (the value is no
 * counter, or is beyond int64, or the server has ended). */
void ddpstore_explain_reset(const struct ddpstore_opts *o, const char *what, const char *key);

#endif
