/* libFuzzer target for ddprun's command line (launcher/cli.h: cli_parse).
 * The input is "NAME=VALUE\0...\0\0ARG\0ARG..." : the environment the
 * getenv function reads (PET_*, SLURM_*, ...), an empty string, then the
 * arguments after "ddprun". cli.h's contract: CLI_OK, CLI_HELP, CLI_VERSION,
 * or -EINVAL with one line in err; the options within their documented
 * ranges. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "cli.h"

#define MAX_ARGS 256

static char *env[MAX_ARGS];
static int nenv;

static const char *fuzz_getenv(const char *name)
{
	size_t n = strlen(name);
	int i;

	for (i = 0; i < nenv; i++)
		if (strncmp(env[i], name, n) == 0 && env[i][n] == '=')
			return env[i] + n + 1;
	return NULL;
}

static void check_ok(const struct cli_opts *o)
{
	int i;

	CHECK(o->prog_argc >= 1 && o->prog_argv[o->prog_argc] == NULL);
	if (o->nproc_kind == CLI_NPROC_NUM)
		CHECK(o->nproc >= 1 && o->nproc <= CLI_MAX_NPROC);
	CHECK(o->min_nodes >= 1 && o->min_nodes <= o->max_nodes && o->max_nodes <= CLI_MAX_NODES);
	CHECK(o->node_rank >= 0 && o->node_rank < CLI_MAX_NODES);
	CHECK(o->master_addr != NULL && o->master_addr[0] != '\0');
	CHECK(o->master_port >= 0 && o->master_port <= 65535);
	CHECK(o->max_restarts >= 0);
	CHECK(o->nsignals >= 0 && o->nsignals <= CLI_MAX_SIGNALS);
	CHECK(o->nfwd_signals >= 0 && o->nfwd_signals <= CLI_MAX_SIGNALS);
	CHECK(o->shutdown_timeout_ms >= 0 && o->hang_timeout_ms >= 0);
	CHECK(o->nranks_filter >= 0 && o->nranks_filter <= CLI_MAX_NPROC);
	for (i = 0; i < o->nranks_filter; i++)
		CHECK(o->ranks_filter[i] >= 0 && o->ranks_filter[i] < CLI_MAX_NPROC);
	for (i = 0; i < CLI_MAX_NPROC; i++) {
		int r = cli_std_get(&o->redirects, i), t = cli_std_get(&o->tee, i);

		CHECK(r >= CLI_STD_NONE && r <= CLI_STD_ALL && t >= CLI_STD_NONE &&
		      t <= CLI_STD_ALL);
	}
	for (i = 0; i < 2; i++)
		for (int k = 0; k < o->dup_filters[i].n; k++)
			CHECK(o->dup_filters[i].s[k] != NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = malloc(size + 1), *argv[MAX_ARGS + 2], err[512], *p, *end;
	struct cli_opts o;
	FILE *null;
	int argc = 0, rc;
	bool in_env = true;

	if (buf == NULL)
		return 0;
	memcpy(buf, data, size);
	buf[size] = '\0';
	nenv = 0;
	argv[argc++] = "ddprun";
	for (p = buf, end = buf + size; p < end; p += strlen(p) + 1) {
		if (in_env && *p == '\0')
			in_env = false; /* the environment ends */
		else if (in_env && nenv < MAX_ARGS)
			env[nenv++] = p;
		else if (!in_env && argc < MAX_ARGS + 1)
			argv[argc++] = p;
	}
	argv[argc] = NULL;
	memset(err, 'x', sizeof(err));
	rc = cli_parse(argc, argv, fuzz_getenv, &o, err, sizeof(err));
	CHECK(rc == CLI_OK || rc == CLI_HELP || rc == CLI_VERSION || rc == -EINVAL);
	if (rc == -EINVAL) {
		CHECK(memchr(err, '\0', sizeof(err)) != NULL);
		CHECK(err[0] != '\0' && strchr(err, '\n') == NULL);
	} else if (rc == CLI_OK) {
		check_ok(&o);
		(void)cli_multinode(&o);
		null = fopen("/dev/null", "w");
		if (null != NULL) {
			cli_torch2_warn(&o, o.nproc_kind == CLI_NPROC_NUM ? o.nproc : 4, null);
			fclose(null);
		}
		cli_free(&o);
	}
	free(buf);
	return 0;
}
