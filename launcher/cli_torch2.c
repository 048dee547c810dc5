/* cli_torch2: the flags torchrun 2.x added, and the warnings for what of
 * them ddprun accepts without a use (see cli.h). */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

bool cli_event_handler_known(const char *name)
{
	/* torch/distributed/elastic/events/handlers.py: _log_handlers */
	return strcmp(name, "null") == 0 || strcmp(name, "console") == 0 ||
	       strcmp(name, "dynamic_rendezvous") == 0;
}

static const char *const numa_names[] = {
	[CLI_NUMA_NONE] = "none",	 [CLI_NUMA_NODE] = "node",
	[CLI_NUMA_SOCKET] = "socket",	 [CLI_NUMA_EXCLUSIVE] = "exclusive",
	[CLI_NUMA_CCX] = "core-complex",
};

int cli_numa_mode_parse(const char *s, enum cli_numa *out)
{
	int i;

	for (i = CLI_NUMA_NODE; i <= CLI_NUMA_CCX; i++)
		if (strcmp(s, numa_names[i]) == 0) {
			*out = (enum cli_numa)i;
			return 0;
		}
	return -EINVAL;
}

const char *cli_numa_mode_name(enum cli_numa m)
{
	return numa_names[m];
}

int cli_filters_parse(const char *s, struct cli_filters *f)
{
	size_t len = strlen(s), i;
	int n = 1;

	f->s = NULL;
	f->n = 0;
	if (len == 0)
		return 0; /* torchrun's help: an empty list duplicates nothing */
	for (i = 0; i < len; i++)
		if (s[i] == ',' && s[i + 1] == ',')
			i++;
		else if (s[i] == ',')
			n++;
	f->s = calloc((size_t)n, sizeof(char *));
	if (f->s == NULL)
		return -ENOMEM;
	/* Each item in a buffer of its own length (one of the whole list's
	 * length each made "a,a,a,..." take memory by its length squared). */
	for (i = 0; f->n < n; i++) { /* i: where the item starts */
		size_t end, l = 0, k = 0;
		char *item;

		for (end = i; s[end] != '\0' && !(s[end] == ',' && s[end + 1] != ','); end++, l++)
			if (s[end] == ',')
				end++; /* ",," is one comma */
		item = malloc(l + 1);
		if (item == NULL) {
			cli_filters_free(f);
			return -ENOMEM;
		}
		for (; i < end; i++, k++) {
			item[k] = s[i];
			if (s[i] == ',')
				i++;
		}
		item[k] = '\0';
		f->s[f->n++] = item;
		/* An empty item matches every line (torchrun's does): a stray
		 * comma would copy everything, which no one means. */
		if (k == 0) {
			cli_filters_free(f);
			return -EINVAL;
		}
	}
	return 0;
}

void cli_filters_free(struct cli_filters *f)
{
	int i;

	for (i = 0; i < f->n; i++)
		free(f->s[i]);
	free(f->s);
	f->s = NULL;
	f->n = 0;
}

bool cli_filters_match(const struct cli_filters *f, const char *line, size_t n)
{
	int i;

	for (i = 0; i < f->n; i++) {
		size_t k = strlen(f->s[i]);

		if (k == 0)
			return true;
		if (k <= n && memmem(line, n, f->s[i], k) != NULL)
			return true;
	}
	return false;
}

/* Whether any local rank's stream s (0 stdout, 1 stderr) is tee'd and shown,
 * the streams torchrun copies to filtered_std{out,err}.log. */
static bool any_teed(const struct cli_opts *o, int nproc, int s)
{
	int bit = s == 0 ? CLI_STD_OUT : CLI_STD_ERR, lr;

	for (lr = 0; lr < nproc; lr++)
		if ((cli_std_get(&o->tee, lr) & bit) != 0 && cli_rank_shown(o, lr))
			return true;
	return false;
}

void cli_torch2_warn(const struct cli_opts *o, int nproc, FILE *f)
{
	static const char *const flag[2] = {"--duplicate-stdout-filters",
					    "--duplicate-stderr-filters"};
	int s;

	if (o->ignored[0] != '\0')
		fprintf(f,
			"ddprun: warning: %s %s ignored: %s runs this node alone, with its store "
			"on a "
			"free port of this machine (as torchrun's)\n",
			o->ignored, strchr(o->ignored, ',') ? "are" : "is",
			o->standalone ? "--standalone" : "--rdzv-endpoint with port 0");
	if (o->rdzv.unknown[0] != '\0')
		fprintf(f,
			"ddprun: warning: --rdzv-conf: ddprun does not use %s (passed over, as "
			"torchrun passes keys its backend does not read)\n",
			o->rdzv.unknown);
	if (o->logs_specs != NULL)
		fprintf(f,
			"ddprun: warning: --logs-specs %s is ignored: it names a Python entry "
			"point; ddprun writes torchrun's default log layout\n",
			o->logs_specs);
	if (o->event_log_handler != NULL && strcmp(o->event_log_handler, "null") != 0)
		fprintf(f,
			"ddprun: warning: --event-log-handler %s is ignored: ddprun records no "
			"torchelastic events\n",
			o->event_log_handler);
	for (s = 0; s < 2; s++)
		if (o->dup_filters[s].n > 0 && o->logs_off)
			fprintf(f,
				"ddprun: warning: %s writes its copy into the log directory, and "
				"--log-dir /dev/null writes no logs: no line is copied\n",
				flag[s]);
		else if (o->dup_filters[s].n > 0 && !any_teed(o, nproc, s))
			fprintf(f,
				"ddprun: warning: %s copies only tee'd streams (-t/--tee), as "
				"torchrun's does: no %s is tee'd, so no line is copied\n",
				flag[s], s == 0 ? "stdout" : "stderr");
}
