/* signame: signal names (see signame.h). */
#include "signame.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

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

const char *signame_of(int sig, char *buf, size_t len)
{
	const char *abbrev = sig > 0 && sig < NSIG ? sigabbrev_np(sig) : NULL;

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
		return 0;
	default:
		return sig > 0 && sig < SIGRTMIN;
	}
}
