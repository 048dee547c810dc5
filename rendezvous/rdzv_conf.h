/* rdzv_conf: the --rdzv-conf settings, "KEY=VALUE,KEY=VALUE", with torchrun's
 * key names and ddprun's defaults.
 *
 *   join_timeout (600 s)          how long a node waits for the round to close
 *   last_call_timeout (30 s)      dynamic: wait for more nodes after MIN joined
 *   heartbeat_timeout             a node whose heartbeat has not moved for this
 *                                 long is lost; also the reply deadline of a
 *                                 heartbeat (the store host is lost after it).
 *                                 Not given: keep_alive_interval times
 *                                 keep_alive_max_attempt (torchrun's rule:
 *                                 5 s x 3), or 5 s when neither is given
 *   keep_alive_interval (1 s)     one heartbeat per interval
 *   keep_alive_max_attempt (3)    intervals without a heartbeat before a node
 *                                 is lost (see heartbeat_timeout)
 *   exit_barrier_timeout (300 s)  ddprun's own: how long a node that is done
 *                                 waits for the others before leaving
 *   is_host (auto)                dynamic: 1 hosts the store, 0 never does
 *   close_timeout, read_timeout, timeout: accepted for compatibility, not
 *   used.
 * Times are seconds (fractions allowed). A bad value of a known key is an
 * error (-EINVAL) with one line in err; so is a heartbeat_timeout below two
 * intervals (one late heartbeat would end the job), or one given with a
 * keep_alive_max_attempt that says otherwise. An unknown key (torchrun 2.x's
 * use_libuv, store_type, ...) is passed over, as torchrun's rendezvous does,
 * and its name noted in unknown for one warning. */
#ifndef DDP_RDZV_CONF_H
#define DDP_RDZV_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rdzv_conf {
	int64_t join_timeout_ms;
	int64_t last_call_timeout_ms;
	int64_t close_timeout_ms;
	int64_t heartbeat_timeout_ms;
	int64_t keep_alive_interval_ms;
	int keep_alive_max_attempt;
	int64_t read_timeout_ms;
	int64_t timeout_ms;
	int64_t exit_barrier_timeout_ms;
	int is_host; /* -1: decided by the endpoint's address; 0 or 1: forced */
	/* given by the string parsed (else the default) */
	bool heartbeat_timeout_given, keep_alive_interval_given, keep_alive_max_attempt_given;
	char unknown[256]; /* "use_libuv, store_type": keys not used ("" none) */
};

void rdzv_conf_default(struct rdzv_conf *c);
/* Parse s over the defaults already in c. NULL or "" changes nothing. */
int rdzv_conf_parse(const char *s, struct rdzv_conf *c, char *err, size_t errlen);
/* Whether k is a key ddprun reads (join_timeout, is_host, ...). */
bool rdzv_conf_has_key(const char *k);

#endif
