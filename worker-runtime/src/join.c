/* join: the store conversation of ddp_init's join (see join.h for the keys).
 * Every failure becomes one sentence that names what is wrong: the store's
 * address when it cannot be reached, the ranks that disagree, or the ranks
 * that never came. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "join.h"
#include "store_addr.h"
#include "store_client.h"
#include "util.h"

#define K_MEMBERS "join/members"
#define K_COUNT	  "join/count"
#define K_DONE	  "join/done"

struct join {
	const struct ddp_env *env;
	struct store_client *sc;
	int64_t timeout_ms, deadline;
	char addr[300]; /* "host:port" / "[v6]:port", for messages */
};

static int64_t left_ms(int64_t deadline)
{
	int64_t l = deadline - util_now_ms();
	return l > 0 ? l : 1;
}

static double secs(int64_t ms)
{
	return (double)ms / 1000.0;
}

/* The waiting for the others ends this much before the deadline, kept to
 * find out who is missing. */
static int64_t reserve_ms(const struct join *j)
{
	int64_t r = j->timeout_ms / 10;

	return r < 20 ? 20 : r > 2000 ? 2000 : r;
}

/* How long the others were waited for, as the messages say it. */
static double waited_s(const struct join *j)
{
	int64_t w = j->timeout_ms - reserve_ms(j);

	return secs(w > 0 ? w : 0);
}

static int lost(const struct join *j, int rc, const char *what)
{
	return ddpi_err(rc, "lost the store at %s during init (%s): %s", j->addr, what,
			store_strerror(rc));
}

/* The store closed the connection during the handshake: it does not speak the
 * 2.x dialect (PyTorch 1.x's TCPStore, which torchrun 1.x hosts, closes on
 * VALIDATE). One node can still meet through shared memory. */
static int older_store(const struct join *j, int rc)
{
	if (j->env->nnodes > 1)
		return ddpi_err(
			rc,
			"the store at %s closed the connection during the handshake: it "
			"does not speak PyTorch's TCPStore 2.x protocol (torchrun 1.x hosts "
			"an older one), and a multi-node job needs it",
			j->addr);
	if (j->env->rank == 0)
		fprintf(stderr,
			"libddp: the store at %s speaks an older protocol than TCPStore 2.x "
			"(torchrun 1.x?): the ranks meet through shared memory alone, without the "
			"world-consistency check (DDP_STORE=0 skips the store)\n",
			j->addr);
	return 0;
}

static int is_older_store(int rc)
{
	return rc == -ECONNRESET || rc == -EPIPE || rc == -EPROTO;
}

/* A store that is not up yet is normal for a moment (workers may start before
 * their agent's store listens): wait that long in silence. Longer, a worker
 * that says nothing until the timeout (600 s by default) looks hung: say once
 * what it waits for. */
#define QUIET_CONNECT_MS 5000
/* A try that ends before its phase does (a handshake that failed) is made
 * again until less than this is left; a shorter try could time out before
 * even a refusal arrives, hiding the real error. */
#define MIN_TRY_MS 10

/* Why a connection failed, for the notice and the error. */
static const char *connect_strerror(int rc)
{
	if (rc == -ETIMEDOUT)
		return "no answer (the host is down, a firewall drops the connection, or the "
		       "server there does not answer)";
	return store_strerror(rc);
}

static int connect_store(struct join *j)
{
	const struct ddp_env *env = j->env;
	int64_t quiet_end = util_now_ms() + QUIET_CONNECT_MS, end;
	char prefix[200];
	int rc, told = 0, why = 0;

	for (;;) {
		int64_t t0 = util_now_ms();
		end = !told && quiet_end < j->deadline ? quiet_end : j->deadline;
		rc = store_client_connect(env->master_addr, env->master_port, left_ms(end),
					  left_ms(j->deadline), &j->sc);
		/* What the address last said counts, unless a try had time for
		 * an answer since and got none (store_client_connect's rule; a
		 * try's time includes the name's lookup, which a slow resolver
		 * could make count for silence). */
		if (rc < 0 && rc != -ETIMEDOUT)
			why = rc;
		else if (rc == -ETIMEDOUT && util_now_ms() - t0 >= STORE_ANSWER_MS)
			why = 0;
		if (rc == 0 || rc == -EINVAL || rc == -ENOMEM || is_older_store(rc))
			break;
		if (end - util_now_ms() >= MIN_TRY_MS)
			continue;
		if (j->deadline - util_now_ms() < MIN_TRY_MS)
			break;
		fprintf(stderr,
			"[rank%d] libddp: the store at %s (MASTER_ADDR:MASTER_PORT) does not "
			"answer yet: %s; still trying for %g s (DDP_TIMEOUT sets how long; "
			"DDP_STORE=0 runs one node without a store)\n",
			env->rank, j->addr, connect_strerror(rc),
			secs((left_ms(j->deadline) + 50) / 100 * 100));
		told = 1;
	}
	/* The last try may run out of time before its answer comes (a loaded
	 * machine): the store's answer until then is the reason, not that. */
	if (rc == -ETIMEDOUT && why < 0)
		rc = why;
	if (is_older_store(rc))
		return older_store(j, rc);
	if (rc < 0)
		return ddpi_err(
			rc,
			"cannot reach the store at %s (MASTER_ADDR:MASTER_PORT) within %g s: %s",
			j->addr, secs(j->timeout_ms), connect_strerror(rc));
	if (env->join_gen == 0)
		snprintf(prefix, sizeof(prefix), "ddp/%s/r%d", env->run_id, env->restart);
	else
		snprintf(prefix, sizeof(prefix), "ddp/%s/r%d/c%d", env->run_id, env->restart,
			 env->join_gen);
	if ((rc = store_client_set_prefix(j->sc, prefix)) < 0)
		return ddpi_err(rc, "store: %s", store_strerror(rc));
	return 0;
}

/* Every record so far (partial while ranks are still arriving). */
static int members(struct join *j, struct ddpi_join_rec **recs, size_t *n)
{
	void *v = NULL;
	size_t len = 0;
	int rc;

	store_client_set_timeout(j->sc, left_ms(j->deadline));
	if ((rc = store_client_try_get(j->sc, K_MEMBERS, &v, &len)) < 0)
		return lost(j, rc, "reading " K_MEMBERS);
	rc = ddpi_join_parse(v, len, recs, n);
	free(v);
	return rc == -ENOMEM ? ddpi_err(rc, "out of memory reading " K_MEMBERS) : rc;
}

/* 0 for "ok", DDP_EENV with the message for "error <message>"; frees v. */
static int verdict_of(void *v, size_t len)
{
	int rc;

	if (len == 2 && !memcmp(v, "ok", 2))
		rc = 0;
	else if (len > 6 && !memcmp(v, "error ", 6))
		rc = ddpi_err(DDP_EENV, "%s", (char *)v + 6);
	else
		rc = ddpi_err(-EPROTO, "unexpected %s in the store: '%.80s'", K_DONE, (char *)v);
	free(v);
	return rc;
}

/* Sets join/done to verdict unless a verdict is there already; the verdict in
 * force decides. */
static int settle(struct join *j, const char *verdict)
{
	void *cur = NULL;
	size_t len = 0;
	int rc;

	store_client_set_timeout(j->sc, left_ms(j->deadline));
	rc = store_client_compare_set(j->sc, K_DONE, "", 0, verdict, strlen(verdict), &cur, &len);
	if (rc < 0)
		return lost(j, rc, "setting " K_DONE);
	return verdict_of(cur, len);
}

static int fail_with(struct join *j, const char *msg)
{
	char verdict[1024];

	snprintf(verdict, sizeof(verdict), "error %s", msg);
	int rc = settle(j, verdict);
	/* Someone else's verdict may be "ok" already: then this rank alone is wrong. */
	return rc == 0 ? ddpi_err(DDP_EENV, "%s", msg) : rc;
}

/* What is wrong with the records, if anything, as one sentence in msg: a rank
 * claimed twice (which is also how leftovers of an earlier job under the same
 * run id look), ranks that disagree, nodes filled wrongly. 0 or DDP_EENV. */
static int describe(struct join *j, const struct ddpi_join_rec *recs, size_t n, int64_t count,
		    char *msg, size_t len)
{
	char found[400];
	int rc = ddpi_join_duplicates(recs, n, found, sizeof(found));

	if (rc == DDP_EENV || (rc == 0 && count > j->env->world)) {
		char head[64] = "";
		if (count > j->env->world)
			snprintf(head, sizeof(head),
				 "%lld processes joined for WORLD_SIZE=%d: ", (long long)count,
				 j->env->world);
		snprintf(msg, len,
			 "%s%s, or an earlier job with TORCHELASTIC_RUN_ID=%s used this store "
			 "(give every job its own run id)",
			 head, rc ? found : "a rank was started twice", j->env->run_id);
		return DDP_EENV;
	}
	if (rc < 0)
		return ddpi_err(rc, "out of memory");
	rc = ddpi_join_check(recs, n, n == (size_t)j->env->world, msg, len);
	return rc == -ENOMEM ? ddpi_err(rc, "out of memory") : rc;
}

/* More processes than WORLD_SIZE, or beliefs that differ: name who. */
static int disagreement(struct join *j, int64_t count)
{
	struct ddpi_join_rec *recs = NULL;
	size_t n = 0;
	char msg[800];
	int rc;

	if ((rc = members(j, &recs, &n)) < 0)
		return rc;
	rc = describe(j, recs, n, count, msg, sizeof(msg));
	free(recs);
	if (rc == 0) /* the digests said otherwise: cannot happen but with a bad store */
		snprintf(msg, sizeof(msg),
			 "the ranks disagree on WORLD_SIZE, GROUP_WORLD_SIZE, the backend or the "
			 "libddp version");
	else if (rc != DDP_EENV)
		return rc;
	return fail_with(j, msg);
}

/* This rank completed the count: check everyone and publish the verdict. */
static int last_rank(struct join *j, int64_t count)
{
	struct ddpi_join_rec *recs = NULL;
	size_t n = 0;
	char verdict[806];
	int rc;

	if ((rc = members(j, &recs, &n)) < 0)
		return rc;
	rc = describe(j, recs, n, count, verdict + 6, sizeof(verdict) - 6);
	free(recs);
	if (rc == 0)
		return settle(j, "ok");
	if (rc != DDP_EENV)
		return rc;
	memcpy(verdict, "error ", 6);
	return settle(j, verdict);
}

/* Nobody completed the join in time: name the ranks that never came (or
 * what is wrong with those that did). */
static int missing(struct join *j)
{
	struct ddpi_join_rec *recs = NULL;
	size_t n = 0;
	char who[200], msg[800];
	int rc, k = 0;

	if ((rc = members(j, &recs, &n)) < 0)
		return ddpi_caused_by(
			ddpi_err(-ETIMEDOUT,
				 "the other ranks did not join at the store at %s within %g s",
				 j->addr, waited_s(j)),
			"the other ranks timed out");
	rc = describe(j, recs, n, 0, msg, sizeof(msg));
	if (rc == 0)
		k = ddpi_join_missing(recs, n, j->env->world, who, sizeof(who));
	free(recs);
	if (rc == DDP_EENV)
		return ddpi_err(rc, "%s", msg);
	if (rc < 0 || k < 0)
		return ddpi_err(-ENOMEM, "out of memory");
	/* The ranks that never came are why this one fails. */
	if (k == 0)
		return ddpi_caused_by(
			ddpi_err(-ETIMEDOUT,
				 "every rank joined but the join did not complete within %g s (the "
				 "last rank to join may have died)",
				 waited_s(j)),
			"the last rank to join timed out");
	return ddpi_caused_by(ddpi_err(-ETIMEDOUT, "%s did not join within %g s (%d of %d did)",
				       who, waited_s(j), j->env->world - k, j->env->world),
			      "%s did not join within %g s", who, waited_s(j));
}

/* Everyone else: wait for the verdict, keeping a little time to diagnose. */
static int wait_verdict(struct join *j)
{
	int64_t reserve = reserve_ms(j);
	void *v = NULL;
	size_t len = 0;
	int rc;

	store_client_set_timeout(j->sc, left_ms(j->deadline - reserve));
	rc = store_client_get(j->sc, K_DONE, &v, &len);
	if (rc == -ETIMEDOUT)
		return missing(j);
	if (rc < 0)
		return lost(j, rc, "waiting for the other ranks");
	return verdict_of(v, len);
}

int ddpi_join(const struct ddp_env *env, enum ddp_backend be, int64_t timeout_ms, int64_t deadline,
	      struct store_client **out)
{
	struct join j = {.env = env, .timeout_ms = timeout_ms, .deadline = deadline};
	struct ddpi_join_rec me;
	char line[256];
	int64_t v, count, digest;
	int rc, len;

	*out = NULL;
	snprintf(j.addr, sizeof(j.addr), strchr(env->master_addr, ':') ? "[%s]:%d" : "%s:%d",
		 env->master_addr, env->master_port);
	if (env->world > DDPI_JOIN_MAX_WORLD)
		return ddpi_err(DDP_EENV, "WORLD_SIZE=%d is above libddp's limit of %d", env->world,
				DDPI_JOIN_MAX_WORLD);
	if ((rc = connect_store(&j)) < 0 || !j.sc)
		goto out;

	ddpi_join_rec_init(&me, env, be);
	if ((len = ddpi_join_rec_format(&me, line, sizeof(line))) < 0) {
		rc = ddpi_err(len, "join record too long");
		goto out;
	}
	digest = ddpi_join_digest(&me);
	store_client_set_timeout(j.sc, left_ms(deadline));
	if ((rc = store_client_append(j.sc, K_MEMBERS, line, (size_t)len)) < 0) {
		rc = lost(&j, rc, "publishing this rank");
		goto out;
	}
	if ((rc = store_client_add(j.sc, K_COUNT, 1 + (digest << DDPI_JOIN_COUNT_BITS), &v)) < 0) {
		rc = lost(&j, rc, "counting the ranks");
		goto out;
	}
	count = v & DDPI_JOIN_MAX_WORLD;
	if (count > env->world || v >> DDPI_JOIN_COUNT_BITS != digest * count)
		rc = disagreement(&j, count);
	else if (count == env->world)
		rc = last_rank(&j, count);
	else
		rc = wait_verdict(&j);
out:
	if (rc < 0) {
		store_client_close(j.sc);
		return rc;
	}
	*out = j.sc;
	return 0;
}
