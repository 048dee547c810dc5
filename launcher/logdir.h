/* logdir: where workers' logs and error files go.
 *
 * With --log-dir (or -r/-t without it), torchrun's layout:
 *   <base>/<run_id>_XXXXXX/attempt_<n>/<local_rank>/{stdout.log,stderr.log,error.json}
 * base is --log-dir (created if missing), or a fresh <tmp>/ddprun_XXXXXX
 * (torchrun's is torchelastic_XXXXXX) that is kept, since the logs are there.
 * Each attempt directory is emptied and made anew.
 *
 * Otherwise only error files are needed: they go flat into a private
 * <tmp>/ddprun_XXXXXX as attempt_<n>.<local_rank>.error.json (one directory
 * to make, none per worker), removed at the end unless the failure report
 * names a file in it. <tmp> is tmpdir_find's (tmpdir.h): $TMPDIR if usable. */
#ifndef DDP_LOGDIR_H
#define DDP_LOGDIR_H

#include <stdbool.h>
#include <stddef.h>

struct logdir {
	char *base;	/* created by us when temporary */
	char *run_dir;	/* <base>/<run_id>_XXXXXX */
	bool temporary; /* removable: the flat error-file directory */
	bool flat;
	int attempt;
};

/* base: --log-dir or NULL; layout: the torchrun layout is wanted even without
 * a base (logs are redirected). 0 or a negative errno; err names the path. */
int logdir_create(struct logdir *ld, const char *base, const char *run_id, bool layout, char *err,
		  size_t errlen);
/* Make attempt_<n>/0 .. attempt_<n>/<nproc-1>. */
int logdir_attempt(struct logdir *ld, int attempt, int nproc, char *err, size_t errlen);
/* The path of a worker's file for the current attempt (malloc'd); NULL on
 * ENOMEM, or where no directory was made (--log-dir /dev/null). */
char *logdir_path(const struct logdir *ld, int local_rank, const char *file);
/* Remove the temporary base directory and everything in it. */
void logdir_remove(struct logdir *ld);
void logdir_free(struct logdir *ld);

/* rm -rf path (no symlink is followed). 0 or a negative errno. */
int logdir_rmtree(const char *path);

#endif
