/* signame: signal numbers <-> names ("SIGTERM" <-> 15) for the command line
 * (--signals-to-handle, --forward-signals) and the failure report ("Signal 11
 * (SIGSEGV)"). */
#ifndef DDP_SIGNAME_H
#define DDP_SIGNAME_H

#include <stddef.h>

/* "SIGTERM" (exact, upper case, with the SIG prefix, as torchrun takes it) to
 * its number; -EINVAL for an unknown name. */
int signame_to_num(const char *name);

/* As signame_to_num, and also without the prefix, in either case, or as a
 * number ("SIGUSR1", "USR1", "usr1", "10"), for ddprun's own options. */
int signame_to_num_loose(const char *name);

/* "SIGSEGV" for 11; "SIG<n>" for a signal without a name. Writes into buf. */
const char *signame_of(int sig, char *buf, size_t len);

/* 1 if a launcher may catch and forward sig (not SIGKILL/SIGSTOP, not the
 * synchronous fault signals, not SIGCHLD which the agent needs, nor
 * SIGPIPE and SIGXFSZ which ddprun ignores). */
int signame_forwardable(int sig);

#endif
