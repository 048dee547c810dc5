/* ddpstore: the store from a shell -- `ddpstore serve` runs a server, the
 * other commands are one-shot clients (see ddpstore(1)).
 *
 * Options are long options only and may come anywhere; an argument that is
 * not a known --option (a negative number, "-" for stdin) is positional, and
 * "--" ends the options. */
#include "ddpstore.h"

#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store_addr.h"
#include "store_client.h"
#include "store_kv.h"
#include "store_proto.h"
#include "util.h"

#define DEFAULT_WAIT_MS	   (300 * 1000)
#define DEFAULT_CONNECT_MS (30 * 1000)

static const char usage_text[] =
	"usage: ddpstore serve [--host H] [--port P] [--port-file F] [--max-conns N]\n"
	"                      [--max-key-len N] [--max-value-len N] [--max-multi-keys N]\n"
	"                      [--max-conn-buffer N] [--quiet]\n"
	"       ddpstore [--addr HOST:PORT] [--prefix P] [--timeout S] [--connect-timeout S]\n"
	"                COMMAND ARGS...\n"
	"commands: set KEY VALUE | get KEY [--wait] | add KEY N | cas KEY EXPECTED DESIRED |\n"
	"          check KEY... | wait KEY... | del KEY | numkeys | append KEY VALUE | ping |\n"
	"          keys [PREFIX] | barrier KEY N\n"
	"          status [--rdzv-id ID]  (a ddprun rendezvous on this store)\n"
	"A VALUE of - is read from stdin. --addr defaults to $MASTER_ADDR:$MASTER_PORT.\n"
	"Exit: 0 ok, 1 error, 2 usage, 3 not found, 4 timeout, 5 connection failed,\n"
	"      6 cas mismatch. See ddpstore(1).\n";
static const char version_text[] = "ddpstore " DDP_VERSION "\n";

void ddpstore_err(const char *fmt, ...)
{
	va_list ap;

	fputs("ddpstore: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("ddpstore: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs(" (see ddpstore --help)\n", stderr);
	return EXIT_USAGE;
}

/* Connects to --addr (or $MASTER_ADDR:$MASTER_PORT, written into buf), with
 * --prefix; *addr: the address it used. 0 or a negative errno, unsaid, but
 * for a missing or bad address: said, and *said set. */
static int client_connect(const struct ddpstore_opts *o, char *buf, size_t len, const char **addr,
			  bool *said, struct store_client **out)
{
	char host[256];
	int port = 0, rc, gai = 0;
	int64_t op_ms;
	struct addrinfo *ai;

	*said = false;
	*addr = o->addr;
	if (o->addr == NULL) {
		const char *h = getenv("MASTER_ADDR"), *p = getenv("MASTER_PORT");

		if (h == NULL || *h == '\0' || p == NULL || *p == '\0') {
			*said = true;
			usage_error("no --addr given and MASTER_ADDR/MASTER_PORT not set");
			return -EINVAL;
		}
		snprintf(buf, len, strchr(h, ':') ? "[%s]:%s" : "%s:%s", h, p);
		*addr = buf;
	}
	if (util_parse_endpoint(*addr, host, sizeof(host), -1, &port) < 0 || port <= 0) {
		*said = true;
		usage_error("bad address '%s' (want HOST:PORT)", *addr);
		return -EINVAL;
	}
	/* A name that does not resolve is retried within --connect-timeout as
	 * well (a server's name may come only once it starts, as a Kubernetes
	 * pod's does; PyTorch's client retries it too), but said at once, and
	 * at the end with the resolver's reason (not "host not found"). */
	if (store_addr_resolve(host, port, false, &ai, &gai) == 0) {
		freeaddrinfo(ai);
	} else if (gai != EAI_MEMORY && o->connect_timeout_ms > 0) {
		ddpstore_err("the name '%s' does not resolve yet (%s): retrying for up to %g s "
			     "(--connect-timeout)",
			     host, gai_strerror(gai), (double)o->connect_timeout_ms / 1000.0);
	}
	/* --timeout bounds waiting commands; every other request gets the same
	 * bound, or the default, so a dead server never hangs a script. */
	op_ms = o->timeout_ms < 0 ? DEFAULT_WAIT_MS : o->timeout_ms; /* 0: no limit */
	rc = store_client_connect(host, port, o->connect_timeout_ms, op_ms, out);
	if (rc == -EHOSTUNREACH && gai != 0 &&
	    store_addr_resolve(host, port, false, &ai, &gai) != 0) {
		*said = true;
		ddpstore_err("cannot connect to %s: the name '%s' does not resolve (%s)", *addr,
			     host, gai_strerror(gai));
		return rc;
	}
	if (rc == 0 && o->prefix)
		store_client_set_prefix(*out, o->prefix);
	return rc;
}

/* The same, or an exit status other than EXIT_OK after saying why. */
static int client_open(const struct ddpstore_opts *o, struct store_client **out)
{
	char buf[300];
	const char *addr;
	bool said;
	int rc = client_connect(o, buf, sizeof(buf), &addr, &said, out);

	if (said)
		return rc == -EHOSTUNREACH ? EXIT_CONN : EXIT_USAGE;
	if (rc < 0) {
		/* A 1.x server reads the 2.x handshake as a SET with a key
		 * length of about 1 GB and drops the connection. */
		if (rc == -ECONNRESET || rc == -EPIPE)
			ddpstore_err(
				"cannot connect to %s: the server closed the connection at the "
				"handshake: a PyTorch 1.x server, whose dialect ddpstore does "
				"not speak as a client, or one at its connection limit",
				addr);
		else
			ddpstore_err("cannot connect to %s: %s", addr, store_strerror(rc));
		return EXIT_CONN;
	}
	return EXIT_OK;
}

/* ---- option parsing ------------------------------------------------------------ */

enum optkind { O_STR, O_SECONDS, O_PORT, O_COUNT, O_FLAG };

struct optdef {
	const char *name;
	enum optkind kind;
	size_t off;
	bool serve_only, client_only;
	int64_t min, max; /* O_COUNT: its bounds (ddpstore(1)) */
};

#define OFF(f) offsetof(struct ddpstore_opts, f)
static const struct optdef optdefs[] = {
	{"addr", O_STR, OFF(addr), false, true, 0, 0},
	{"prefix", O_STR, OFF(prefix), false, true, 0, 0},
	{"timeout", O_SECONDS, OFF(timeout_ms), false, true, 0, 0},
	{"connect-timeout", O_SECONDS, OFF(connect_timeout_ms), false, true, 0, 0},
	{"wait", O_FLAG, OFF(wait), false, true, 0, 0},
	{"rdzv-id", O_STR, OFF(rdzv_id), false, true, 0, 0},
	{"host", O_STR, OFF(host), true, false, 0, 0},
	{"port", O_PORT, OFF(port), true, false, 0, 0},
	{"port-file", O_STR, OFF(port_file), true, false, 0, 0},
	{"max-conns", O_COUNT, OFF(max_conns), true, false, 1, SERVE_MAX_CONNS},
	{"max-key-len", O_COUNT, OFF(max_key_len), true, false, 1, SERVE_MAX_LEN},
	{"max-value-len", O_COUNT, OFF(max_value_len), true, false, SERVE_MIN_VALUE_LEN,
	 SERVE_MAX_LEN},
	{"max-multi-keys", O_COUNT, OFF(max_multi_keys), true, false, 1, INT64_MAX / 4},
	{"max-conn-buffer", O_COUNT, OFF(max_conn_buffer), true, false, 1, SERVE_MAX_CONN_BUFFER},
	{"quiet", O_FLAG, OFF(quiet), true, false, 0, 0},
};

static int set_opt(struct ddpstore_opts *o, const struct optdef *d, const char *val)
{
	char *base = (char *)o + d->off;

	switch (d->kind) {
	case O_STR:
		*(const char **)base = val;
		return 0;
	case O_SECONDS:
		return util_parse_seconds_ms(val, (int64_t *)base);
	case O_PORT:
		return util_parse_int(val, 0, UTIL_PORT_MAX, (int *)base);
	case O_COUNT:
		return util_parse_i64(val, d->min, d->max, (int64_t *)base);
	case O_FLAG:
		*(bool *)base = true;
		return 0;
	}
	return -EINVAL;
}

/* Split argv into options and positionals (pos[0] is the command); *info:
 * the text that --help or --version asks for, else NULL. */
static int parse_args(int argc, char **argv, struct ddpstore_opts *o, char **pos, int *npos,
		      const char **info)
{
	bool only_pos = false;
	const struct optdef *seen[sizeof(optdefs) / sizeof(optdefs[0])];
	int nseen = 0, i, rc;

	*npos = 0;
	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *eq, *val;
		size_t nl, k;
		const struct optdef *d = NULL;

		if (only_pos || strncmp(a, "--", 2) != 0 || a[2] == '\0') {
			if (!only_pos && strcmp(a, "--") == 0) {
				only_pos = true;
				continue;
			}
			if (!only_pos && strcmp(a, "-h") == 0) {
				*info = usage_text;
				continue;
			}
			pos[(*npos)++] = argv[i];
			continue;
		}
		if (strcmp(a, "--help") == 0) {
			*info = usage_text;
			continue;
		}
		if (strcmp(a, "--version") == 0) {
			*info = version_text; /* whatever follows */
			return 0;
		}
		eq = strchr(a, '=');
		nl = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
		for (k = 0; k < sizeof(optdefs) / sizeof(optdefs[0]); k++)
			if (strlen(optdefs[k].name) == nl &&
			    strncmp(optdefs[k].name, a + 2, nl) == 0)
				d = &optdefs[k];
		if (d == NULL)
			return usage_error("unknown option '%s'", a);
		if (d->kind == O_FLAG) {
			if (eq)
				return usage_error("option --%s takes no value", d->name);
			val = NULL;
		} else if (eq) {
			val = eq + 1;
		} else if (i + 1 < argc) {
			val = argv[++i];
		} else {
			return usage_error("option --%s needs a value", d->name);
		}
		rc = set_opt(o, d, val);
		if (rc < 0 && d->kind != O_STR) {
			/* Say what the option takes: a value in range but of
			 * the wrong form (and the reverse) reads alike. */
			int64_t lo = d->kind == O_COUNT ? d->min : 0,
				hi = d->kind == O_COUNT	 ? d->max
				     : d->kind == O_PORT ? UTIL_PORT_MAX
							 : UTIL_SECONDS_MAX;
			return usage_error("bad value '%s' for --%s (%s%s from %" PRId64
					   " to %" PRId64 ")",
					   val, d->name, rc == -ERANGE ? "out of range: " : "",
					   d->kind == O_SECONDS ? "a number of seconds"
					   : d->kind == O_PORT	? "a port"
								: "a number",
					   lo, hi);
		}
		if (rc < 0)
			return usage_error("bad value '%s' for --%s", val, d->name);
		seen[nseen++ % (int)(sizeof(seen) / sizeof(seen[0]))] = d;
	}
	if (*info)
		return 0;
	if (*npos == 0)
		return usage_error("no command given");
	for (i = 0; i < nseen && i < (int)(sizeof(seen) / sizeof(seen[0])); i++) {
		bool serve = strcmp(pos[0], "serve") == 0;

		if (serve && seen[i]->client_only)
			return usage_error("--%s is not an option of serve", seen[i]->name);
		if (!serve && seen[i]->serve_only)
			return usage_error("--%s is an option of serve only", seen[i]->name);
	}
	return 0;
}

/* ---- client commands ---------------------------------------------------------- */

int ddpstore_exit_for(int err)
{
	switch (err) {
	case -ETIMEDOUT:
		return EXIT_TIMEOUT;
	case -ENOENT:
		return EXIT_NOT_FOUND;
	case -ECONNREFUSED:
	case -ECONNRESET:
	case -EPIPE:
	case -EHOSTUNREACH:
	case -ENETUNREACH:
	case -ENOTCONN:
		return EXIT_CONN;
	default:
		return EXIT_ERROR;
	}
}

void ddpstore_err_unsupported(const char *what, const char *op)
{
	ddpstore_err("%s: the server closed the connection on %s: it may not support that "
		     "operation (an older PyTorch server: 2.6's lacks it, 2.14's has it)",
		     what, op);
}

static int fail_op(const char *what, int err)
{
	ddpstore_err("%s: %s", what, store_strerror(err));
	return ddpstore_exit_for(err);
}

/* VALUE argument: "-" reads stdin (binary-safe). */
static int read_value(const char *arg, void **val, size_t *len)
{
	size_t cap = 4096, n = 0;
	char *buf;

	if (strcmp(arg, "-") != 0) {
		*val = (void *)arg;
		*len = strlen(arg);
		return 0;
	}
	buf = malloc(cap);
	if (buf == NULL)
		return -ENOMEM;
	for (;;) {
		ssize_t r;

		if (n == cap) {
			char *nb;

			if (cap >= STORE_MAX_VALUE + 1) {
				free(buf);
				return -EMSGSIZE;
			}
			cap *= 2;
			nb = realloc(buf, cap);
			if (nb == NULL) {
				free(buf);
				return -ENOMEM;
			}
			buf = nb;
		}
		r = read(STDIN_FILENO, buf + n, cap - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int e = -errno;

			free(buf);
			return e;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	if (n > STORE_MAX_VALUE) {
		free(buf);
		return -EMSGSIZE;
	}
	*val = buf;
	*len = n;
	return 0;
}

/* read_value's error, said. The client sends no value past STORE_MAX_VALUE
 * (the clients refuse what a server of default limits would), whatever the
 * server's --max-value-len: so nothing raises it, and the line says none. */
static int fail_value(const char *what, int err)
{
	if (err != -EMSGSIZE)
		return fail_op("reading the value", err);
	ddpstore_err("%s: the value on standard input is longer than %d bytes (%d MiB), the most "
		     "ddpstore sends, whatever the server's --max-value-len",
		     what, STORE_MAX_VALUE, STORE_MAX_VALUE >> 20);
	return EXIT_ERROR;
}

static void free_value(const char *arg, void *val)
{
	if (strcmp(arg, "-") == 0)
		free(val);
}

static int stdout_failed(int err)
{
	ddpstore_err("cannot write to standard output: %s", strerror(err));
	return EXIT_ERROR;
}

/* A value, raw, past stdio. */
static int write_out(const void *p, size_t n)
{
	return util_write_all(STDOUT_FILENO, p, n) < 0 ? stdout_failed(errno) : EXIT_OK;
}

/* What went through stdio (--help, add's sum, keys, status) is written at the
 * latest here: a write that failed (a full disk) is said, and no success. */
static int stdout_done(int rc)
{
	if (fflush(stdout) != 0 || ferror(stdout)) {
		int e = stdout_failed(errno);

		return rc == EXIT_OK ? e : rc;
	}
	return rc;
}

struct cmd {
	const char *name;
	int min_args, max_args; /* -1: any number */
	int (*run)(struct store_client *c, const struct ddpstore_opts *o, char **a, int n);
};

/* set and append: KEY VALUE, no reply from the server, so a PING after it
 * makes sure it landed (a rejected request closes the connection). */
static int write_cmd(struct store_client *c, char **a, const char *name,
		     int (*op)(struct store_client *, const char *, const void *, size_t))
{
	void *v;
	size_t len;
	int rc = read_value(a[1], &v, &len);

	if (rc < 0)
		return fail_value(name, rc);
	rc = op(c, a[0], v, len);
	free_value(a[1], v);
	if (rc == 0)
		rc = store_client_ping(c);
	return rc < 0 ? fail_op(name, rc) : EXIT_OK;
}

static int cmd_set(struct store_client *c, const struct ddpstore_opts *o, char **a, int n)
{
	return write_cmd(c, a, "set", store_client_set);
}

static int cmd_append(struct store_client *c, const struct ddpstore_opts *o, char **a, int n)
{
	return write_cmd(c, a, "append", store_client_append);
}

static int cmd_get(struct store_client *c, const struct ddpstore_opts *o, char **a, int n)
{
	void *v;
	size_t len;
	int rc = o->wait ? store_client_get(c, a[0], &v, &len)
			 : store_client_try_get(c, a[0], &v, &len);

	if (rc == -ENOENT) {
		ddpstore_err("get: key '%s' not found", a[0]);
		return EXIT_NOT_FOUND;
	}
	if (rc == -ETIMEDOUT && o->wait) {
		ddpstore_err("get: timed out waiting for key '%s'", a[0]);
		return EXIT_TIMEOUT;
	}
	if (rc < 0)
		return fail_op("get", rc);
	rc = write_out(v, len);
	free(v);
	return rc;
}

/* The second connection that explains a closed one, and its request, wait
 * this long at most: a server that ended refuses it (or never answers), and
 * the script should hear so now, not after --connect-timeout; above one SYN
 * retransmit (1 s), which many callers closed at once may meet. */
#define EXPLAIN_MS 3000

/* ADD has no error reply: the server closes the connection when the value is
 * not a counter (a sum past int64 wraps, as in PyTorch's servers), as it
 * does when it ends. A second connection reads the value to say which
 * (unless it changed in between). A BARRIER that left no counter behind met
 * a server that does not know the operation (it closes on an unknown
 * opcode). */
void ddpstore_explain_reset(const struct ddpstore_opts *o, const char *what, const char *key)
{
	struct ddpstore_opts quick = *o;
	struct store_client *c;
	const char *addr;
	char buf[300];
	void *v = NULL;
	size_t len;
	int64_t cur;
	bool said;
	int rc;

	if (quick.connect_timeout_ms <= 0 || quick.connect_timeout_ms > EXPLAIN_MS)
		quick.connect_timeout_ms = EXPLAIN_MS;
	quick.timeout_ms = EXPLAIN_MS;
	if ((rc = client_connect(&quick, buf, sizeof(buf), &addr, &said, &c)) < 0) {
		if (rc == -ECONNREFUSED)
			ddpstore_err("%s: the server at %s closed the connection and refuses a "
				     "new one: has it ended?",
				     what, addr);
		else if (!said)
			ddpstore_err("%s: the server at %s closed the connection, and a new one "
				     "failed (%s)",
				     what, addr, store_strerror(rc));
		return;
	}
	rc = store_client_try_get(c, key, &v, &len);
	store_client_close(c);
	if (rc == -ENOENT && strcmp(what, "barrier") == 0) {
		ddpstore_err_unsupported(what, "BARRIER");
		return;
	}
	if (rc < 0) {
		ddpstore_err("%s: the server closed the connection", what);
		return;
	}
	rc = store_kv_parse_counter(v, len, &cur);
	if (rc == -EINVAL)
		ddpstore_err("%s: the server closed the connection: the value of '%s' is not "
			     "an integer",
			     what, key);
	else if (rc == -ERANGE)
		ddpstore_err("%s: the server closed the connection: the value of '%s' is out "
			     "of the int64 range",
			     what, key);
	else
		ddpstore_err("%s: the server closed the connection", what);
	free(v);
}

static int cmd_add(struct store_client *c, const struct ddpstore_opts *o, char **a, int n)
{
	int64_t delta, r;
	int rc = util_parse_i64(a[1], INT64_MIN, INT64_MAX, &delta);

	if (rc == -ERANGE)
		return usage_error("add: '%s' is out of range (N is an int64, from %" PRId64
				   " to %" PRId64 ")",
				   a[1], INT64_MIN, INT64_MAX);
	if (rc < 0)
		return usage_error("add: '%s' is not an integer", a[1]);
	rc = store_client_add(c, a[0], delta, &r);
	if (rc == -ECONNRESET || rc == -EPIPE) {
		ddpstore_explain_reset(o, "add", a[0]);
		return EXIT_CONN;
	}
	if (rc < 0)
		return fail_op("add", rc);
	printf("%" PRId64 "\n", r);
	return EXIT_OK;
}

static int cmd_cas(struct store_client *c, const struct ddpstore_opts *o, char **a, int n)
{
	void *des, *cur;
	size_t dlen, clen;
	int rc = read_value(a[2], &des, &dlen);
	bool swapped;

	if (rc < 0)
		return fail_value("cas", rc);
	rc = store_client_compare_set(c, a[0], a[1], strlen(a[1]), des, dlen, &cur, &clen);
	if (rc < 0) {
		free_value(a[2], des);
		return fail_op("cas", rc);
	}
	swapped = clen == dlen && memcmp(cur, des, dlen) == 0;
	free_value(a[2], des);
	rc = write_out(cur, clen);
	free(cur);
	return swapped ? rc : EXIT_CAS_FAILED; /* a failed write, said, is 1 for a success only */
}

static int cmd_check(struct store_client *c, const struct ddpstore_opts *o, char **a, int n)
{
	int rc = store_client_check(c, (const char *const *)a, (size_t)n);

	if (rc < 0)
		return fail_op("check", rc);
	return rc == 1 ? EXIT_OK : EXIT_NOT_FOUND;
}

static int cmd_wait(struct store_client *c, const struct ddpstore_opts *o, char **a, int n)
{
	int rc = store_client_wait(c, (const char *const *)a, (size_t)n, 0);

	if (rc == -ETIMEDOUT) {
		ddpstore_err("wait: timed out");
		return EXIT_TIMEOUT;
	}
	return rc < 0 ? fail_op("wait", rc) : EXIT_OK;
}

static int cmd_del(struct store_client *c, const struct ddpstore_opts *o, char **a, int n)
{
	int rc = store_client_delete(c, a[0]);

	if (rc < 0)
		return fail_op("del", rc);
	return rc == 1 ? EXIT_OK : EXIT_NOT_FOUND;
}

static int cmd_numkeys(struct store_client *c, const struct ddpstore_opts *o, char **a, int n)
{
	int64_t k;
	int rc = store_client_num_keys(c, &k);

	if (rc < 0)
		return fail_op("numkeys", rc);
	printf("%lld\n", (long long)k);
	return EXIT_OK;
}

static int cmd_ping(struct store_client *c, const struct ddpstore_opts *o, char **a, int n)
{
	int rc = store_client_ping(c);

	return rc < 0 ? fail_op("ping", rc) : EXIT_OK;
}

static const struct cmd cmds[] = {
	{"set", 2, 2, cmd_set},
	{"get", 1, 1, cmd_get},
	{"add", 2, 2, cmd_add},
	{"cas", 3, 3, cmd_cas},
	{"check", 1, -1, cmd_check},
	{"wait", 1, -1, cmd_wait},
	{"del", 1, 1, cmd_del},
	{"numkeys", 0, 0, cmd_numkeys},
	{"append", 2, 2, cmd_append},
	{"ping", 0, 0, cmd_ping},
	{"status", 0, 0, ddpstore_status},
};

#define NCMDS (sizeof(cmds) / sizeof(cmds[0]))

/* Commands that live in files of their own (ddpstore_sync.c). */
static const struct cmd more_cmds[] = {
	{"keys", 0, 1, ddpstore_cmd_keys},
	{"barrier", 2, 2, ddpstore_cmd_barrier},
};

static int run_client(const struct cmd *cmd, struct ddpstore_opts *o, char **args, int nargs)
{
	struct store_client *c;
	int rc = client_open(o, &c);

	if (rc != EXIT_OK)
		return rc;
	rc = cmd->run(c, o, args, nargs);
	store_client_close(c);
	return rc;
}

int main(int argc, char **argv)
{
	struct ddpstore_opts o;
	char **pos = calloc((size_t)argc + 1, sizeof(char *));
	const char *info = NULL;
	int npos = 0, rc;
	size_t i;

	if (pos == NULL)
		return EXIT_ERROR;
	memset(&o, 0, sizeof(o));
	o.timeout_ms = -1;
	o.connect_timeout_ms = DEFAULT_CONNECT_MS;
	o.port = -1;
	rc = parse_args(argc, argv, &o, pos, &npos, &info);
	if (info) {
		fputs(info, stdout);
		rc = EXIT_OK; /* as before: --help wins over a usage error after it */
		goto out;
	}
	if (rc != 0)
		goto out;
	if (strcmp(pos[0], "serve") == 0) {
		rc = npos == 1 ? ddpstore_serve(&o) : usage_error("serve takes no arguments");
		goto out;
	}
	for (i = 0; i < NCMDS + sizeof(more_cmds) / sizeof(more_cmds[0]); i++) {
		const struct cmd *cmd = i < NCMDS ? &cmds[i] : &more_cmds[i - NCMDS];
		int n = npos - 1;

		if (strcmp(pos[0], cmd->name) != 0)
			continue;
		if (n < cmd->min_args || (cmd->max_args >= 0 && n > cmd->max_args))
			rc = usage_error("%s: wrong number of arguments", cmd->name);
		else if (o.wait && strcmp(cmd->name, "get") != 0)
			rc = usage_error("--wait is an option of get only");
		else
			rc = run_client(cmd, &o, pos + 1, n);
		goto out;
	}
	rc = usage_error("unknown command '%s'", pos[0]);
out:
	free(pos);
	return stdout_done(rc);
}
