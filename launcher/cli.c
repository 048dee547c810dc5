/* cli: torchrun-compatible command line parsing (see cli.h). */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli_nodes.h"
#include "signame.h"
#include "store_server.h"
#include "util.h"

enum opt_id {
	O_NNODES,
	O_NPROC,
	O_RDZV_BACKEND,
	O_RDZV_ENDPOINT,
	O_RDZV_ID,
	O_RDZV_CONF,
	O_STANDALONE,
	O_MAX_RESTARTS,
	O_MONITOR_INTERVAL,
	O_START_METHOD,
	O_ROLE,
	O_MODULE,
	O_NO_PYTHON,
	O_RUN_PATH,
	O_LOG_DIR,
	O_REDIRECTS,
	O_TEE,
	O_LOCAL_RANKS_FILTER,
	O_NODE_RANK,
	O_MASTER_ADDR,
	O_MASTER_PORT,
	O_LOCAL_ADDR,
	O_SIGNALS,
	O_FORWARD_SIGNALS,
	O_SHUTDOWN_TIMEOUT,
	O_TAG_OUTPUT,
	O_HANG_TIMEOUT,
	O_EVENT_LOG_HANDLER,
	O_LOG_LINE_PREFIX,
	O_DUP_STDOUT,
	O_DUP_STDERR,
	O_LOGS_SPECS,
	O_NUMA_BINDING,
	O_VIRTUAL_LOCAL_RANK,
	O_PRINT_COMPLETION,
	O_HELP,
	O_VERSION,
	O_COUNT
};

/* name: the dash spelling (the underscore one is accepted by normalising);
 * env: PET_<NAME> unless the option has none. */
static const struct optdef {
	const char *name;
	char shortopt;
	bool flag;
	bool has_env;
	const char *def;
} opts[O_COUNT] = {
	[O_NNODES] = {"nnodes", 0, false, true, "1:1"},
	[O_NPROC] = {"nproc-per-node", 0, false, true, "1"},
	[O_RDZV_BACKEND] = {"rdzv-backend", 0, false, true, "static"},
	[O_RDZV_ENDPOINT] = {"rdzv-endpoint", 0, false, true, ""},
	[O_RDZV_ID] = {"rdzv-id", 0, false, true, "none"},
	[O_RDZV_CONF] = {"rdzv-conf", 0, false, true, ""},
	[O_STANDALONE] = {"standalone", 0, true, true, NULL},
	[O_MAX_RESTARTS] = {"max-restarts", 0, false, true, "0"},
	[O_MONITOR_INTERVAL] = {"monitor-interval", 0, false, true, "0.1"},
	[O_START_METHOD] = {"start-method", 0, false, true, "spawn"},
	[O_ROLE] = {"role", 0, false, true, "default"},
	[O_MODULE] = {"module", 'm', true, true, NULL},
	[O_NO_PYTHON] = {"no-python", 0, true, true, NULL},
	[O_RUN_PATH] = {"run-path", 0, true, true, NULL},
	[O_LOG_DIR] = {"log-dir", 0, false, true, NULL},
	[O_REDIRECTS] = {"redirects", 'r', false, true, "0"},
	[O_TEE] = {"tee", 't', false, true, "0"},
	[O_LOCAL_RANKS_FILTER] = {"local-ranks-filter", 0, false, true, ""},
	[O_NODE_RANK] = {"node-rank", 0, false, true, "0"},
	[O_MASTER_ADDR] = {"master-addr", 0, false, true, "127.0.0.1"},
	[O_MASTER_PORT] = {"master-port", 0, false, true, CLI_MASTER_PORT},
	[O_LOCAL_ADDR] = {"local-addr", 0, false, true, NULL},
	[O_SIGNALS] = {"signals-to-handle", 0, false, true, "SIGTERM,SIGINT,SIGHUP,SIGQUIT"},
	[O_FORWARD_SIGNALS] = {"forward-signals", 0, false, true, NULL},
	[O_SHUTDOWN_TIMEOUT] = {"shutdown-timeout", 0, false, true, NULL},
	[O_TAG_OUTPUT] = {"tag-output", 0, true, true, NULL},
	[O_HANG_TIMEOUT] = {"hang-timeout", 0, false, true, NULL},
	/* torchrun 2.x (cli_torch2.c); --logs-specs, --numa-binding and
	 * --print-completion have no PET_ variable there either. */
	[O_EVENT_LOG_HANDLER] = {"event-log-handler", 0, false, true, "null"},
	[O_LOG_LINE_PREFIX] = {"log-line-prefix-template", 0, false, true, NULL},
	[O_DUP_STDOUT] = {"duplicate-stdout-filters", 0, false, true, ""},
	[O_DUP_STDERR] = {"duplicate-stderr-filters", 0, false, true, ""},
	[O_LOGS_SPECS] = {"logs-specs", 0, false, false, NULL},
	[O_NUMA_BINDING] = {"numa-binding", 0, false, false, NULL},
	[O_VIRTUAL_LOCAL_RANK] = {"virtual-local-rank", 0, true, true, NULL},
	[O_PRINT_COMPLETION] = {"print-completion", 0, false, false, NULL},
	[O_HELP] = {"help", 'h', true, false, NULL},
	[O_VERSION] = {"version", 0, true, false, NULL},
};

/* Where a value came from, for error messages. */
struct raw {
	const char *val;
	const char *src; /* "--name", "-r" or "PET_NAME"; NULL: default */
	char envname[40];
};

struct parse {
	struct raw raw[O_COUNT];
	char *err;
	size_t errlen;
};

static int fail(struct parse *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct parse *p, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(p->err, p->errlen, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* "--nproc-per-node" for error messages about option i. */
static const char *src_of(struct parse *p, int i)
{
	return p->raw[i].src ? p->raw[i].src : "the default";
}

/* Whether option i's value came from its PET_ variable. */
static bool from_env(struct parse *p, int i)
{
	return p->raw[i].src != NULL && strncmp(p->raw[i].src, "PET_", 4) == 0;
}

/* What a time in seconds may be (util_parse_seconds_ms). */
#define SECONDS "a number of seconds from 0 to " UTIL_STR(UTIL_SECONDS_MAX)

/* expect: what option i takes, as a format, so that a bound it states is
 * the define its check enforces. */
static int bad_value(struct parse *p, int i, const char *expect, ...)
	__attribute__((format(printf, 3, 4)));

static int bad_value(struct parse *p, int i, const char *expect, ...)
{
	char what[200];
	va_list ap;

	va_start(ap, expect);
	vsnprintf(what, sizeof(what), expect, ap);
	va_end(ap);
	return fail(p, "invalid value '%.200s' for %s: expected %s", p->raw[i].val, src_of(p, i),
		    what);
}

/* Whether s[0..len) begins option i's name ('_' and '-' are the same). */
static bool long_prefix(const char *s, size_t len, int i)
{
	const char *n = opts[i].name;
	size_t k;

	for (k = 0; k < len && n[k] != '\0'; k++)
		if ((s[k] == '_' ? '-' : s[k]) != n[k])
			return false;
	return k == len;
}

/* ddprun's own options, which torchrun has not: a prefix that is unique
 * among torchrun's (--t, --tee) means the same here, though one of these
 * shares it (--tag-output). */
static bool ours(int i)
{
	return i == O_FORWARD_SIGNALS || i == O_TAG_OUTPUT || i == O_HANG_TIMEOUT || i == O_VERSION;
}

/* Find the long option named by s[0..len) (a unique prefix is enough, as
 * with argparse, among torchrun's options first). -1 unknown, -2 ambiguous. */
static int find_long(const char *s, size_t len)
{
	int found = -1, theirs = -1;
	int i;

	for (i = 0; i < O_COUNT; i++) {
		if (!long_prefix(s, len, i))
			continue;
		if (opts[i].name[len] == '\0')
			return i; /* exact */
		if (!ours(i))
			theirs = theirs == -1 ? i : -2;
		found = found == -1 ? i : -2;
	}
	return found == -2 && theirs >= 0 ? theirs : found;
}

/* An ambiguous prefix, with the options it could be (argparse names them). */
static int fail_ambiguous(struct parse *p, const char *s, size_t len)
{
	enum { SHOWN = 8 }; /* a short prefix matches most of them */
	char list[512] = "";
	size_t n = 0;
	int i, k = 0;

	for (i = 0; i < O_COUNT; i++)
		if (long_prefix(s, len, i) && k++ < SHOWN)
			n += (size_t)snprintf(list + n, sizeof(list) - n, "%s--%s",
					      n > 0 ? ", " : "", opts[i].name);
	if (k > SHOWN)
		return fail(p, "ambiguous option '%.*s' (it could be %s, or %d more)", (int)len + 2,
			    s - 2, list, k - SHOWN);
	return fail(p, "ambiguous option '%.*s' (it could be %s)", (int)len + 2, s - 2, list);
}

/* An unknown long option s ("--name", len the name's length); one that is
 * a rendezvous setting (--join-timeout) says where that goes. */
static int fail_unknown(struct parse *p, const char *s, size_t len)
{
	char key[40];
	size_t i;

	for (i = 0; i < len && i + 1 < sizeof(key); i++)
		key[i] = s[2 + i] == '-' ? '_' : (char)tolower((unsigned char)s[2 + i]);
	key[i] = '\0';
	if (i == len && rdzv_conf_has_key(key))
		return fail(p,
			    "unrecognized option '%.*s' (a rendezvous setting: --rdzv-conf %s=...)",
			    (int)len + 2, s, key);
	return fail(p, "unrecognized option '%.*s'", (int)len + 2, s);
}

static int find_short(char c)
{
	int i;

	for (i = 0; i < O_COUNT; i++)
		if (opts[i].shortopt == c)
			return i;
	return -1;
}

/* The value attached to short option s ("-r3"), or NULL. As argparse, one
 * '=' after the letter separates it ("-r=3" is 3, "-r==3" is "=3"); a flag
 * given either form is refused by the caller ("-m=1", as argparse's
 * "ignored explicit argument"). */
static const char *short_value(const char *s)
{
	if (s[2] == '\0')
		return NULL;
	return s[2] == '=' ? s + 3 : s + 2;
}

/* argparse refuses a value that looks like an option (but not a negative number). */
static bool looks_like_option(const char *s)
{
	return s[0] == '-' && s[1] != '\0' && !isdigit((unsigned char)s[1]);
}

static void env_name(int i, char *buf, size_t len)
{
	size_t k = 0;
	const char *n = opts[i].name;

	k = (size_t)snprintf(buf, len, "PET_");
	for (; *n != '\0' && k + 1 < len; n++)
		buf[k++] = *n == '-' ? '_' : (char)toupper((unsigned char)*n);
	buf[k] = '\0';
}

static void load_env(struct parse *p, const char *(*getenv_fn)(const char *))
{
	int i;

	for (i = 0; i < O_COUNT; i++) {
		const char *v;

		p->raw[i].val = opts[i].def;
		p->raw[i].src = NULL;
		if (!opts[i].has_env)
			continue;
		env_name(i, p->raw[i].envname, sizeof(p->raw[i].envname));
		v = getenv_fn(p->raw[i].envname);
		if (v != NULL) {
			p->raw[i].val = v;
			p->raw[i].src = p->raw[i].envname;
		}
	}
}

static void set_raw(struct parse *p, int i, const char *val)
{
	p->raw[i].val = val;
	/* Errors name the option in its dash spelling, not the token. */
	snprintf(p->raw[i].envname, sizeof(p->raw[i].envname), "--%s", opts[i].name);
	p->raw[i].src = p->raw[i].envname;
}

/* Walk argv up to the program. Returns the program's index or a negative
 * errno (-EINVAL), or argc + 1 / argc + 2 for --help / --version. */
static int scan_argv(struct parse *p, int argc, char **argv)
{
	int a, took = -1; /* the option whose value was the last word */

	for (a = 1; a < argc; a++) {
		const char *s = argv[a];
		const char *val = NULL;
		int i;

		if (strcmp(s, "--") == 0)
			return a + 1;
		if (s[0] != '-' || s[1] == '\0')
			return a;
		if (s[1] == '-') {
			const char *eq = strchr(s + 2, '=');
			size_t len = eq ? (size_t)(eq - s - 2) : strlen(s + 2);

			i = find_long(s + 2, len);
			if (i == -2)
				return fail_ambiguous(p, s + 2, len);
			if (i < 0)
				return fail_unknown(p, s, len);
			if (eq != NULL)
				val = eq + 1;
		} else {
			i = find_short(s[1]);
			if (i < 0)
				return fail(p, "unrecognized option '%.200s'", s);
			/* As argparse, a flag's letter may run on into the next
			 * short option: "-mr3" is -m -r3, "-mh" is -m -h. */
			while (opts[i].flag && s[2] != '\0' && find_short(s[2]) >= 0) {
				if (i == O_HELP)
					return argc + 1;
				set_raw(p, i, "1");
				s++;
				i = find_short(s[1]);
			}
			val = short_value(s);
		}
		if (opts[i].flag) {
			/* --help=1 too, as argparse: a value is never ignored. */
			if (val != NULL)
				return fail(p, "option --%s takes no value", opts[i].name);
			val = "1";
		} else if (val == NULL) {
			if (a + 1 >= argc || looks_like_option(argv[a + 1]))
				return fail(p, "option --%s expects a value", opts[i].name);
			val = argv[++a];
			if (a == argc - 1)
				took = i;
		}
		if (i == O_HELP)
			return argc + 1;
		if (i == O_VERSION)
			return argc + 2;
		/* torchrun prints a script (with the optional shtab) and exits. */
		if (i == O_PRINT_COMPLETION)
			return fail(p, "--print-completion: ddprun has no shell completion script");
		set_raw(p, i, val);
	}
	/* `ddprun -r /bin/true`: the program went to the option. */
	if (took >= 0)
		return fail(p, "missing the program to run (%s took '%.200s' as its value)",
			    argv[argc - 2][1] == '-' ? p->raw[took].src : argv[argc - 2],
			    argv[argc - 1]);
	return fail(p, "missing the program to run");
}

/* Python's int(s[0..len)) in [min, max], as torchrun reads each item of
 * --local-ranks-filter: white space around it, a sign, leading zeros and
 * single '_' between digits ("1_0" is 10) are allowed. int()'s non-ASCII
 * digits and white space are not. 0, -EINVAL or -ERANGE. */
static int py_int(const char *s, size_t len, int min, int max, int *out)
{
	int64_t v = 0;
	bool neg = false;
	size_t i;

	while (len > 0 && isspace((unsigned char)*s)) {
		s++;
		len--;
	}
	while (len > 0 && isspace((unsigned char)s[len - 1]))
		len--;
	if (len > 0 && (*s == '+' || *s == '-')) {
		neg = *s == '-';
		s++;
		len--;
	}
	if (len == 0)
		return -EINVAL;
	for (i = 0; i < len; i++) {
		if (s[i] == '_' && i > 0 && i + 1 < len && isdigit((unsigned char)s[i - 1]) &&
		    isdigit((unsigned char)s[i + 1]))
			continue;
		if (!isdigit((unsigned char)s[i]))
			return -EINVAL;
		if (v <= INT32_MAX) /* past it, out of range whatever follows */
			v = v * 10 + (s[i] - '0');
	}
	if (neg)
		v = -v;
	if (v < min || v > max)
		return -ERANGE;
	*out = (int)v;
	return 0;
}

/* A whole string read as Python's int(): torchrun reads every integer
 * option so (argparse's type=int, int(PET_X), int() of --nnodes' parts and
 * of --nproc-per-node). */
static int py_int_str(const char *s, int min, int max, int *out)
{
	return py_int(s, strlen(s), min, max, out);
}

static int parse_flag(struct parse *p, int i, bool *out)
{
	int v;

	if (p->raw[i].val == NULL) {
		*out = false;
		return 0;
	}
	/* torchrun: bool(int(PET_X)), of any size: past int's range it is not 0. */
	switch (py_int_str(p->raw[i].val, INT32_MIN, INT32_MAX, &v)) {
	case 0:
		*out = v != 0;
		return 0;
	case -ERANGE:
		*out = true;
		return 0;
	default:
		return bad_value(p, i, "an integer (0: off, any other: on)");
	}
}

static int bad_nnodes(struct parse *p)
{
	return bad_value(p, O_NNODES, "N or MIN:MAX with 1 <= MIN <= MAX <= %d", CLI_MAX_NODES);
}

static int parse_nnodes(struct parse *p, struct cli_opts *o)
{
	const char *v = p->raw[O_NNODES].val;
	const char *colon = strchr(v, ':');
	char buf[32];

	if (colon == NULL) {
		if (py_int_str(v, 1, CLI_MAX_NODES, &o->min_nodes) != 0)
			return bad_nnodes(p);
		o->max_nodes = o->min_nodes;
		return 0;
	}
	if ((size_t)(colon - v) >= sizeof(buf))
		return bad_nnodes(p);
	memcpy(buf, v, (size_t)(colon - v));
	buf[colon - v] = '\0';
	if (py_int_str(buf, 1, CLI_MAX_NODES, &o->min_nodes) != 0 ||
	    py_int_str(colon + 1, 1, CLI_MAX_NODES, &o->max_nodes) != 0 ||
	    o->min_nodes > o->max_nodes)
		return bad_nnodes(p);
	return 0;
}

static int parse_nproc(struct parse *p, struct cli_opts *o)
{
	const char *v = p->raw[O_NPROC].val;

	o->nproc = 0;
	if (strcmp(v, "gpu") == 0)
		o->nproc_kind = CLI_NPROC_GPU;
	else if (strcmp(v, "cpu") == 0)
		o->nproc_kind = CLI_NPROC_CPU;
	else if (strcmp(v, "auto") == 0)
		o->nproc_kind = CLI_NPROC_AUTO;
	else if (py_int_str(v, 1, CLI_MAX_NPROC, &o->nproc) == 0)
		o->nproc_kind = CLI_NPROC_NUM;
	else
		return bad_value(p, O_NPROC, "an integer from 1 to %d, gpu, cpu or auto",
				 CLI_MAX_NPROC);
	return 0;
}

int cli_std_parse(const char *s, struct cli_std *out)
{
	struct cli_std st = {.all = -1};
	const char *q = s;

	if (s[0] >= '0' && s[0] <= '3' && s[1] == '\0') {
		out->all = s[0] - '0';
		out->map = NULL;
		out->nmap = 0;
		return 0;
	}
	/* "lr:code[,lr:code]..." */
	while (*q != '\0') {
		const char *colon = strchr(q, ':');
		char num[16];
		int lr;

		if (colon == NULL || colon == q || (size_t)(colon - q) >= sizeof(num))
			goto fail;
		memcpy(num, q, (size_t)(colon - q));
		num[colon - q] = '\0';
		if (!isdigit((unsigned char)num[0]) ||
		    util_parse_int(num, 0, CLI_MAX_NPROC - 1, &lr) != 0)
			goto fail;
		if (colon[1] < '0' || colon[1] > '3' || (colon[2] != ',' && colon[2] != '\0'))
			goto fail;
		if (lr >= st.nmap) {
			int *m = realloc(st.map, (size_t)(lr + 1) * sizeof(*m));

			if (m == NULL)
				goto fail;
			memset(m + st.nmap, 0, (size_t)(lr + 1 - st.nmap) * sizeof(*m));
			st.map = m;
			st.nmap = lr + 1;
		}
		st.map[lr] = colon[1] - '0';
		q = colon + 2;
		if (*q == ',') {
			q++;
			if (*q == '\0')
				goto fail;
		}
	}
	if (st.nmap == 0)
		goto fail;
	*out = st;
	return 0;
fail:
	free(st.map);
	return -EINVAL;
}

int cli_std_get(const struct cli_std *s, int local_rank)
{
	if (s->all >= 0)
		return s->all;
	return local_rank >= 0 && local_rank < s->nmap ? s->map[local_rank] : CLI_STD_NONE;
}

/* torchrun: set(map(int, s.split(","))); "" shows every rank. A rank
 * named twice is kept once, so the list never outgrows CLI_MAX_NPROC. */
static int parse_ranks_filter(struct parse *p, struct cli_opts *o)
{
	const char *q = p->raw[O_LOCAL_RANKS_FILTER].val;

	if (q[0] == '\0')
		return 0;
	o->ranks_filter = calloc(CLI_MAX_NPROC, sizeof(int));
	if (o->ranks_filter == NULL)
		return fail(p, "out of memory");
	for (;;) {
		const char *comma = strchr(q, ',');
		size_t len = comma ? (size_t)(comma - q) : strlen(q);
		int lr;

		if (py_int(q, len, 0, CLI_MAX_NPROC - 1, &lr) != 0)
			return bad_value(p, O_LOCAL_RANKS_FILTER,
					 "a comma-separated list of local ranks from 0 to %d",
					 CLI_MAX_NPROC - 1);
		if (!cli_ranks_have(o->ranks_filter, o->nranks_filter, lr))
			o->ranks_filter[o->nranks_filter++] = lr;
		if (comma == NULL)
			return 0;
		q = comma + 1;
	}
}

bool cli_ranks_have(const int *filter, int n, int local_rank)
{
	int i;

	if (filter == NULL)
		return true;
	for (i = 0; i < n; i++)
		if (filter[i] == local_rank)
			return true;
	return false;
}

bool cli_rank_shown(const struct cli_opts *o, int local_rank)
{
	return cli_ranks_have(o->ranks_filter, o->nranks_filter, local_rank);
}

/* The signal list of option i into sigs[0..*n): torchrun's exact names for
 * --signals-to-handle, also USR1, usr1 and numbers for ddprun's own. */
static int parse_signals(struct parse *p, int i, int *sigs, int *n)
{
	const char *q = p->raw[i].val;
	bool loose = i != O_SIGNALS;

	*n = 0;
	if (q == NULL)
		return 0;
	for (;;) {
		const char *comma = strchr(q, ',');
		size_t len = comma ? (size_t)(comma - q) : strlen(q);
		char name[24];
		int sig, k;

		while (len > 0 && *q == ' ') { /* torchrun strips spaces */
			q++;
			len--;
		}
		while (len > 0 && q[len - 1] == ' ')
			len--;
		if (len == 0 || len >= sizeof(name))
			return bad_value(p, i, "a comma-separated list like SIGTERM,SIGUSR1");
		memcpy(name, q, len);
		name[len] = '\0';
		sig = loose ? signame_to_num_loose(name) : signame_to_num(name);
		if (sig < 0)
			return fail(p, "unknown signal '%s' in %s", name, src_of(p, i));
		if (!signame_forwardable(sig))
			return fail(p, "signal %s in %s cannot be handled and forwarded", name,
				    src_of(p, i));
		for (k = 0; k < *n && sigs[k] != sig; k++)
			;
		if (k == *n) {
			if (*n == CLI_MAX_SIGNALS)
				return bad_value(p, i, "at most %d signals", CLI_MAX_SIGNALS);
			sigs[(*n)++] = sig;
		}
		if (comma == NULL)
			return 0;
		q = comma + 1;
	}
}

/* A signal named by both lists is forwarded and stops nothing (ddprun(1),
 * SIGNALS): --forward-signals is the more specific request. */
static void cli_fwd_wins(struct cli_opts *o)
{
	int i, k, n = 0;

	for (i = 0; i < o->nsignals; i++) {
		for (k = 0; k < o->nfwd_signals && o->fwd_signals[k] != o->signals[i]; k++)
			;
		if (k == o->nfwd_signals)
			o->signals[n++] = o->signals[i];
	}
	o->nsignals = n;
}

/* SIGINT stops the job gracefully even when --signals-to-handle leaves it
 * out, as torchrun's KeyboardInterrupt still shuts its workers down with
 * SIGTERM; unless --forward-signals names it. */
static void cli_keep_sigint(struct cli_opts *o)
{
	int i;

	for (i = 0; i < o->nsignals && o->signals[i] != SIGINT; i++)
		;
	for (int k = 0; k < o->nfwd_signals && i == o->nsignals; k++)
		if (o->fwd_signals[k] == SIGINT)
			return;
	if (i == o->nsignals && o->nsignals < CLI_MAX_SIGNALS)
		o->signals[o->nsignals++] = SIGINT;
}

static int parse_rdzv_conf(struct parse *p, struct cli_opts *o)
{
	char why[400];

	rdzv_conf_default(&o->rdzv);
	/* why names --rdzv-conf: only another source is said. */
	if (rdzv_conf_parse(p->raw[O_RDZV_CONF].val, &o->rdzv, why, sizeof(why)) != 0)
		return from_env(p, O_RDZV_CONF)
			       ? fail(p, "%s (from %s)", why, src_of(p, O_RDZV_CONF))
			       : fail(p, "%s", why);
	return 0;
}

/* torchrun 2.x's additions (cli_torch2.c does the work). */
static int parse_torch2(struct parse *p, struct cli_opts *o)
{
	struct raw *r = p->raw;

	o->signals_to_handle = r[O_SIGNALS].val;
	o->event_log_handler = r[O_EVENT_LOG_HANDLER].val;
	if (!cli_event_handler_known(o->event_log_handler))
		return bad_value(p, O_EVENT_LOG_HANDLER, "null, console or dynamic_rendezvous");
	o->log_line_prefix = r[O_LOG_LINE_PREFIX].val;
	o->logs_specs = r[O_LOGS_SPECS].val;
	if (r[O_NUMA_BINDING].val != NULL &&
	    cli_numa_mode_parse(r[O_NUMA_BINDING].val, &o->numa_binding) != 0)
		return bad_value(p, O_NUMA_BINDING, "node, socket, exclusive or core-complex");
	for (int s = 0; s < 2; s++) {
		int i = s == 0 ? O_DUP_STDOUT : O_DUP_STDERR;
		int rc = cli_filters_parse(r[i].val, &o->dup_filters[s]);

		if (rc == -EINVAL)
			return bad_value(p, i,
					 "substrings separated by commas, none empty (an empty one "
					 "would match every line; ',,' is a comma)");
		if (rc != 0)
			return fail(p, "out of memory");
	}
	return 0;
}

/* Option i's value as a host (an IPv6 address bare or in brackets, as
 * torchrun takes it) into host[len]; a port is a usage error that says whose
 * it is ("host:port" would have been passed over), a comma too (it would make
 * a list of hosts to the store's server). */
static int parse_host(struct parse *p, int i, char *host, size_t len, const char *port_is)
{
	int port;

	if (util_parse_hostport(p->raw[i].val, host, len, -1, &port) != 0 || host[0] == '\0' ||
	    strchr(host, ',') != NULL)
		return bad_value(p, i, "a host name or address");
	if (port != -1)
		return bad_value(p, i, "a host without a port (%s)", port_is);
	return 0;
}

/* torchrun's get_rdzv_endpoint: a static job given --rdzv-endpoint HOST:PORT
 * meets there, in place of --master-addr and --master-port. */
static int static_endpoint(struct parse *p, struct cli_opts *o)
{
	struct raw *r = p->raw;
	int port;

	if (o->rdzv_endpoint[0] == '\0' || o->standalone)
		return 0;
	/* c10d's endpoint is read when the rendezvous starts: a bad one is a
	 * usage error all the same, said here. */
	if (strcmp(o->rdzv_backend, "static") != 0) {
		char host[256];

		if (util_parse_endpoint(o->rdzv_endpoint, host, sizeof(host), CLI_RDZV_PORT,
					&port) != 0 ||
		    host[0] == '\0')
			return bad_value(p, O_RDZV_ENDPOINT, "HOST[:PORT], a port from 0 to %d",
					 CLI_MAX_PORT);
		return 0;
	}
	if (util_parse_endpoint(o->rdzv_endpoint, o->endpoint_host, sizeof(o->endpoint_host), -1,
				&port) != 0 ||
	    o->endpoint_host[0] == '\0')
		return bad_value(p, O_RDZV_ENDPOINT, "HOST:PORT");
	if (port == -1)
		return bad_value(p, O_RDZV_ENDPOINT,
				 "HOST:PORT (a static rendezvous needs the port, as torchrun's)");
	o->master_addr = r[O_MASTER_ADDR].val = o->endpoint_host;
	r[O_MASTER_ADDR].src = src_of(p, O_RDZV_ENDPOINT);
	o->master_port = port;
	r[O_MASTER_PORT].src = src_of(p, O_RDZV_ENDPOINT);
	o->master_port_given = true;
	o->master_port_src = from_env(p, O_RDZV_ENDPOINT) ? "PET_RDZV_ENDPOINT" : "--rdzv-endpoint";
	return 0;
}

/* A node that runs alone hosts its store on a free port of this machine,
 * as torchrun's --standalone (c10d at localhost:0) does, which never reads
 * the master address, port or node rank: their PET_ variables (a Kubeflow
 * pod exports them all) are passed over, the options noted for a warning. */
static const int not_alone[] = {O_MASTER_ADDR, O_MASTER_PORT, O_NODE_RANK};

static void run_alone(struct parse *p, struct cli_opts *o)
{
	size_t i, n = 0;

	for (i = 0; i < sizeof(not_alone) / sizeof(not_alone[0]); i++)
		if (p->raw[not_alone[i]].src != NULL && !from_env(p, not_alone[i]))
			n += (size_t)snprintf(o->ignored + n, sizeof(o->ignored) - n, "%s--%s",
					      n > 0 ? ", " : "", opts[not_alone[i]].name);
	o->master_addr = opts[O_MASTER_ADDR].def;
	o->master_port = 0;
	o->master_port_given = false;
}

static int parse_values(struct parse *p, struct cli_opts *o, const char *(*getenv_fn)(const char *))
{
	struct raw *r = p->raw;
	struct cli_given given;
	char host[256];
	const char *to;
	int rc;

	if ((rc = parse_nnodes(p, o)) != 0 || (rc = parse_nproc(p, o)) != 0 ||
	    (rc = parse_flag(p, O_STANDALONE, &o->standalone)) != 0)
		return rc;
	/* --standalone reads no master address, port or node rank: what their
	 * PET_ variables hold is not even checked (run_alone). */
	if (o->standalone)
		for (size_t k = 0; k < sizeof(not_alone) / sizeof(not_alone[0]); k++)
			if (from_env(p, not_alone[k])) {
				r[not_alone[k]].val = opts[not_alone[k]].def;
				r[not_alone[k]].src = NULL;
			}
	/* (raw's names live in p, which ends here: the job keeps these) */
	o->nnodes_from = from_env(p, O_NNODES) ? "PET_NNODES" : NULL;
	o->node_rank_from = from_env(p, O_NODE_RANK) ? "PET_NODE_RANK" : NULL;
	if (py_int_str(r[O_NODE_RANK].val, 0, CLI_MAX_NODES - 1, &o->node_rank) != 0)
		return bad_value(p, O_NODE_RANK, "an integer from 0 to %d (below --nnodes)",
				 CLI_MAX_NODES - 1);
	o->master_addr = r[O_MASTER_ADDR].val;
	if ((rc = parse_host(p, O_MASTER_ADDR, host, sizeof(host),
			     "--master-port gives the port")) != 0)
		return rc;
	if (py_int_str(r[O_MASTER_PORT].val, 0, CLI_MAX_PORT, &o->master_port) != 0)
		return bad_value(p, O_MASTER_PORT, "a port number from 0 to %d", CLI_MAX_PORT);
	o->master_port_given = r[O_MASTER_PORT].src != NULL;
	o->master_port_src = from_env(p, O_MASTER_PORT) ? "PET_MASTER_PORT" : "--master-port";
	o->rdzv_backend = r[O_RDZV_BACKEND].val;
	if (strcmp(o->rdzv_backend, "static") != 0 && strcmp(o->rdzv_backend, "c10d") != 0)
		return bad_value(p, O_RDZV_BACKEND, "static or c10d");
	o->rdzv_endpoint = r[O_RDZV_ENDPOINT].val;
	if ((rc = parse_flag(p, O_STANDALONE, &o->standalone)) != 0 ||
	    (rc = static_endpoint(p, o)) != 0)
		return rc;
	o->rdzv_id = r[O_RDZV_ID].val;
	if (o->rdzv_id[0] == '\0')
		return bad_value(p, O_RDZV_ID, "a non-empty id");
	o->rdzv_conf = r[O_RDZV_CONF].val;
	if ((rc = parse_rdzv_conf(p, o)) != 0)
		return rc;
	if (py_int_str(r[O_MAX_RESTARTS].val, 0, CLI_MAX_RESTARTS, &o->max_restarts) != 0)
		return bad_value(p, O_MAX_RESTARTS, "an integer from 0 to %d", CLI_MAX_RESTARTS);
	if (util_parse_seconds_ms(r[O_MONITOR_INTERVAL].val, &o->monitor_interval_ms) != 0)
		return bad_value(p, O_MONITOR_INTERVAL, SECONDS);
	o->start_method = r[O_START_METHOD].val;
	if (strcmp(o->start_method, "spawn") != 0 && strcmp(o->start_method, "fork") != 0 &&
	    strcmp(o->start_method, "forkserver") != 0)
		return bad_value(p, O_START_METHOD, "spawn, fork or forkserver");
	o->role = r[O_ROLE].val; /* "" too, as torchrun takes it (ROLE_NAME empty) */
	if ((rc = parse_flag(p, O_STANDALONE, &o->standalone)) != 0 ||
	    (rc = parse_flag(p, O_MODULE, &o->module)) != 0 ||
	    (rc = parse_flag(p, O_NO_PYTHON, &o->no_python)) != 0 ||
	    (rc = parse_flag(p, O_RUN_PATH, &o->run_path)) != 0 ||
	    (rc = parse_flag(p, O_TAG_OUTPUT, &o->tag_output)) != 0 ||
	    (rc = parse_flag(p, O_VIRTUAL_LOCAL_RANK, &o->virtual_local_rank)) != 0 ||
	    (rc = parse_torch2(p, o)) != 0)
		return rc;
	/* Empty is unset, as torchrun's `if not log_dir`: a temporary one. */
	o->log_dir = r[O_LOG_DIR].val;
	if (o->log_dir != NULL && o->log_dir[0] == '\0')
		o->log_dir = NULL;
	if (cli_std_parse(r[O_REDIRECTS].val, &o->redirects) != 0)
		return bad_value(p, O_REDIRECTS, "0-3 or LOCAL_RANK:0-3[,...]");
	if (cli_std_parse(r[O_TEE].val, &o->tee) != 0)
		return bad_value(p, O_TEE, "0-3 or LOCAL_RANK:0-3[,...]");
	/* /dev/null as it is spelt (torchrun 2.x compares it with os.devnull):
	 * no logs at all. No directory is made; the workers' output stays on
	 * the console whatever -r/-t say, and their TORCHELASTIC_ERROR_FILE is
	 * empty. */
	if (o->log_dir != NULL && strcmp(o->log_dir, "/dev/null") == 0) {
		o->log_dir = NULL;
		o->logs_off = true;
		free(o->redirects.map);
		free(o->tee.map);
		o->redirects = o->tee = (struct cli_std){.all = CLI_STD_NONE};
	}
	if ((rc = parse_ranks_filter(p, o)) != 0 ||
	    (rc = parse_signals(p, O_SIGNALS, o->signals, &o->nsignals)) != 0 ||
	    (rc = parse_signals(p, O_FORWARD_SIGNALS, o->fwd_signals, &o->nfwd_signals)) != 0)
		return rc;
	cli_fwd_wins(o);
	cli_keep_sigint(o);
	/* Empty is unset, as torchrun's `if local_addr` (the address of the
	 * connection to the store), not an empty address for the others. */
	o->local_addr = r[O_LOCAL_ADDR].val;
	if (o->local_addr != NULL && o->local_addr[0] == '\0')
		o->local_addr = NULL;
	if (o->local_addr != NULL) {
		rc = parse_host(p, O_LOCAL_ADDR, o->local_host, sizeof(o->local_host),
				"ddprun picks the port");
		if (rc != 0)
			return rc;
		o->local_addr = o->local_host;
	}
	if (store_server_io_parse(getenv_fn("DDP_STORE_IO"), &o->store_io) < 0)
		return fail(p, "bad DDP_STORE_IO '%s' (auto, uring or uv)",
			    getenv_fn("DDP_STORE_IO"));
	/* --shutdown-timeout, PET_SHUTDOWN_TIMEOUT, TORCH_ELASTIC_SHUTDOWN_TIMEOUT, 30 s */
	to = r[O_SHUTDOWN_TIMEOUT].val;
	if (to == NULL && (to = getenv_fn("TORCH_ELASTIC_SHUTDOWN_TIMEOUT")) != NULL) {
		r[O_SHUTDOWN_TIMEOUT].val = to;
		r[O_SHUTDOWN_TIMEOUT].src = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT";
	}
	o->shutdown_timeout_ms = CLI_SHUTDOWN_TIMEOUT_MS;
	if (to != NULL && util_parse_seconds_ms(to, &o->shutdown_timeout_ms) != 0)
		return bad_value(p, O_SHUTDOWN_TIMEOUT, SECONDS);
	/* --hang-timeout SEC (hang.h); 0 or unset: off */
	if (r[O_HANG_TIMEOUT].val != NULL &&
	    util_parse_seconds_ms(r[O_HANG_TIMEOUT].val, &o->hang_timeout_ms) != 0)
		return bad_value(p, O_HANG_TIMEOUT, SECONDS);
	/* torchrun: --run-path runs the path, whatever -m and --no-python say */
	if (o->module && o->no_python && !o->run_path)
		return fail(p, "--module and --no-python cannot be used together");
	given.nnodes = r[O_NNODES].src != NULL;
	given.node_rank = r[O_NODE_RANK].src != NULL;
	given.master_addr = r[O_MASTER_ADDR].src != NULL;
	given.rdzv_id = r[O_RDZV_ID].src != NULL;
	if ((rc = cli_nodes_resolve(o, &given, getenv_fn, p->err, p->errlen)) != 0)
		return rc;
	if (cli_runs_alone(o))
		run_alone(p, o);
	return 0;
}

int cli_parse(int argc, char **argv, const char *(*getenv_fn)(const char *name), struct cli_opts *o,
	      char *err, size_t errlen)
{
	struct parse p = {.err = err, .errlen = errlen};
	int prog, rc;

	memset(o, 0, sizeof(*o));
	o->redirects.all = o->tee.all = 0;
	if (errlen > 0)
		err[0] = '\0';
	load_env(&p, getenv_fn);
	prog = scan_argv(&p, argc, argv);
	if (prog == argc + 1)
		return CLI_HELP;
	if (prog == argc + 2)
		return CLI_VERSION;
	if (prog < 0)
		rc = prog;
	else if (prog >= argc)
		rc = fail(&p, "missing the program to run");
	else
		rc = parse_values(&p, o, getenv_fn);
	if (rc != 0) {
		cli_free(o);
		/* One line, though it quotes what was given ("--x\n"). */
		if (errlen > 0)
			util_one_line(err);
		return rc;
	}
	o->prog_argv = argv + prog;
	o->prog_argc = argc - prog;
	return CLI_OK;
}

void cli_free(struct cli_opts *o)
{
	free(o->redirects.map);
	free(o->tee.map);
	free(o->ranks_filter);
	cli_filters_free(&o->dup_filters[0]);
	cli_filters_free(&o->dup_filters[1]);
	o->redirects.map = o->tee.map = NULL;
	o->ranks_filter = NULL;
}
