/* report_cause: what a failure entry shows when the worker's error file
 * does not tell why it failed: its last stderr lines, the likely cause of
 * an exit 126/127 or a missing shared library, the Python interpreter that
 * ran it (see report.h). */
#include "report.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Longest piece of a stderr line quoted in a cause. */
#define QUOTE_MAX 200

/* Append line p[0..n) as a terminal shows it: what follows its last '\r',
 * without escape sequences or other control characters ('\t' stays). */
static size_t clean_line(char *out, const char *p, size_t n)
{
	const char *cr;
	size_t i, k = 0;

	while (n > 0 && p[n - 1] == '\r')
		n--; /* CRLF */
	cr = memrchr(p, '\r', n);
	if (cr != NULL) {
		n -= (size_t)(cr + 1 - p);
		p = cr + 1;
	}
	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)p[i];

		if (c == 0x1b && i + 1 < n && p[i + 1] == '[') {
			/* CSI: ESC [ parameters, final byte 0x40..0x7e (colours). */
			for (i += 2;
			     i < n && ((unsigned char)p[i] < 0x40 || (unsigned char)p[i] > 0x7e);
			     i++)
				;
			continue;
		}
		if (c == 0x1b && i + 1 < n && p[i + 1] == ']') {
			/* OSC (a window title, a link): up to BEL or ESC \. */
			for (i += 2; i < n && p[i] != '\a' &&
				     !(p[i] == 0x1b && i + 1 < n && p[i + 1] == '\\');
			     i++)
				;
			if (i < n && p[i] == 0x1b)
				i++;
			continue;
		}
		if (c == 0x1b) {
			/* Any other: ESC, intermediate bytes 0x20..0x2f, a final
			 * byte (ESC ( B, ESC =). */
			while (i + 1 < n && (unsigned char)p[i + 1] >= 0x20 &&
			       (unsigned char)p[i + 1] <= 0x2f)
				i++;
			if (i + 1 < n && (unsigned char)p[i + 1] >= 0x30 &&
			    (unsigned char)p[i + 1] <= 0x7e)
				i++;
			continue;
		}
		if (c < 0x20 && c != '\t')
			continue;
		if (c == 0x7f)
			continue;
		out[k++] = (char)c;
	}
	return k;
}

char *report_tail_lines(const char *raw, size_t n, bool cut, int max_lines)
{
	const char *end = raw + n, *start = raw, *p;
	char *out, *o;
	int lines = 0;

	/* Trailing newlines end the last line; they are no lines of their own. */
	while (end > raw && end[-1] == '\n')
		end--;
	/* Walk back over at most max_lines lines. */
	for (p = end; p > raw && lines < max_lines; p--)
		if (p[-1] == '\n' && ++lines == max_lines)
			break;
	start = p;
	if (start == raw && cut && memchr(raw, '\n', (size_t)(end - raw)) != NULL)
		start = (const char *)memchr(raw, '\n', (size_t)(end - raw)) + 1; /* a cut line */
	out = malloc((size_t)(end - start) + 1);
	if (out == NULL)
		return NULL;
	o = out;
	while (start < end) {
		const char *nl = memchr(start, '\n', (size_t)(end - start));
		size_t len = nl ? (size_t)(nl - start) : (size_t)(end - start);

		o += clean_line(o, start, len);
		if (nl != NULL)
			*o++ = '\n';
		start += len + (nl ? 1 : 0);
	}
	*o = '\0';
	return out;
}

/* The line of text holding the first match of needle, or NULL; *len set. */
static const char *line_with(const char *text, const char *needle, size_t *len)
{
	const char *m = text ? strstr(text, needle) : NULL;
	const char *s, *e;

	if (m == NULL)
		return NULL;
	for (s = m; s > text && s[-1] != '\n'; s--)
		;
	e = strchr(m, '\n');
	*len = e ? (size_t)(e - s) : strlen(s);
	return s;
}

static char *quoted(const char *what, const char *line, size_t len)
{
	char *s = NULL;

	if (len > QUOTE_MAX)
		len = QUOTE_MAX;
	if (asprintf(&s, "%s: \"%.*s\"", what, (int)len, line) < 0)
		return NULL;
	return s;
}

char *report_guess_cause(int exitcode, const char *tail)
{
	static const char loader[] = "error while loading shared libraries: ";
	const char *line;
	char *s = NULL;
	size_t len;

	/* ld.so: "PROG: error while loading shared libraries: LIB: REASON". */
	line = line_with(tail, loader, &len);
	if (line != NULL) {
		const char *lib = strstr(line, loader) + sizeof(loader) - 1;
		const char *end = line + len;
		const char *colon = memchr(lib, ':', (size_t)(end - lib));
		const char *why = colon ? colon + 1 : end;
		int nlib = (int)((colon ? colon : end) - lib);

		while (why < end && *why == ' ')
			why++;
		if (nlib > QUOTE_MAX)
			nlib = QUOTE_MAX;
		if (asprintf(&s,
			     "the dynamic loader could not load the shared library %.*s (%.*s): "
			     "install it, or add its directory to LD_LIBRARY_PATH",
			     nlib, lib, (int)((end - why) > QUOTE_MAX ? QUOTE_MAX : end - why),
			     why) < 0)
			return NULL;
		return s;
	}
	if (exitcode == 127) {
		const char *what = "exit 127: a program the worker runs was not found";

		if ((line = line_with(tail, "not found", &len)) != NULL ||
		    (line = line_with(tail, "No such file or directory", &len)) != NULL)
			return quoted(what, line, len);
		return strdup("exit 127: a program the worker runs was not found (or could not be "
			      "loaded); its stderr says no more");
	}
	if (exitcode == 126) {
		const char *what = "exit 126: a program the worker runs could not be executed "
				   "(not executable, or not a program for this machine)";

		if ((line = line_with(tail, "Argument list too long", &len)) != NULL)
			return quoted("exit 126: a program the worker runs could not be executed "
				      "(its arguments and environment together are over the "
				      "system's limit, ARG_MAX)",
				      line, len);
		if ((line = line_with(tail, "Permission denied", &len)) != NULL ||
		    (line = line_with(tail, "Exec format error", &len)) != NULL ||
		    (line = line_with(tail, "cannot execute", &len)) != NULL)
			return quoted(what, line, len);
		return strdup(what);
	}
	return NULL;
}

ssize_t report_file_tail(const char *path, char *buf, size_t cap, bool *cut)
{
	struct stat st;
	off_t from;
	size_t n = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);

	*cut = false;
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return -EINVAL;
	}
	from = st.st_size > (off_t)cap ? st.st_size - (off_t)cap : 0;
	*cut = from > 0;
	while (n < cap) {
		ssize_t r = pread(fd, buf + n, cap - n, from + (off_t)n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	return (ssize_t)n;
}

static int interpreter_text(struct report_entry *e, const struct report_output *o)
{
	char *real = realpath(o->interpreter, NULL);
	char link[4200] = "";
	int rc;

	if (real != NULL && strcmp(real, o->interpreter) != 0)
		snprintf(link, sizeof(link), " -> %s", real);
	free(real);
	if (o->from_env)
		rc = asprintf(&e->interpreter, "%s%s (PYTHON_EXEC=%s)", o->interpreter, link,
			      o->interp_name);
	else
		rc = asprintf(&e->interpreter,
			      "%s%s (%s found on PATH; PYTHON_EXEC chooses another)",
			      o->interpreter, link, o->interp_name);
	if (rc < 0) {
		e->interpreter = NULL;
		return -ENOMEM;
	}
	return 0;
}

int report_entry_add_output(struct report_entry *e, const struct report_output *o)
{
	bool traceback = e->error_json != NULL && strcmp(e->message, REPORT_BAD_ERROR_FILE) != 0;

	if (o->tail != NULL && !traceback) { /* the error file tells otherwise */
		e->tail = report_tail_lines(o->tail, o->tail_len, o->tail_cut, REPORT_TAIL_LINES);
		if (e->tail == NULL)
			return -ENOMEM;
	}
	if (o->log_file != NULL && (e->log_file = strdup(o->log_file)) == NULL)
		return -ENOMEM;
	if (e->exitcode > 0) {
		e->cause = report_guess_cause(e->exitcode, e->tail);
		if (e->cause == NULL && traceback && o->tail != NULL) {
			char *t = report_tail_lines(o->tail, o->tail_len, o->tail_cut, 100);

			e->cause = t ? report_guess_cause(e->exitcode, t) : NULL;
			free(t);
		}
		/* NULL is also what ENOMEM gives: the report is fine without. */
	}
	if (e->cause == NULL && o->reader_gone &&
	    (e->exitcode == -SIGPIPE || (e->tail != NULL && strstr(e->tail, "BrokenPipeError")) ||
	     strstr(e->message, "BrokenPipeError") != NULL))
		e->cause = strdup("the reader of ddprun's output went away (`| head`, a pager that "
				  "quit), so the worker's writes there failed, as they would have "
				  "without ddprun between");
	if (o->python && o->interpreter != NULL && interpreter_text(e, o) != 0)
		return -ENOMEM;
	if (!o->python && e->error_file == NULL && e->exitcode >= 0) {
		/* torchrun's advice is about @record in a Python script. */
		free(e->message);
		e->message = strdup("<N/A> (no error file)");
		if (e->message == NULL)
			return -ENOMEM;
	}
	return 0;
}
