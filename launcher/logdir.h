/* logdir: torchrun's log directory layout.
 *
 *   <base>/<run_id>_XXXXXX/attempt_<n>/<local_rank>/{stdout.log,stderr.log,error.json}
 *
 * base is --log-dir (created if missing), or, without it, a fresh
 * $TMPDIR/ddprun_XXXXXX (torchrun uses torchelastic_XXXXXX) that ddprun removes
 * at the end unless the failure report names an error file in it. Each attempt directory is emptied and made anew. */
#ifndef DDP_LOGDIR_H
#define DDP_LOGDIR_H

#include <stdbool.h>
#include <stddef.h>

struct logdir {
	char *base;    /* created by us when temporary */
	char *run_dir; /* <base>/<run_id>_XXXXXX */
	bool temporary;
	int attempt;
};

/* 0 or a negative errno; err names the failing path. */
int logdir_create(struct logdir *ld, const char *base, const char *run_id, char *err,
		  size_t errlen);
/* Make attempt_<n>/0 .. attempt_<n>/<nproc-1>. */
int logdir_attempt(struct logdir *ld, int attempt, int nproc, char *err, size_t errlen);
/* "<run_dir>/attempt_<n>/<local_rank>/<file>" (malloc'd), NULL on ENOMEM. */
char *logdir_path(const struct logdir *ld, int local_rank, const char *file);
/* Remove the temporary base directory and everything in it. */
void logdir_remove(struct logdir *ld);
void logdir_free(struct logdir *ld);

/* rm -rf path (no symlink is followed). 0 or a negative errno. */
int logdir_rmtree(const char *path);

#endif
