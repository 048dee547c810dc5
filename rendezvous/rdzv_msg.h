/* rdzv_msg: the values a node rendezvous keeps in the store, as text.
 *
 *   config       {"backend","nnodes":"MIN:MAX","max_restarts","version",
 *                 "node_rank","host"(,"hang_timeout","shutdown_timeout",
 *                 "keep_alive_interval","heartbeat_timeout","protocol")}: the job
 *                 settings every
 *                 node must share (node_rank and host say who wrote them)
 *   node/<R>     {"host","addr","nproc","pid","node_rank","worker_port"}
 *   closed       "<N>" or "<N>:<arrival ranges>" (the round's participants), or
 *                "error:<status>:<message>"
 *   meta         {"restart_count": n}
 *   end          "ok" | "rejoin" | "rejoin:<R>:<why>" | "lost:<R>:<why>" |
 *                {"fail": {...}}
 *
 * The JSON ones are each a table of fields in rdzv_msg.c, which rdzv_codec
 * encodes and checks. The keys they live under: rdzv_keys.h. Encoders return
 * malloc'd text (NULL on ENOMEM); decoders take bytes as read from the store
 * and return 0 or -EINVAL (malformed), never trusting a length or a field. */
#ifndef DDP_RDZV_MSG_H
#define DDP_RDZV_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RDZV_HOST_MAX 256
#define RDZV_ADDR_MAX 64
/* --role, with its NUL: nodes of one role count their ROLE_RANKs together. */
#define RDZV_ROLE_MAX 128
#define RDZV_WHY_MAX  256

struct rdzv_node {
	char host[RDZV_HOST_MAX];
	char addr[RDZV_ADDR_MAX]; /* numeric; where other nodes reach this one */
	int nproc;
	int pid;
	int node_rank;		  /* static: --node-rank; dynamic: arrival order */
	int worker_port;	  /* dynamic, group rank 0: its workers' store; else 0 */
	char role[RDZV_ROLE_MAX]; /* --role ("" omitted) */
	char protocol[8];	  /* RDZV_PROTOCOL ("" an older ddprun's) */
};

char *rdzv_node_encode(const struct rdzv_node *n);
int rdzv_node_decode(const void *v, size_t len, struct rdzv_node *n);

struct rdzv_config {
	char backend[16];
	int min_nodes, max_nodes, max_restarts;
	char version[32];
	int node_rank; /* the writer; -1 when ranks come by arrival (dynamic) */
	char host[RDZV_HOST_MAX];
	/* --hang-timeout in seconds ("" off): a node without it would count no
	 * progress for the others, and one with it declare a hang in a job
	 * that computes elsewhere. */
	char hang_timeout[24];
	/* --shutdown-timeout in seconds ("" the default, 30): the waits for
	 * the others' failure lists and leaving count on every node's. */
	char shutdown_timeout[24];
	/* --rdzv-conf's, in seconds ("" the default; heartbeat_timeout as it
	 * came out, given or not): the store's host judges every node by its
	 * own heartbeat_timeout, which must span two of each node's beats. */
	char keep_alive_interval[24];
	char heartbeat_timeout[24];
	/* How the nodes meet, where one build's may differ from another's of
	 * the same version (RDZV_PROTOCOL; "" an older ddprun's). */
	char protocol[8];
};

/* 2: a static job's nodes beat between attempts too, and the store's host
 * takes one that does not for lost (coord_live.c); an older node would be.
 * 3: a dynamic round's last call waits for the nodes of the round before,
 * which say where they are (coord_rejoin.c); an older node says nothing.
 * 4: a dynamic round whose member sent no descriptor ends "rejoin:<R>:<why>"
 * (coord_join.c), which an older node cannot read, and a node moved on from
 * a round it ran counts out of it (coord_leave.c). */
#define RDZV_PROTOCOL "4"

char *rdzv_config_encode(const struct rdzv_config *c);
int rdzv_config_decode(const void *v, size_t len, struct rdzv_config *c);
/* 0 when mine and theirs describe the same job; else 1 with a message naming
 * both nodes and the first setting that differs. */
int rdzv_config_diff(const struct rdzv_config *mine, const struct rdzv_config *theirs, char *msg,
		     size_t len);

/* closed: *n for a number (returns 0), or *status and msg for an error
 * (returns 1); -EINVAL for anything else. */
int rdzv_closed_decode(const void *v, size_t len, int *n, int *status, char *msg, size_t msglen);
char *rdzv_closed_error(int status, const char *msg);
/* closed for the participants arrivals[0..n): "<n>" when they are 1..n,
 * else "<n>:<ranges>" ("1-2,4"); NULL on ENOMEM or too long. */
char *rdzv_closed_encode(const int *arrivals, int n);
/* The participants' arrival numbers of a closed value whose count is n (as
 * rdzv_closed_decode gave it), ascending, into arrivals[0..n). 0 or -EINVAL. */
int rdzv_closed_members(const void *v, size_t len, int *arrivals, int n);

char *rdzv_meta_encode(int restart_count);
int rdzv_meta_decode(const void *v, size_t len, int *restart_count);

enum rdzv_end_kind { RDZV_END_OK = 1, RDZV_END_FAIL, RDZV_END_LOST, RDZV_END_REJOIN };

struct rdzv_end {
	enum rdzv_end_kind kind;
	/* FAIL, LOST: the node's rank in the round; REJOIN: the one that never
	 * sent its descriptor (-1: none, a node waits to join) */
	int node;
	char host[RDZV_HOST_MAX];
	int rank, local_rank; /* FAIL by a worker: its ranks; -1 otherwise */
	int pid;
	int status;	 /* FAIL: the exit status every node ends with */
	int signal;	 /* FAIL because the agent got a signal: which; else 0 */
	bool final;	 /* FAIL: the job must end (no restart) */
	int64_t time_us; /* FAIL: when it was observed (epoch microseconds) */
	/* FAIL by a worker whose failure another rank's caused (libddp's marker,
	 * report.h): that rank; "" for a primary failure. */
	char caused_by[RDZV_WHY_MAX];
	char why[RDZV_WHY_MAX]; /* LOST, REJOIN with a node */
	/* FAIL by a hang: the rank its verdict names as the one the others
	 * waited for, in decimal ("": none; an older node sends none). */
	char culprit[16];
};

char *rdzv_end_encode(const struct rdzv_end *e);
int rdzv_end_decode(const void *v, size_t len, struct rdzv_end *e);

#endif
