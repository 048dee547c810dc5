/* print: quiet ranks. The C form of MoCo's `builtins.print = print_pass`: on a
 * silenced rank fd 1 is pointed at /dev/null (so printf, puts and any library
 * writing to stdout go quiet), and a copy of the real stdout is kept for
 * ddp_print_force. stderr is never touched. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ddp_internal.h"
#include "util.h"

int ddpi_print_spec_match(const char *spec, int rank, int *match)
{
	const char *p = spec;
	int m = 0;

	if (!strcmp(spec, "all")) {
		*match = 1;
		return 0;
	}
	if (!strcmp(spec, "none")) {
		*match = 0;
		return 0;
	}
	if (!*p)
		return -EINVAL;
	while (*p) {
		char *end;
		long lo, hi;

		if (*p < '0' || *p > '9')
			return -EINVAL;
		lo = strtol(p, &end, 10);
		hi = lo;
		p = end;
		if (*p == '-') {
			p++;
			if (*p < '0' || *p > '9')
				return -EINVAL;
			hi = strtol(p, &end, 10);
			p = end;
		}
		if (lo > hi || hi > 1L << 30)
			return -EINVAL;
		if (rank >= lo && rank <= hi)
			m = 1;
		if (*p == ',') {
			p++;
			if (!*p)
				return -EINVAL;
		} else if (*p) {
			return -EINVAL;
		}
	}
	*match = m;
	return 0;
}

/* A stdout that is a pipe or a socket (ddprun's, srun's, mpirun's) is
 * line-buffered, as a terminal is: fully buffered, as C's stdio makes it,
 * a rank's progress reached the console 4 KiB at a time, or at its exit.
 * Only while stdio has not set it up (no buffer yet: nothing printed, no
 * setvbuf): a mode the program chose stays. A file keeps its full
 * buffering, as under torchrun's -r. */
static void line_buffer_a_pipe(void)
{
	struct stat st;

	if (__fbufsize(stdout) == 0 && fstat(STDOUT_FILENO, &st) == 0 &&
	    (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)))
		setvbuf(stdout, NULL, _IOLBF, 0);
}

/* The live context's saved stdout (one context a process), for
 * ddp_print_force(NULL, ...) on a silenced rank; -1 when not silenced. */
static atomic_int real_stdout = -1;

int ddpi_print_setup(struct ddp_ctx *ctx, const char *spec)
{
	int match, devnull, saved;

	ctx->saved_stdout = -1;
	ctx->print_enabled = 1;
	if (ddpi_print_spec_match(spec, ctx->env.rank, &match) < 0)
		return ddpi_err(-EINVAL, "print ranks '%s' is not all, none or a list like 0,2-3",
				spec);
	if (match) {
		line_buffer_a_pipe();
		return 0;
	}
	fflush(stdout);
	saved = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
	if (saved < 0)
		return 0; /* no stdout at all: nothing to silence */
	devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (devnull < 0 || dup2(devnull, STDOUT_FILENO) < 0) {
		int err = -errno;
		if (devnull >= 0)
			close(devnull);
		close(saved);
		return ddpi_err(err, "cannot silence stdout: %s", strerror(-err));
	}
	close(devnull);
	ctx->saved_stdout = saved;
	ctx->print_enabled = 0;
	atomic_store(&real_stdout, saved);
	return 0;
}

void ddpi_print_restore(struct ddp_ctx *ctx)
{
	if (ctx->saved_stdout < 0)
		return;
	atomic_store(&real_stdout, -1);
	fflush(stdout);
	dup2(ctx->saved_stdout, STDOUT_FILENO);
	close(ctx->saved_stdout);
	ctx->saved_stdout = -1;
	ctx->print_enabled = 1;
}

int ddp_print_enabled(const struct ddp_ctx *ctx)
{
	return ddpi_ctx_known(ctx) ? ctx->print_enabled : 1;
}

int ddp_print_force(struct ddp_ctx *ctx, const char *fmt, ...)
{
	char stackbuf[1024], *buf = stackbuf;
	/* A forked child prints too: its stdout copy is its own to write. */
	const struct ddp_ctx *c = ddpi_ctx_known(ctx);
	int real = c ? c->saved_stdout : atomic_load(&real_stdout);
	int fd = real >= 0 ? real : STDOUT_FILENO;
	int pre = 0, n, rc;
	va_list ap;

	if (c)
		pre = snprintf(buf, sizeof(stackbuf), "[rank%d] ", c->env.rank);
	va_start(ap, fmt);
	n = vsnprintf(buf + pre, sizeof(stackbuf) - pre, fmt, ap);
	va_end(ap);
	if (n < 0)
		return ddpi_err(-EINVAL, "ddp_print_force: cannot format '%.100s'", fmt);
	if ((size_t)(pre + n) >= sizeof(stackbuf)) {
		buf = malloc((size_t)pre + n + 1);
		if (!buf)
			return ddpi_err(-ENOMEM, "ddp_print_force: out of memory for %d bytes",
					pre + n + 1);
		memcpy(buf, stackbuf, pre);
		va_start(ap, fmt);
		vsnprintf(buf + pre, (size_t)n + 1, fmt, ap);
		va_end(ap);
	}
	/* Keep ordering with what this rank already printf'd when stdout is live. */
	if (fd == STDOUT_FILENO)
		fflush(stdout);
	rc = util_write_all(fd, buf, (size_t)pre + n);
	if (buf != stackbuf)
		free(buf);
	if (rc < 0)
		return ddpi_err(rc, "ddp_print_force: cannot write to stdout (fd %d): %s", fd,
				strerror(-rc));
	return pre + n;
}
