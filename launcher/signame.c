/* signame: signal names (see signame.h). */
#include "signame.h"

#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "util.h"

int signame_to_num(const char *name)
{
	int sig;

	if (name == NULL || strncmp(name, "SIG", 3) != 0 || name[3] == '\0')
		return -EINVAL;
	for (sig = 1; sig < NSIG; sig++) {
		const char *abbrev = sigabbrev_np(sig);

		if (abbrev != NULL && strcmp(abbrev, name + 3) == 0)
			return sig;
	}
	return -EINVAL;
}

int signame_to_num_loose(const char *name)
{
	char up[24] = "SIG";
	size_t i, k = 3;
	int sig;

	if (name == NULL || name[0] == '\0')
		return -EINVAL;
	if (isdigit((unsigned char)name[0]))
		return util_parse_int(name, 1, NSIG - 1, &sig) == 0 ? sig : -EINVAL;
	if (strncasecmp(name, "SIG", 3) == 0)
		name += 3;
	for (i = 0; name[i] != '\0'; i++) {
		if (k + 1 >= sizeof(up))
			return -EINVAL;
		up[k++] = (char)toupper((unsigned char)name[i]);
	}
	up[k] = '\0';
	return signame_to_num(up);
}

const char *signame_of(int sig, char *buf, size_t len)
{
	const char *abbrev = sig > 0 && sig < NSIG ? sigabbrev_np(sig) : NULL;

	/* The real-time signals' ends have names, as Python's signal.Signals
	 * (torchrun's) gives them; those between have none. */
	if (abbrev == NULL && sig == SIGRTMIN)
		abbrev = "RTMIN";
	else if (abbrev == NULL && sig == SIGRTMAX)
		abbrev = "RTMAX";
	if (abbrev != NULL)
		snprintf(buf, len, "SIG%s", abbrev);
	else
		snprintf(buf, len, "SIG%d", sig);
	return buf;
}

int signame_forwardable(int sig)
{
	switch (sig) {
	case SIGKILL:
	case SIGSTOP:
	case SIGCHLD:
	case SIGSEGV:
	case SIGBUS:
	case SIGFPE:
	case SIGILL:
	case SIGTRAP:
	case SIGSYS:
	case SIGPIPE:
	case SIGXFSZ: /* ddprun ignores both: its writes fail instead (main.c) */
		return 0;
	default:
		return sig > 0 && sig < SIGRTMIN;
	}
}
