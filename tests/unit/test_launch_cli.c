/* Unit tests for launcher/cli.c: torchrun's flags, both spellings, PET_*
 * defaults, Slurm's defaults for the node options, --rdzv-conf, and one
 * clear message for every malformed command line; and what job_from_opts
 * (launcher/job.c) resolves from the options for the agent and the
 * coordinator. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "rdzv_msg.h"
#include "job.h"

/* A fake environment for getenv_fn. */
static const char *fake_env[16][2];

static const char *fake_getenv(const char *name)
{
	int i;

	for (i = 0; i < 16 && fake_env[i][0] != NULL; i++)
		if (strcmp(fake_env[i][0], name) == 0)
			return fake_env[i][1];
	return NULL;
}

static void set_env(const char *name, const char *value)
{
	int i;

	/* A name set again takes the new value. */
	for (i = 0; i < 15 && fake_env[i][0] != NULL && strcmp(fake_env[i][0], name) != 0; i++)
		;
	fake_env[i][0] = name;
	fake_env[i][1] = value;
}

static int setup(void **state)
{
	memset(fake_env, 0, sizeof(fake_env));
	return 0;
}

static char err[512];

/* The words after "ddprun", as a NULL-terminated array. */
#define ARGS(...) ((char *[]){"ddprun", __VA_ARGS__, NULL})
#define NO_ARGS	  ((char *[]){"ddprun", NULL})

static int count(char **argv)
{
	int n = 0;

	while (argv[n] != NULL)
		n++;
	return n;
}

static int parse(struct cli_opts *o, char **argv)
{
	return cli_parse(count(argv), argv, fake_getenv, o, err, sizeof(err));
}

static void expect_error(const char *needle, char **argv);

static void test_defaults_are_torchruns(void **state)
{
	struct cli_opts o;

	assert_int_equal(parse(&o, ARGS("train")), CLI_OK);
	assert_int_equal(o.nproc_kind, CLI_NPROC_NUM);
	assert_int_equal(o.nproc, 1);
	assert_int_equal(o.min_nodes, 1);
	assert_int_equal(o.max_nodes, 1);
	assert_int_equal(o.node_rank, 0);
	assert_string_equal(o.master_addr, "127.0.0.1");
	assert_int_equal(o.master_port, 29500);
	assert_false(o.master_port_given);
	assert_string_equal(o.rdzv_backend, "static");
	assert_string_equal(o.rdzv_id, "none");
	assert_true(o.random_run_id); /* one node, no port: torchrun 2.11+'s uuid4 */
	assert_string_equal(o.role, "default");
	assert_int_equal(o.max_restarts, 0);
	assert_int_equal(o.monitor_interval_ms, 100);
	assert_int_equal(o.shutdown_timeout_ms, 30000);
	assert_int_equal(o.redirects.all, 0);
	assert_int_equal(o.tee.all, 0);
	assert_null(o.log_dir);
	assert_null(o.ranks_filter);
	assert_int_equal(o.nsignals, 4);
	assert_int_equal(o.signals[0], SIGTERM);
	assert_int_equal(o.signals[1], SIGINT);
	assert_int_equal(o.signals[2], SIGHUP);
	assert_int_equal(o.signals[3], SIGQUIT);
	assert_int_equal(o.prog_argc, 1);
	assert_string_equal(o.prog_argv[0], "train");
	cli_free(&o);
}

static void test_both_spellings_equals_and_prefixes(void **state)
{
	struct cli_opts o;

	assert_int_equal(
		parse(&o, ARGS("--nproc_per_node=4", "--master-port", "1234", "--max_rest", "2",
			       "-r3", "-t", "0:1,12:2", "prog", "--nproc-per-node", "9")),
		CLI_OK);
	assert_int_equal(o.nproc, 4);
	assert_int_equal(o.master_port, 1234);
	assert_true(o.master_port_given);
	assert_int_equal(o.max_restarts, 2);
	assert_int_equal(o.redirects.all, 3);
	assert_int_equal(o.tee.all, -1);
	assert_int_equal(cli_std_get(&o.tee, 0), CLI_STD_OUT);
	assert_int_equal(cli_std_get(&o.tee, 5), CLI_STD_NONE);
	assert_int_equal(cli_std_get(&o.tee, 12), CLI_STD_ERR);
	/* Everything after the program is the program's. */
	assert_int_equal(o.prog_argc, 3);
	assert_string_equal(o.prog_argv[1], "--nproc-per-node");
	cli_free(&o);
	/* A prefix unique among torchrun's options means what it means there,
	 * though one of ddprun's own shares it (--tag-output, --hang-timeout,
	 * --version): it was "ambiguous". */
	assert_int_equal(parse(&o, ARGS("--t", "3", "--v", "p")), CLI_OK);
	assert_int_equal(o.tee.all, 3);
	assert_true(o.virtual_local_rank);
	assert_false(o.tag_output);
	cli_free(&o);
	assert_int_equal(parse(&o, ARGS("--h")), CLI_HELP);
	assert_int_equal(parse(&o, ARGS("--ta", "--ha", "5", "p")), CLI_OK);
	assert_true(o.tag_output);
	cli_free(&o);
}

static void test_nproc_words_and_flags(void **state)
{
	struct cli_opts o;

	assert_int_equal(parse(&o, ARGS("--nproc-per-node", "gpu", "-m", "--standalone",
					"--tag-output", "pkg.mod")),
			 CLI_OK);
	assert_int_equal(o.nproc_kind, CLI_NPROC_GPU);
	assert_true(o.module);
	assert_true(o.standalone);
	assert_true(o.tag_output);
	cli_free(&o);
	assert_int_equal(parse(&o, ARGS("--nproc-per-node", "auto", "--", "-weird-name")), CLI_OK);
	assert_int_equal(o.nproc_kind, CLI_NPROC_AUTO);
	assert_string_equal(o.prog_argv[0], "-weird-name");
	cli_free(&o);
}

static void test_pet_environment_then_command_line(void **state)
{
	struct cli_opts o;

	set_env("PET_NPROC_PER_NODE", "3");
	set_env("PET_MASTER_PORT", "4000");
	set_env("PET_NO_PYTHON", "1");
	set_env("PET_SIGNALS_TO_HANDLE", "SIGTERM, SIGUSR1");
	set_env("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "7");
	assert_int_equal(parse(&o, ARGS("prog")), CLI_OK);
	assert_int_equal(o.nproc, 3);
	assert_int_equal(o.master_port, 4000);
	assert_true(o.master_port_given);
	assert_true(o.no_python);
	assert_int_equal(o.nsignals, 3); /* and SIGINT, which always stops (torchrun's ^C) */
	assert_int_equal(o.signals[1], SIGUSR1);
	assert_int_equal(o.signals[2], SIGINT);
	assert_int_equal(o.shutdown_timeout_ms, 7000);
	cli_free(&o);
	/* Forwarded, SIGINT stops nothing. */
	assert_int_equal(parse(&o, ARGS("--forward-signals=INT", "prog")), CLI_OK);
	assert_int_equal(o.nsignals, 2);
	assert_int_equal(o.signals[1], SIGUSR1);
	cli_free(&o);
	/* The flag wins over PET_*, PET_SHUTDOWN_TIMEOUT over the torch variable. */
	set_env("PET_SHUTDOWN_TIMEOUT", "2.5");
	assert_int_equal(parse(&o, ARGS("--nproc-per-node=5", "prog")), CLI_OK);
	assert_int_equal(o.nproc, 5);
	assert_int_equal(o.shutdown_timeout_ms, 2500);
	cli_free(&o);
	set_env("PET_STANDALONE", "0");
	assert_int_equal(parse(&o, ARGS("prog")), CLI_OK);
	assert_false(o.standalone);
	cli_free(&o);
	/* bool(int(v)), as torchrun: any integer, however large, that is not 0;
	 * 2**31 was refused as "expected 0 or 1" while 5 was taken. */
	set_env("PET_STANDALONE", "-2147483649");
	assert_int_equal(parse(&o, ARGS("prog")), CLI_OK);
	assert_true(o.standalone);
	cli_free(&o);
	set_env("PET_STANDALONE", " 0_0 ");
	assert_int_equal(parse(&o, ARGS("prog")), CLI_OK);
	assert_false(o.standalone);
	cli_free(&o);
	set_env("PET_STANDALONE", "yes");
	expect_error("invalid value 'yes' for PET_STANDALONE: expected an integer (0: off, any "
		     "other: on)",
		     ARGS("prog"));
}

static void test_help_and_version(void **state)
{
	struct cli_opts o;

	assert_int_equal(parse(&o, ARGS("--help")), CLI_HELP);
	assert_int_equal(parse(&o, ARGS("--nproc-per-node", "2", "-h", "prog")), CLI_HELP);
	assert_int_equal(parse(&o, ARGS("--version")), CLI_VERSION);
}

/* --help states the default --master-port that a multi-node job takes. */
static void test_help_states_the_default_master_port(void **state)
{
	struct cli_opts o;
	char *text = NULL, want[64];
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	assert_non_null(f);
	cli_usage(f);
	fclose(f);
	assert_int_equal(parse(&o, ARGS("--nnodes", "2", "p")), CLI_OK);
	snprintf(want, sizeof(want), "else %d)", o.master_port);
	if (strstr(text, want) == NULL)
		fail_msg("--help lacks '%s':\n%s", want, text);
	free(text);
	cli_free(&o);
}

/* Each malformed line fails with -EINVAL and a message naming the problem. */
static void expect_error(const char *needle, char **argv)
{
	struct cli_opts o;

	assert_int_equal(cli_parse(count(argv), argv, fake_getenv, &o, err, sizeof(err)), -EINVAL);
	if (strstr(err, needle) == NULL)
		fail_msg("message '%s' lacks '%s'", err, needle);
	assert_null(strchr(err, '\n'));
}

/* argparse: "-r=3" is -r 3 ('=' separates, once); a flag takes no value in
 * any form, -h and --version included. */
static void test_short_options_take_a_value_after_equals(void **state)
{
	struct cli_opts o;

	assert_int_equal(parse(&o, ARGS("-r=3", "-t=0:1,1:2", "prog")), CLI_OK);
	assert_int_equal(o.redirects.all, 3);
	assert_int_equal(cli_std_get(&o.tee, 0), CLI_STD_OUT);
	assert_int_equal(cli_std_get(&o.tee, 1), CLI_STD_ERR);
	cli_free(&o);
	expect_error("invalid value '=3' for --redirects", ARGS("-r==3", "p"));
	expect_error("invalid value '' for --tee", ARGS("-t=", "p"));
	{ /* several nodes: the rendezvous carries the role, RDZV_ROLE_MAX - 1
	   * bytes at most; one node takes any */
		char role[RDZV_ROLE_MAX + 1];

		memset(role, 'r', sizeof(role) - 1);
		role[sizeof(role) - 1] = '\0';
		expect_error("--role: a job of several nodes takes a name of at most 127 bytes",
			     ARGS("--nnodes", "2", "--role", role, "p"));
		assert_int_equal(parse(&o, ARGS("--role", role, "p")), CLI_OK);
		cli_free(&o);
		role[RDZV_ROLE_MAX - 1] = '\0';
		assert_int_equal(parse(&o, ARGS("--nnodes", "2", "--role", role, "p")), CLI_OK);
		cli_free(&o);
	}
	expect_error("option --module takes no value", ARGS("-m=1", "p"));
	expect_error("option --module takes no value", ARGS("-m=", "p"));
	expect_error("option --help takes no value", ARGS("-h=1", "p"));
	expect_error("option --help takes no value", ARGS("--help=1", "p"));
	expect_error("option --version takes no value", ARGS("--version=", "p"));
}

/* argparse: a flag's letter runs on into the next short option ("-mr3" is
 * -m -r3, "-mh" asks for help); once it was "--module takes no value". */
static void test_short_flags_run_on_into_the_next_option(void **state)
{
	struct cli_opts o;

	assert_int_equal(parse(&o, ARGS("-mr3", "prog")), CLI_OK);
	assert_true(o.module);
	assert_int_equal(o.redirects.all, 3);
	cli_free(&o);
	assert_int_equal(parse(&o, ARGS("-mmt=1", "prog")), CLI_OK);
	assert_true(o.module);
	assert_int_equal(cli_std_get(&o.tee, 0), CLI_STD_OUT);
	cli_free(&o);
	assert_int_equal(parse(&o, ARGS("-mh", "prog")), CLI_HELP);
	assert_int_equal(parse(&o, ARGS("-hm", "prog")), CLI_HELP);
	expect_error("option --module takes no value", ARGS("-mx", "p"));
	expect_error("option --module takes no value", ARGS("-m-r3", "p"));
	expect_error("option --redirects expects a value", ARGS("-mr", "-t", "p"));
	expect_error("invalid value 'm' for --redirects", ARGS("-rm", "p"));
}

/* torchrun 2.x's flags: accepted, in both spellings and from PET_*. */
static void test_torchrun2_flags(void **state)
{
	struct cli_opts o;

	set_env("PET_DUPLICATE_STDERR_FILTERS", "warn");
	assert_int_equal(
		parse(&o, ARGS("--event_log_handler", "console", "--duplicate-stdout-filters",
			       "a,,b,c", "--logs-specs", "x", "--numa_binding", "core-complex",
			       "--virtual-local-rank", "--log-line-prefix-template", "${rank}|",
			       "--rdzv-conf", "use_libuv=0", "p")),
		CLI_OK);
	assert_string_equal(o.event_log_handler, "console");
	assert_int_equal(o.dup_filters[0].n, 2);
	assert_string_equal(o.dup_filters[0].s[0], "a,b");
	assert_string_equal(o.dup_filters[0].s[1], "c");
	assert_true(cli_filters_match(&o.dup_filters[0], "xa,by", 5));
	assert_false(cli_filters_match(&o.dup_filters[0], "a", 1));
	assert_int_equal(o.dup_filters[1].n, 1);
	assert_string_equal(o.dup_filters[1].s[0], "warn");
	assert_string_equal(o.logs_specs, "x");
	assert_int_equal(o.numa_binding, CLI_NUMA_CCX);
	assert_true(o.virtual_local_rank);
	assert_string_equal(o.log_line_prefix, "${rank}|");
	assert_string_equal(o.rdzv.unknown, "use_libuv");
	assert_string_equal(o.signals_to_handle, "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
	cli_free(&o);
	assert_int_equal(parse(&o, ARGS("--duplicate-stdout-filters", "", "p")), CLI_OK);
	assert_int_equal(o.dup_filters[0].n, 0);
	assert_int_equal(o.numa_binding, CLI_NUMA_NONE);
	assert_string_equal(o.event_log_handler, "null");
	cli_free(&o);
	/* An empty item (a stray comma) would match every line, as torchrun's
	 * does: a usage error. ",," stays a comma. */
	expect_error("invalid value 'a,' for --duplicate-stdout-filters: expected substrings "
		     "separated by commas, none empty",
		     ARGS("--duplicate-stdout-filters", "a,", "p"));
	expect_error("invalid value ',' for --duplicate-stderr-filters",
		     ARGS("--duplicate-stderr-filters", ",", "p"));
	expect_error("invalid value 'a,,,' for --duplicate-stdout-filters",
		     ARGS("--duplicate-stdout-filters", "a,,,", "p"));
}

/* An empty --local-addr or template is unset, as torchrun's truth tests:
 * the address of the connection to the store, the default prefix (an empty
 * --local-addr was the address other nodes were given). */
static void test_empty_is_unset(void **state)
{
	struct cli_opts o;
	struct job j;

	assert_int_equal(parse(&o, ARGS("--local-addr", "", "p")), CLI_OK);
	assert_null(o.local_addr);
	cli_free(&o);
	assert_int_equal(parse(&o, ARGS("--local-addr=", "p")), CLI_OK);
	assert_null(o.local_addr);
	cli_free(&o);
	set_env("PET_LOCAL_ADDR", "");
	set_env("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "");
	assert_int_equal(parse(&o, ARGS("--log-line-prefix-template=", "p")), CLI_OK);
	assert_null(o.local_addr);
	job_from_opts(&j, &o, fake_getenv);
	assert_null(j.local_addr);
	assert_null(j.log_line_prefix); /* the default, [<role><local_rank>]: */
	job_free(&j);
	cli_free(&o);
	assert_int_equal(parse(&o, ARGS("--local-addr", "10.0.0.1", "p")), CLI_OK);
	assert_string_equal(o.local_addr, "10.0.0.1");
	cli_free(&o);
	/* An IPv6 address bare or in brackets, as --master-addr; a port (ddprun
	 * picks it) failed only after the rendezvous, as a name not found. */
	assert_int_equal(parse(&o, ARGS("--local-addr", "[fe80::1]", "p")), CLI_OK);
	assert_string_equal(o.local_addr, "fe80::1");
	cli_free(&o);
	assert_int_equal(parse(&o, ARGS("--local-addr", "::1", "p")), CLI_OK);
	assert_string_equal(o.local_addr, "::1");
	cli_free(&o);
	expect_error("invalid value '10.0.0.1:5' for --local-addr: expected a host without a port",
		     ARGS("--local-addr", "10.0.0.1:5", "p"));
	expect_error("invalid value '[::1]:5' for --local-addr: expected a host without a port",
		     ARGS("--local-addr", "[::1]:5", "p"));
	expect_error("invalid value '[]' for --local-addr: expected a host name or address",
		     ARGS("--local-addr", "[]", "p"));
	/* A stray comma made --master-addr a list to the store's server: the
	 * job failed with 1, 'cannot listen on 127.0.0.1,:0'. */
	expect_error("invalid value '127.0.0.1,' for --master-addr: expected a host name or "
		     "address",
		     ARGS("--master-addr", "127.0.0.1,", "p"));
	/* torchrun's `if not log_dir`: a temporary directory, as unset */
	assert_int_equal(parse(&o, ARGS("--log-dir", "", "p")), CLI_OK);
	assert_null(o.log_dir);
	cli_free(&o);
	set_env("PET_LOG_DIR", "");
	assert_int_equal(parse(&o, ARGS("-r3", "p")), CLI_OK);
	assert_null(o.log_dir);
	cli_free(&o);
}

/* Each duplicate filter takes memory by its own length: the whole list's
 * for every item made "a,a,a,..." of 60 KB take 1.8 GB (fuzz_launch_cli). */
static void test_duplicate_filters_take_memory_by_their_length(void **state)
{
	struct cli_filters f;
	char s[4001];
	int i;

	for (i = 0; i < 4000; i += 2)
		memcpy(s + i, "a,", 2);
	s[3999] = s[4000] = '\0'; /* "a,...,a" */
	assert_int_equal(cli_filters_parse(s, &f), 0);
	assert_int_equal(f.n, 2000);
	for (i = 0; i < f.n; i++) {
		assert_string_equal(f.s[i], "a");
		assert_true(malloc_usable_size(f.s[i]) < 64);
	}
	cli_filters_free(&f);
	assert_int_equal(cli_filters_parse(",,,x", &f), 0);
	assert_int_equal(f.n, 2);
	assert_string_equal(f.s[0], ",");
	assert_string_equal(f.s[1], "x");
	cli_filters_free(&f);
	assert_int_equal(cli_filters_parse("x,,,,y", &f), 0);
	assert_int_equal(f.n, 1);
	assert_string_equal(f.s[0], "x,,y");
	cli_filters_free(&f);
	/* An empty item, last or not: refused, nothing kept. */
	assert_int_equal(cli_filters_parse("x,,,,y,", &f), -EINVAL);
	assert_null(f.s);
	assert_int_equal(f.n, 0);
	assert_int_equal(cli_filters_parse(",,,", &f), -EINVAL);
	s[3999] = ','; /* "a,...,a," */
	assert_int_equal(cli_filters_parse(s, &f), -EINVAL);
}

static void test_errors(void **state)
{
	expect_error("missing the program", NO_ARGS);
	/* the program taken as an option's value: say which took it */
	expect_error("missing the program to run (-r took '/bin/true' as its value)",
		     ARGS("-r", "/bin/true"));
	expect_error("missing the program to run (--redirects took '/bin/true' as its value)",
		     ARGS("--redir", "/bin/true"));
	expect_error("missing the program to run (--log-dir took 'train' as its value)",
		     ARGS("--nnodes", "1", "--log-dir", "train"));
	expect_error("unrecognized option '--frob'", ARGS("--frob", "p"));
	assert_null(strstr(err, "rendezvous setting"));
	/* A rendezvous setting written as an option says where it goes. */
	expect_error("unrecognized option '--join-timeout' (a rendezvous setting: --rdzv-conf "
		     "join_timeout=...)",
		     ARGS("--join-timeout", "5", "p"));
	expect_error(
		"unrecognized option '--is_host' (a rendezvous setting: --rdzv-conf is_host=...)",
		ARGS("--is_host=1", "p"));
	expect_error("unrecognized option '-x'", ARGS("-x", "p"));
	expect_error("ambiguous option '--n'", ARGS("--n", "1", "p"));
	/* A prefix of nearly every option names a few and counts the rest
	 * (the list was cut at 512 bytes, mid-name, its parenthesis open). */
	expect_error("ambiguous option '--' (it could be --nnodes, --nproc-per-node, ",
		     ARGS("--=3", "p"));
	assert_int_equal(strcmp(err + strlen(err) - 6, " more)"), 0);
	/* A c10d endpoint is checked with the other options (its error came at
	 * the rendezvous' start, with no pointer to --help). */
	expect_error("invalid value 'localhost:65536' for --rdzv-endpoint: expected HOST[:PORT], a "
		     "port from 0 to 65535",
		     ARGS("--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:65536", "p"));
	expect_error("invalid value ':29400' for --rdzv-endpoint",
		     ARGS("--rdzv-backend", "c10d", "--rdzv-endpoint", ":29400", "p"));
	/* A value from a PET_ variable is said to be (it read as the option's). */
	set_env("PET_NNODES", "1:2");
	expect_error("--nnodes 1:2 (from PET_NNODES): a range needs --rdzv-backend c10d",
		     ARGS("p"));
	set_env("PET_NNODES", NULL);
	set_env("PET_NODE_RANK", "1");
	expect_error("--node-rank 1 (from PET_NODE_RANK) is not below the number of nodes (1)",
		     ARGS("p"));
	set_env("PET_NODE_RANK", NULL);
	/* The option's own message names it once (it said "(from --rdzv-conf)"
	 * after it); a PET_ variable is said. */
	expect_error("--rdzv-conf: 'a' is not KEY=VALUE", ARGS("--rdzv-conf", "a", "p"));
	assert_null(strstr(err, "(from"));
	set_env("PET_RDZV_CONF", "a");
	expect_error("--rdzv-conf: 'a' is not KEY=VALUE (from PET_RDZV_CONF)", ARGS("p"));
	set_env("PET_RDZV_CONF", NULL);
	expect_error("--nproc-per-node expects a value", ARGS("--nproc-per-node"));
	expect_error("invalid value '0' for --nproc-per-node", ARGS("--nproc-per-node", "0", "p"));
	expect_error("invalid value '4097' for --nproc-per-node",
		     ARGS("--nproc-per-node=4097", "p"));
	expect_error("--nnodes", ARGS("--nnodes", "0", "p"));
	expect_error("--nnodes", ARGS("--nnodes", "2:1", "p"));
	expect_error("--nnodes", ARGS("--nnodes", "1:2:3", "p"));
	expect_error("--node-rank 1 is not below", ARGS("--node-rank", "1", "p"));
	expect_error("a range needs --rdzv-backend c10d", ARGS("--nnodes", "1:2", "p"));
	expect_error("needs --rdzv-endpoint", ARGS("--nnodes", "2", "--rdzv-backend", "c10d", "p"));
	expect_error("--standalone runs a single node", ARGS("--standalone", "--nnodes", "2", "p"));
	{ /* 1:N runs alone, as torchrun's (whose last call waits for no one) */
		struct cli_opts o;
		assert_int_equal(parse(&o, ARGS("--standalone", "--nnodes", "1:2", "p")), CLI_OK);
		assert_int_equal(o.max_nodes, 1);
		assert_false(cli_multinode(&o));
		cli_free(&o);
	}
	expect_error("--event-log-handler", ARGS("--event-log-handler", "bogus", "p"));
	expect_error("--numa-binding", ARGS("--numa-binding", "gpu", "p"));
	expect_error("no shell completion", ARGS("--print-completion", "bash"));
	expect_error("join_timeout=x", ARGS("--rdzv-conf", "join_timeout=x", "p"));
	expect_error("--master-port", ARGS("--master-port", "-1", "p"));
	expect_error("--redirects", ARGS("-r", "0:4", "p"));
	expect_error("--redirects", ARGS("-r", "0:1,", "p"));
	expect_error("--tee", ARGS("--tee", "x", "p"));
	expect_error("--local-ranks-filter", ARGS("--local-ranks-filter", "a", "p"));
	expect_error("unknown signal 'TERM'", ARGS("--signals-to-handle", "TERM", "p"));
	expect_error("cannot be handled", ARGS("--signals-to-handle", "SIGCHLD", "p"));
	expect_error("--rdzv-conf", ARGS("--rdzv-conf", "a=1,=2", "p"));
	expect_error("--rdzv-backend", ARGS("--rdzv-backend", "etcd-v2", "p"));
	expect_error("--standalone takes no value", ARGS("--standalone=yes", "p"));
	expect_error("cannot be used together", ARGS("-m", "--no-python", "p"));
	{ /* --run-path runs the path, whatever they say (torchrun) */
		struct cli_opts o;
		assert_int_equal(parse(&o, ARGS("--run-path", "-m", "--no-python", "p")), CLI_OK);
		cli_free(&o);
	}
	set_env("PET_MAX_RESTARTS", "-3");
	expect_error("invalid value '-3' for PET_MAX_RESTARTS", ARGS("p"));
	memset(fake_env, 0, sizeof(fake_env));
	set_env("PET_MODULE", "yes");
	expect_error("PET_MODULE", ARGS("p"));
}

/* The largest number the message in err states after "expected " (the
 * bound of the value it refused). */
static long stated_bound(void)
{
	const char *s = strstr(err, "expected ");
	long best = -1, v;
	char *end;

	if (s == NULL)
		fail_msg("message '%s' does not say what is expected", err);
	for (; *s != '\0'; s++) {
		if (!isdigit((unsigned char)*s))
			continue;
		v = strtol(s, &end, 10);
		best = v > best ? v : best;
		s = end - 1;
	}
	return best;
}

/* opt with value v, after the words pre (NULL: none), then the program. */
static int parse_value(const char *pre0, const char *pre1, const char *opt, long v)
{
	struct cli_opts o;
	char val[32];
	int rc;

	snprintf(val, sizeof(val), "%ld", v);
	rc = pre0 != NULL ? parse(&o, ARGS((char *)pre0, (char *)pre1, (char *)opt, val, "p"))
			  : parse(&o, ARGS((char *)opt, val, "p"));
	if (rc == CLI_OK)
		cli_free(&o);
	return rc;
}

/* A refused value's message states the bound the check enforces: that
 * number passes, the next is refused (saying the same). --nnodes said no
 * bound at all ("1 <= MIN <= MAX"). */
static void test_a_bound_stated_is_the_bound_enforced(void **state)
{
	char nodes[16];
	const struct {
		const char *pre0, *pre1, *opt;
	} t[] = {
		{NULL, NULL, "--nproc-per-node"},   {NULL, NULL, "--nnodes"},
		{"--nnodes", nodes, "--node-rank"}, /* below --nnodes too: the most it takes */
		{NULL, NULL, "--master-port"},	    {NULL, NULL, "--max-restarts"},
	};
	size_t i;
	long bound;

	snprintf(nodes, sizeof(nodes), "%d", CLI_MAX_NODES);
	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		assert_int_equal(parse_value(t[i].pre0, t[i].pre1, t[i].opt, 1000000000000L),
				 -EINVAL);
		bound = stated_bound();
		if (parse_value(t[i].pre0, t[i].pre1, t[i].opt, bound) != CLI_OK)
			fail_msg("%s %ld, the bound its message states, is refused: %s", t[i].opt,
				 bound, err);
		if (parse_value(t[i].pre0, t[i].pre1, t[i].opt, bound + 1) != -EINVAL)
			fail_msg("%s %ld is taken, beyond the bound its message states", t[i].opt,
				 bound + 1);
		assert_int_equal(stated_bound(), bound);
	}
}

/* cli.h: an error is one line, also when it quotes a value or an option
 * holding a newline or an escape sequence (fuzz_launch_cli: "--local-ran\n").
 * Control characters show as '?'. */
static void test_an_error_is_one_line_whatever_it_quotes(void **state)
{
	struct cli_opts o;

	assert_int_equal(parse(&o, ARGS("--local-ran\n", "p")), -EINVAL);
	assert_string_equal(err, "unrecognized option '--local-ran?'");
	assert_int_equal(parse(&o, ARGS("--nproc-per-node", "2\n\033[2J", "p")), -EINVAL);
	assert_non_null(strstr(err, "invalid value '2??[2J' for --nproc-per-node"));
	assert_int_equal(parse(&o, ARGS("--rdzv-conf", "join_timeout=\r1", "p")), -EINVAL);
	assert_null(strchr(err, '\r'));
	set_env("SLURM_JOB_ID", "1");
	set_env("SLURM_NNODES", "2\n");
	assert_int_equal(parse(&o, ARGS("p")), -EINVAL);
	assert_non_null(strstr(err, "SLURM_NNODES='2?'"));
}

static void test_node_options_and_rendezvous_settings(void **state)
{
	struct cli_opts o;

	/* A static job's rank beyond --nnodes is the rendezvous's to report
	 * (it tells the other nodes). */
	assert_int_equal(parse(&o, ARGS("--nnodes", "2", "--node-rank", "2", "p")), CLI_OK);
	assert_true(cli_multinode(&o));
	cli_free(&o);
	assert_int_equal(
		parse(&o, ARGS("--nnodes", "1:3", "--rdzv-backend", "c10d", "--rdzv-endpoint",
			       "[::1]:5000", "--rdzv-conf", "join_timeout=5,is_host=0", "p")),
		CLI_OK);
	assert_int_equal(o.min_nodes, 1);
	assert_int_equal(o.max_nodes, 3);
	assert_int_equal(o.rdzv.join_timeout_ms, 5000);
	assert_int_equal(o.rdzv.is_host, 0);
	assert_int_equal(o.rdzv.heartbeat_timeout_ms, 5000); /* the default */
	assert_true(cli_multinode(&o));
	cli_free(&o);
	/* One node at an endpoint still meets there (torchrun does). */
	assert_int_equal(parse(&o, ARGS("--rdzv-backend", "c10d", "--rdzv-endpoint", "h:1", "p")),
			 CLI_OK);
	assert_true(cli_multinode(&o));
	cli_free(&o);
	assert_int_equal(parse(&o, ARGS("--standalone", "p")), CLI_OK);
	assert_false(cli_multinode(&o));
	cli_free(&o);
	assert_int_equal(parse(&o, ARGS("p")), CLI_OK);
	assert_false(cli_multinode(&o));
	cli_free(&o);
}

static void test_slurm_gives_nodes_rank_and_master_unless_flags_do(void **state)
{
	struct cli_opts o;

	set_env("SLURM_JOB_ID", "42");
	set_env("SLURM_STEP_ID", "3");
	set_env("SLURM_NNODES", "4");
	set_env("SLURM_NODEID", "2");
	set_env("SLURM_JOB_NODELIST", "node[07-10],gpu-a[1-2]");
	assert_int_equal(parse(&o, ARGS("--nproc-per-node", "4", "p")), CLI_OK);
	assert_int_equal(o.min_nodes, 4);
	assert_int_equal(o.max_nodes, 4);
	assert_int_equal(o.node_rank, 2);
	assert_string_equal(o.master_addr, "node07");
	assert_true(o.slurm_nnodes && o.slurm_node_rank && o.slurm_master_addr);
	/* The run id is the step's: two jobs on one node and port are two run
	 * ids, not one job whose ranks clash. */
	assert_string_equal(o.rdzv_id, "42.3");
	assert_true(o.slurm_rdzv_id);
	cli_free(&o);
	/* A --nnodes below the step's nodes, ranks from SLURM_NODEID: refused
	 * on every node alike (not only on those past it). */
	expect_error("--nnodes 2 is below the 4 nodes of this srun step",
		     ARGS("--nnodes", "2", "p"));
	assert_int_equal(parse(&o, ARGS("--nnodes", "2", "--node-rank", "1", "p")), CLI_OK);
	cli_free(&o);
	/* c10d ranks by arrival at its endpoint: only the count and the run id. */
	assert_int_equal(parse(&o, ARGS("--rdzv-backend", "c10d", "--rdzv-endpoint", "h:1", "p")),
			 CLI_OK);
	assert_true(o.slurm_nnodes && o.slurm_rdzv_id);
	assert_false(o.slurm_node_rank || o.slurm_master_addr);
	assert_string_equal(o.rdzv_id, "42.3");
	cli_free(&o);
	assert_int_equal(parse(&o, ARGS("--rdzv-backend", "c10d", "--rdzv-endpoint", "h:1",
					"--nnodes", "1:4", "p")),
			 CLI_OK);
	assert_string_equal(o.rdzv_id, "42.3");
	cli_free(&o);
	assert_int_equal(parse(&o, ARGS("--rdzv-id", "mine", "p")), CLI_OK);
	assert_string_equal(o.rdzv_id, "mine");
	assert_false(o.slurm_rdzv_id);
	cli_free(&o);
	/* Flags and PET_* win. */
	set_env("PET_NODE_RANK", "1");
	assert_int_equal(parse(&o, ARGS("--nnodes", "3", "--master-addr", "10.0.0.9", "p")),
			 CLI_OK);
	assert_int_equal(o.max_nodes, 3);
	assert_int_equal(o.node_rank, 1);
	assert_string_equal(o.master_addr, "10.0.0.9");
	assert_false(o.slurm_nnodes || o.slurm_node_rank || o.slurm_master_addr);
	cli_free(&o);
}

static void test_slurm_one_node_of_an_allocation_hosts_its_own_store(void **state)
{
	struct cli_opts o;

	/* salloc's shell (no step) on a login node: the allocation's first
	 * node is not this one, nor SLURM_NODEID this node's rank. --nnodes 1
	 * took both (listening on the first node's address failed, and a
	 * SLURM_NODEID of 1 was a usage error); the run id is still the job's. */
	set_env("SLURM_JOB_ID", "42");
	set_env("SLURM_NNODES", "2");
	set_env("SLURM_NODEID", "1");
	set_env("SLURM_JOB_NODELIST", "node[07-08]");
	assert_int_equal(parse(&o, ARGS("--nnodes", "1", "p")), CLI_OK);
	assert_int_equal(o.node_rank, 0);
	assert_false(o.slurm_node_rank || o.slurm_master_addr);
	assert_string_equal(o.master_addr, "127.0.0.1");
	assert_string_equal(o.rdzv_id, "42");
	assert_true(o.slurm_rdzv_id);
	cli_free(&o);
	/* A node list it does not need is not read. */
	set_env("SLURM_JOB_NODELIST", "node[07-");
	assert_int_equal(parse(&o, ARGS("--nnodes", "1", "p")), CLI_OK);
	cli_free(&o);
	/* --standalone is a node of its own: nothing from Slurm, in the batch
	 * script or in each task of a step (it was refused either way). */
	set_env("SLURM_JOB_NODELIST", "node[07-08]");
	assert_int_equal(parse(&o, ARGS("--standalone", "p")), CLI_OK);
	assert_int_equal(o.max_nodes, 1);
	assert_int_equal(o.node_rank, 0);
	assert_false(o.slurm_nnodes || o.slurm_node_rank || o.slurm_master_addr || o.slurm_rdzv_id);
	cli_free(&o);
	set_env("SLURM_STEP_ID", "0");
	set_env("SLURM_STEP_NUM_NODES", "2");
	assert_int_equal(parse(&o, ARGS("--standalone", "p")), CLI_OK);
	assert_int_equal(o.max_nodes, 1);
	assert_false(cli_multinode(&o));
	cli_free(&o);
	/* The step's own checks still hold: one task a node. */
	set_env("SLURM_STEP_NUM_TASKS", "4");
	expect_error("srun started 4 tasks on 2 nodes", ARGS("--standalone", "p"));
	expect_error("srun started 4 tasks on 2 nodes",
		     ARGS("--standalone", "--nnodes", "1", "--node-rank", "0", "--master-addr",
			  "127.0.0.1", "p"));
}

static void test_slurm_errors_name_the_variable(void **state)
{
	set_env("SLURM_JOB_ID", "42");
	set_env("SLURM_STEP_ID", "0");
	set_env("SLURM_NNODES", "2");
	set_env("SLURM_NODEID", "x");
	expect_error("SLURM_NODEID", ARGS("p"));
	memset(fake_env, 0, sizeof(fake_env));
	set_env("SLURM_JOB_ID", "42");
	set_env("SLURM_STEP_ID", "0");
	set_env("SLURM_NNODES", "2");
	set_env("SLURM_NODEID", "1");
	set_env("SLURM_JOB_NODELIST", "node[01-");
	expect_error("SLURM_JOB_NODELIST", ARGS("p"));
	/* Nothing is taken from Slurm when the flags say it all. */
	{
		struct cli_opts o;

		assert_int_equal(parse(&o, ARGS("--nnodes", "2", "--node-rank", "0",
						"--master-addr", "h", "p")),
				 CLI_OK);
		cli_free(&o);
	}
}

static void test_std_parse(void **state)
{
	struct cli_std s;

	assert_int_equal(cli_std_parse("2", &s), 0);
	assert_int_equal(s.all, 2);
	assert_int_equal(cli_std_parse("3:3,0:1", &s), 0);
	assert_int_equal(s.all, -1);
	assert_int_equal(cli_std_get(&s, 0), 1);
	assert_int_equal(cli_std_get(&s, 1), 0);
	assert_int_equal(cli_std_get(&s, 3), 3);
	free(s.map);
	assert_int_equal(cli_std_parse("", &s), -EINVAL);
	assert_int_equal(cli_std_parse("01", &s), -EINVAL);
	assert_int_equal(cli_std_parse(":1", &s), -EINVAL);
	assert_int_equal(cli_std_parse("1:", &s), -EINVAL);
	assert_int_equal(cli_std_parse("-1:1", &s), -EINVAL);
	assert_int_equal(cli_std_parse("1:13", &s), -EINVAL);
}

static void test_ranks_filter(void **state)
{
	struct cli_opts o;

	assert_int_equal(parse(&o, ARGS("--local_ranks_filter", "0,2", "p")), CLI_OK);
	assert_true(cli_rank_shown(&o, 0));
	assert_false(cli_rank_shown(&o, 1));
	assert_true(cli_rank_shown(&o, 2));
	cli_free(&o);
}

/* torchrun reads each item with Python's int(): white space around it, a
 * sign, leading zeros and '_' between digits are fine; what int() refuses
 * is a usage error, and so is a rank no node can have. */
static void test_ranks_filter_items_are_read_as_python_int(void **state)
{
	static const char *const good[] = {"0, 2", " 0 ,\t2\n", "+0,02", "-0,0_2", "2,0,2,0"};
	static const char *const bad[] = {"0, ", "0,,2", "_2",	"2_", "2__0", "+ 2",
					  "0x2", "2.0",	 "1 2", "-1", "4096", "99999999999"};
	struct cli_opts o;
	size_t i;

	for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		assert_int_equal(parse(&o, ARGS("--local-ranks-filter", (char *)good[i], "p")),
				 CLI_OK);
		assert_int_equal(o.nranks_filter, 2);
		assert_true(cli_rank_shown(&o, 0));
		assert_false(cli_rank_shown(&o, 1));
		assert_true(cli_rank_shown(&o, 2));
		cli_free(&o);
	}
	assert_int_equal(parse(&o, ARGS("--local-ranks-filter", "1_0", "p")), CLI_OK);
	assert_true(cli_rank_shown(&o, 10));
	cli_free(&o);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		expect_error("for --local-ranks-filter: expected a comma-separated list of local "
			     "ranks from 0 to 4095",
			     ARGS("--local-ranks-filter", (char *)bad[i], "p"));
}

/* torchrun reads its integer options with int() (argparse's type=int, the
 * parts of --nnodes, --nproc-per-node before its words): "+2", " 2", "02"
 * and "1_0" are integers there, and were usage errors here. */
static void test_integer_options_are_read_as_python_int(void **state)
{
	struct cli_opts o;

	assert_int_equal(
		parse(&o, ARGS("--nproc-per-node", " +2 ", "--nnodes", " 1 : 0_2", "--node-rank",
			       "01", "--master-port", "+29_501", "--max-restarts", "1_0",
			       "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:1", "p")),
		CLI_OK);
	assert_int_equal(o.nproc, 2);
	assert_int_equal(o.min_nodes, 1);
	assert_int_equal(o.max_nodes, 2);
	assert_int_equal(o.node_rank, 1);
	assert_int_equal(o.master_port, 29501);
	assert_int_equal(o.max_restarts, 10);
	cli_free(&o);
	set_env("PET_NNODES", "2 ");
	assert_int_equal(parse(&o, ARGS("p")), CLI_OK);
	assert_int_equal(o.min_nodes, 2);
	cli_free(&o);
	unsetenv("PET_NNODES");
	/* What int() refuses stays one usage line. */
	expect_error("invalid value '2.0' for --nproc-per-node", ARGS("--nproc-per-node=2.0", "p"));
	expect_error("invalid value '0x10' for --max-restarts", ARGS("--max-restarts=0x10", "p"));
	expect_error("--nnodes", ARGS("--nnodes", "1:_2", "p"));
	expect_error("--master-port", ARGS("--master-port", "", "p"));
}

/* --forward-signals: loose names and numbers, and a signal in both lists
 * is forwarded only (it no longer stops the job). */
static void test_forward_signals(void **state)
{
	struct cli_opts o;

	assert_int_equal(parse(&o, ARGS("p")), CLI_OK);
	assert_int_equal(o.nfwd_signals, 0);
	cli_free(&o);
	assert_int_equal(parse(&o, ARGS("--signals-to-handle", "SIGTERM,SIGUSR1,SIGINT",
					"--forward-signals", "usr1,SIGUSR2,12,USR2", "p")),
			 CLI_OK);
	assert_int_equal(o.nfwd_signals, 2);
	assert_int_equal(o.fwd_signals[0], SIGUSR1);
	assert_int_equal(o.fwd_signals[1], SIGUSR2);
	assert_int_equal(o.nsignals, 2);
	assert_int_equal(o.signals[0], SIGTERM);
	assert_int_equal(o.signals[1], SIGINT);
	cli_free(&o);
	set_env("PET_FORWARD_SIGNALS", "10");
	assert_int_equal(parse(&o, ARGS("p")), CLI_OK);
	assert_int_equal(o.nfwd_signals, 1);
	assert_int_equal(o.fwd_signals[0], SIGUSR1);
	cli_free(&o);
	expect_error("unknown signal 'NOPE' in --forward-signals",
		     ARGS("--forward-signals", "NOPE", "p"));
	expect_error("unknown signal '0' in --forward-signals",
		     ARGS("--forward-signals", "0", "p"));
	expect_error("signal kill in --forward-signals cannot be handled",
		     ARGS("--forward-signals", "kill", "p"));
	expect_error("invalid value '' for --forward-signals", ARGS("--forward-signals=", "p"));
}

/* The job: what is decided from the options once, not by each reader. */
static void test_job_resolves_once(void **state)
{
	struct cli_opts o;
	struct job j;

	set_env("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "[${rank}]");
	assert_int_equal(parse(&o, ARGS("--nnodes", "1:3", "--rdzv-backend", "c10d",
					"--rdzv-endpoint", "h:1", "--local-ranks-filter", "1",
					"--log-line-prefix-template", "", "p")),
			 CLI_OK);
	job_from_opts(&j, &o, fake_getenv);
	assert_true(j.multinode && j.dynamic);
	assert_int_equal(j.min_nodes, 1);
	assert_int_equal(j.max_nodes, 3);
	assert_string_equal(j.run_id, o.rdzv_id);
	assert_string_equal(j.log_line_prefix, "[${rank}]"); /* "" counts as not given */
	assert_null(o.local_addr);			     /* not given */
	assert_false(job_rank_shown(&j, 0));
	assert_true(job_rank_shown(&j, 1));
	assert_null(j.slurm_master_var);
	assert_null(j.shm_nonce);
	assert_string_equal(j.hostname, "localhost");
	job_free(&j);
	cli_free(&o);
	/* The option wins over the variable; a Slurm master names its source. */
	set_env("SLURM_JOB_ID", "42");
	set_env("SLURM_STEP_ID", "0");
	set_env("SLURM_NNODES", "2");
	set_env("SLURM_NODEID", "0");
	set_env("SLURM_JOB_NODELIST", "node[07-08]");
	assert_int_equal(parse(&o, ARGS("--log-line-prefix-template", "${local_rank}>", "p")),
			 CLI_OK);
	job_from_opts(&j, &o, fake_getenv);
	assert_true(j.multinode);
	assert_false(j.dynamic);
	assert_string_equal(j.log_line_prefix, "${local_rank}>");
	assert_string_equal(j.master_addr, "node07");
	assert_string_equal(j.slurm_master_var, "SLURM_JOB_NODELIST");
	assert_true(job_rank_shown(&j, 5));
	job_free(&j);
	cli_free(&o);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_defaults_are_torchruns, setup),
		cmocka_unit_test_setup(test_both_spellings_equals_and_prefixes, setup),
		cmocka_unit_test_setup(test_short_options_take_a_value_after_equals, setup),
		cmocka_unit_test_setup(test_short_flags_run_on_into_the_next_option, setup),
		cmocka_unit_test_setup(test_nproc_words_and_flags, setup),
		cmocka_unit_test_setup(test_pet_environment_then_command_line, setup),
		cmocka_unit_test_setup(test_help_and_version, setup),
		cmocka_unit_test_setup(test_help_states_the_default_master_port, setup),
		cmocka_unit_test_setup(test_duplicate_filters_take_memory_by_their_length, setup),
		cmocka_unit_test_setup(test_errors, setup),
		cmocka_unit_test_setup(test_a_bound_stated_is_the_bound_enforced, setup),
		cmocka_unit_test_setup(test_empty_is_unset, setup),
		cmocka_unit_test_setup(test_an_error_is_one_line_whatever_it_quotes, setup),
		cmocka_unit_test_setup(test_torchrun2_flags, setup),
		cmocka_unit_test_setup(test_node_options_and_rendezvous_settings, setup),
		cmocka_unit_test_setup(test_slurm_gives_nodes_rank_and_master_unless_flags_do,
				       setup),
		cmocka_unit_test_setup(test_slurm_one_node_of_an_allocation_hosts_its_own_store,
				       setup),
		cmocka_unit_test_setup(test_slurm_errors_name_the_variable, setup),
		cmocka_unit_test_setup(test_std_parse, setup),
		cmocka_unit_test_setup(test_ranks_filter, setup),
		cmocka_unit_test_setup(test_ranks_filter_items_are_read_as_python_int, setup),
		cmocka_unit_test_setup(test_integer_options_are_read_as_python_int, setup),
		cmocka_unit_test_setup(test_forward_signals, setup),
		cmocka_unit_test_setup(test_job_resolves_once, setup),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
