/* agent_dup: torchrun 2.x's --duplicate-std{out,err}-filters. Every line of
 * a tee'd stream that contains one of the filters is also written, with the
 * stream's console prefix, to <run_dir>/attempt_<n>/filtered_std{out,err}.log,
 * one file per attempt for all local ranks (torchrun's layout and rule: only
 * tee'd streams are copied). */
#include "agent_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

static const char *const dup_file[2] = {"filtered_stdout.log", "filtered_stderr.log"};

void agent_dup_close(struct agent *a)
{
	int s;

	for (s = 0; s < 2; s++) {
		if (a->dup_fd[s] >= 0)
			close(a->dup_fd[s]);
		a->dup_fd[s] = -1;
	}
}

int agent_dup_attempt(struct agent *a, char *err, size_t errlen)
{
	char path[4096];
	int s;

	agent_dup_close(a);
	for (s = 0; s < 2; s++) {
		if (a->job->dup_filters[s].n == 0 || a->logdir.flat || a->logdir.run_dir == NULL)
			continue;
		snprintf(path, sizeof(path), "%s/attempt_%d/%s", a->logdir.run_dir,
			 a->logdir.attempt, dup_file[s]);
		a->dup_fd[s] =
			open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
		if (a->dup_fd[s] < 0) {
			int rc = -errno;

			snprintf(err, errlen, "cannot open %.300s: %s", path, strerror(errno));
			return rc;
		}
	}
	return 0;
}

/* output_line_cb of a tee'd stream: s->console_fd says which one it is. */
static void dup_line(struct output_stream *s, const char *line, size_t n)
{
	struct agent *a = s->data;
	int k = s->console_fd == 2 ? 1 : 0;
	struct iovec iov[3] = {
		{(void *)s->prefix, s->prefix_len},
		{(void *)line, n},
		{"\n", 1},
	};

	if (a->dup_fd[k] < 0 || !cli_filters_match(&a->job->dup_filters[k], line, n))
		return;
	/* One writev per line on an O_APPEND file: lines stay whole. A full
	 * disk loses the copy, never the worker's output. */
	if (writev(a->dup_fd[k], iov, 3) < 0)
		return;
}

output_line_cb agent_dup_cb(struct agent *a, int s, bool tee)
{
	return tee && a->dup_fd[s] >= 0 ? dup_line : NULL;
}
