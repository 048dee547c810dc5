/* slurm_conf: one value of a slurm.conf (see slurm.h). */
#include "slurm.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Lines are "Key=Value" (keys in any case, "#" starts a comment); later
 * lines win, as in Slurm. Include files are not followed. */
int slurm_conf_value(const char *path, const char *key, char *buf, size_t len)
{
	char line[1024];
	size_t klen = strlen(key);
	int found = -ENOENT;
	FILE *f;

	if (path == NULL || (f = fopen(path, "re")) == NULL)
		return -ENOENT;
	while (fgets(line, sizeof(line), f) != NULL) {
		char *p = line, *v, *end;

		while (isspace((unsigned char)*p))
			p++;
		if (strncasecmp(p, key, klen) != 0)
			continue;
		v = p + klen;
		while (*v == ' ' || *v == '\t')
			v++;
		if (*v != '=')
			continue;
		v++;
		while (*v == ' ' || *v == '\t')
			v++;
		end = v + strcspn(v, " \t#\r\n");
		snprintf(buf, len, "%.*s", (int)(end - v), v);
		found = 0;
	}
	fclose(f);
	return found;
}

bool slurm_proctrack_linuxproc(const char *conf)
{
	char v[64];

	if (slurm_conf_value(conf != NULL ? conf : "/etc/slurm/slurm.conf", "ProctrackType", v,
			     sizeof(v)) != 0)
		return false;
	return strcasecmp(v, "proctrack/linuxproc") == 0;
}
