/* prog: resolve the workers' program (see prog.h). */
#include "prog.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* The kernel reads at most this much of a "#!" line (BINPRM_BUF_SIZE). */
#define PROG_SHEBANG_MAX 256

/* 0 when path is an executable regular file; else -EACCES (not one, or
 * not allowed), -ELOOP, -ENAMETOOLONG or -ENOTDIR (the shell's 126 with that
 * reason, not "command not found"), or -ENOENT. */
static int check_exec(const char *path)
{
	struct stat st;

	if (stat(path, &st) != 0)
		return errno == ELOOP || errno == ENAMETOOLONG || errno == ENOTDIR ||
				       errno == EACCES
			       ? -errno
			       : -ENOENT;
	if (!S_ISREG(st.st_mode) || access(path, X_OK) != 0)
		return -EACCES;
	return 0;
}

int prog_lookup(const char *name, const char *path_env, char **out)
{
	const char *p;
	bool denied = false;
	int other = 0; /* the first other error met on the way */
	size_t nlen = strlen(name);

	if (nlen == 0)
		return -ENOENT;
	if (strchr(name, '/') != NULL) {
		int rc = check_exec(name);

		if (rc == 0 && (*out = strdup(name)) == NULL)
			return -ENOMEM;
		return rc;
	}
	if (path_env == NULL)
		path_env = "/bin:/usr/bin";
	for (p = path_env;; p++) {
		const char *end = strchr(p, ':');
		size_t dlen = end ? (size_t)(end - p) : strlen(p);
		char *cand = malloc(dlen + nlen + 3);
		int rc;

		if (cand == NULL)
			return -ENOMEM;
		if (dlen == 0)
			snprintf(cand, dlen + nlen + 3, "./%s", name);
		else
			snprintf(cand, dlen + nlen + 3, "%.*s/%s", (int)dlen, p, name);
		rc = check_exec(cand);
		if (rc == 0) {
			*out = cand;
			return 0;
		}
		free(cand);
		/* Every entry is tried, as Python's subprocess (torchrun) and
		 * bash do; a file among the entries is as good as missing. */
		if (rc == -EACCES)
			denied = true;
		else if (rc != -ENOENT && rc != -ENOTDIR && other == 0)
			other = rc;
		if (end == NULL)
			break;
		p = end;
	}
	return denied ? -EACCES : other ? other : -ENOENT;
}

/* In any case: tr.PY is Python to Python (and to torchrun). */
static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);

	return n >= k && strcasecmp(s + n - k, suffix) == 0;
}

/* A file that reads as a Python script torchrun would have run: a "#!" line
 * naming a python, or (none; *guess set, if given) text under a name with
 * no extension, such as "trainer" (job.sh, prog.c are not). */
static bool reads_as_python(const char *path, bool *guess)
{
	char head[PROG_SHEBANG_MAX + 1], *h = head;
	const char *base = strrchr(path, '/');
	ssize_t n;
	int fd;

	base = base != NULL ? base + 1 : path;
	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)) < 0)
		return false;
	n = read(fd, head, PROG_SHEBANG_MAX);
	close(fd);
	if (n <= 0 || memchr(head, '\0', (size_t)n) != NULL) /* empty, or binary */
		return false;
	head[n] = '\0';
	if (strncmp(h, "\xef\xbb\xbf", 3) == 0) /* a UTF-8 byte order mark */
		h += 3;
	if (h[0] != '#' || h[1] != '!') {
		if (guess != NULL)
			*guess = true;
		return strchr(base, '.') == NULL;
	}
	h[strcspn(h, "\n")] = '\0';
	return strstr(h, "python") != NULL;
}

/* A file no exec runs but Python does (torchrun runs every program with
 * Python): readable, not executable, and a zip (Python runs its
 * __main__.py, whatever its name) or reads_as_python's script. */
static bool python_file(const char *path)
{
	char head[4];
	ssize_t n;
	int fd;

	if (access(path, X_OK) == 0 || (fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)) < 0)
		return false;
	n = read(fd, head, sizeof(head));
	close(fd);
	return (n == 4 && memcmp(head, "PK\x03\x04", 4) == 0) || reads_as_python(path, NULL);
}

/* What Python runs and an exec cannot: a script (.py, .pyw), a zip
 * application (.pyz), a directory with a __main__.py, or python_file's. A
 * directory or file is taken only where the name is not a command on PATH
 * (as execvp would find it), or is a path. */
static bool python_program(const char *script, const char *path_env)
{
	struct stat st;
	char *found = NULL;
	bool command;

	if (ends_with(script, ".py") || ends_with(script, ".pyw") || ends_with(script, ".pyz"))
		return true;
	if (stat(script, &st) != 0 || !(S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)))
		return false;
	if (strchr(script, '/') == NULL) {
		command = prog_lookup(script, path_env, &found) == 0;
		free(found);
		if (command)
			return false;
	}
	return S_ISDIR(st.st_mode) || python_file(script);
}

static bool is_ident(char c)
{
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9');
}

/* Length of "${name}" or "$name" (not followed by an identifier character, as
 * Python's string.Template reads it) at s, else 0. */
static size_t var_at(const char *s, const char *name)
{
	size_t n = strlen(name);

	if (s[0] != '$')
		return 0;
	if (s[1] == '{' && strncmp(s + 2, name, n) == 0 && s[2 + n] == '}')
		return n + 3;
	if (strncmp(s + 1, name, n) == 0 && !is_ident(s[1 + n]))
		return n + 1;
	return 0;
}

static bool has_macro(const char *s)
{
	for (; (s = strchr(s, '$')) != NULL; s++)
		if (var_at(s, "local_rank") > 0)
			return true;
	return false;
}

char *prog_template(const char *tpl, const char *const *names, const char *const *values, size_t n,
		    bool escapes)
{
	size_t cap = strlen(tpl) + 1, len = 0, i, m;
	const char *s;
	char *out;

	for (s = tpl; *s != '\0'; s++)
		for (i = 0; i < n; i++)
			if (var_at(s, names[i]) > 0)
				cap += strlen(values[i]);
	out = malloc(cap);
	if (out == NULL)
		return NULL;
	for (s = tpl; *s != '\0';) {
		for (i = 0, m = 0; i < n && m == 0; i++)
			m = var_at(s, names[i]);
		if (m > 0) {
			size_t vl = strlen(values[i - 1]);

			memcpy(out + len, values[i - 1], vl);
			len += vl;
			s += m;
		} else if (escapes && s[0] == '$' && s[1] == '$') {
			out[len++] = '$';
			s += 2;
		} else {
			out[len++] = *s++;
		}
	}
	out[len] = '\0';
	return out;
}

char *prog_subst(const char *arg, int local_rank)
{
	static const char *const names[] = {"local_rank"};
	char num[16];
	const char *values[] = {num};

	snprintf(num, sizeof(num), "%d", local_rank);
	return prog_template(arg, names, values, 1, false); /* ddprun(1): "$$" stays */
}

char **prog_argv_for(const struct prog *p, int local_rank)
{
	char **v;
	int i;

	if (!p->has_macro)
		return p->argv;
	v = calloc((size_t)p->argc + 1, sizeof(*v));
	if (v == NULL)
		return NULL;
	for (i = 0; i < p->argc; i++) {
		v[i] = prog_subst(p->argv[i], local_rank);
		if (v[i] == NULL) {
			prog_argv_free(p, v);
			return NULL;
		}
	}
	return v;
}

void prog_argv_free(const struct prog *p, char **argv)
{
	int i;

	if (argv == NULL || argv == p->argv)
		return;
	for (i = 0; argv[i] != NULL; i++)
		free(argv[i]);
	free(argv);
}

static int resolve_error(int rc, const char *what, bool from_env, char *err, size_t errlen)
{
	struct stat st;

	/* Python's own name came from PYTHON_EXEC: that is what to mend. */
	if (from_env && (rc == -ENOENT || rc == -EACCES)) {
		const char *why = rc == -EACCES ? "permission denied (not an executable file: "
				  : strchr(what, '/') ? "no such file or directory ("
						      : "command not found (";

		if (rc == -EACCES && stat(what, &st) == 0 && S_ISDIR(st.st_mode))
			why = "is a directory (";
		snprintf(err, errlen, "%.300s: %sthe Python that PYTHON_EXEC names)", what, why);
		return rc;
	}

	/* As execvp, a name without '/' is looked up on PATH only; mpirun and
	 * srun users expect `a.out` of the current directory to run. */
	if (rc == -ENOENT && strchr(what, '/') == NULL && stat(what, &st) == 0 &&
	    S_ISREG(st.st_mode))
		snprintf(err, errlen,
			 "%.300s: command not found (it is not on PATH; for the one in this "
			 "directory write ./%.300s)",
			 what, what);
	else if (rc == -ENOENT && strchr(what, '/') != NULL) /* a path, as bash says it */
		snprintf(err, errlen, "%.300s: no such file or directory", what);
	else if (rc == -ENOENT)
		snprintf(err, errlen, "%.300s: command not found", what);
	else if (rc == -EACCES && stat(what, &st) == 0 && S_ISDIR(st.st_mode))
		snprintf(err, errlen, "%.300s: is a directory", what);
	else if (rc == -EACCES)
		snprintf(err, errlen, "%.300s: permission denied (not an executable file)", what);
	else
		snprintf(err, errlen, "%.300s: %s", what, strerror(-rc));
	return rc;
}

/* A script whose "#!" names an interpreter that is not there fails in
 * execve with ENOENT, which blamed the script ("No such file or directory")
 * from every worker. Say which interpreter, as bash's "bad interpreter"
 * does (126), and the usual reason: a line ending in a carriage return. */
static int check_interpreter(const char *path, char *err, size_t errlen)
{
	char line[PROG_SHEBANG_MAX + 1], *interp, *end;
	const char *why;
	struct stat st;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);

	if (fd < 0)
		return 0; /* executable but not readable: execve decides */
	n = read(fd, line, PROG_SHEBANG_MAX);
	close(fd);
	if (n < 2 || line[0] != '#' || line[1] != '!')
		return 0;
	line[n] = '\0';
	for (interp = line + 2; *interp == ' ' || *interp == '\t'; interp++)
		;
	end = interp + strcspn(interp, " \t\n");
	/* No name ("#!" alone on its line), or nothing ends it within what the
	 * kernel reads (its buffer full): the kernel refuses the file itself
	 * (ENOEXEC), and the worker runs it with /bin/sh. A file shorter than
	 * that ends the name where it ends, as the kernel's zeroed buffer does. */
	if (end == interp || (end == line + n && n == PROG_SHEBANG_MAX))
		return 0;
	*end = '\0';
	if (stat(interp, &st) != 0)
		why = "no such file";
	else if (!S_ISREG(st.st_mode) || access(interp, X_OK) != 0)
		why = "not an executable file";
	else
		return 0;
	if (end > interp && end[-1] == '\r')
		snprintf(err, errlen,
			 "%.300s: bad interpreter: its #! line ends in a carriage return (DOS line "
			 "endings: convert the file with dos2unix or sed -i 's/\\r$//')",
			 path);
	else
		snprintf(err, errlen, "%.200s: bad interpreter: %s, named on its #! line: %s", path,
			 interp, why);
	return -ENOEXEC;
}

/* A directory given to Python as its script: it runs the __main__.py in it,
 * which must be there and readable (Python: "can't find '__main__' module"). */
static int python_dir_ok(const char *dir, char *err, size_t errlen)
{
	char main_py[PATH_MAX];
	struct stat st;

	if ((size_t)snprintf(main_py, sizeof(main_py), "%s/__main__.py", dir) >= sizeof(main_py) ||
	    stat(main_py, &st) != 0 || !S_ISREG(st.st_mode) || access(main_py, R_OK) != 0) {
		snprintf(err, errlen,
			 "%.300s: a directory without a readable __main__.py (which Python runs "
			 "for a directory)",
			 dir);
		return -EACCES;
	}
	return 0;
}

int prog_resolve(const struct cli_opts *o, const char *(*getenv_fn)(const char *name),
		 struct prog *p, char *err, size_t errlen)
{
	const char *script = o->prog_argv[0];
	/* torchrun: --run-path runs the path (runpy.run_path), whatever -m and
	 * --no-python say */
	bool module = o->module && !o->run_path;
	bool python, guess = false;
	const char *exe;
	int i, k = 0, rc;

	memset(p, 0, sizeof(*p));
	if (o->run_path)
		python = true;
	else if (o->no_python)
		python = false;
	else
		python = module || python_program(script, getenv_fn("PATH"));
	/* execvp("") fails with ENOENT, as the shell's '' is "command not found";
	 * only an unset or empty PYTHON_EXEC means python3. */
	if (script[0] == '\0' && !module) {
		snprintf(err, errlen, "'': command not found (the program's name is empty)");
		return -ENOENT;
	}
	exe = python ? getenv_fn("PYTHON_EXEC") : script;
	p->exe_from_env = python && exe != NULL && exe[0] != '\0';
	if (python && (exe == NULL || exe[0] == '\0'))
		exe = "python3";
	p->python = python;
	p->exe_name = exe;
	rc = prog_lookup(exe, getenv_fn("PATH"), &p->path);
	if (rc == -EACCES && !python && reads_as_python(exe, &guess)) {
		const char *py = getenv_fn("PYTHON_EXEC");

		/* Without a #! line it may as well be a shell's script. */
		snprintf(err, errlen,
			 "%.300s: permission denied (not an executable file; %s run it as "
			 "%.200s %.300s, or name it .py)",
			 exe,
			 guess ? "chmod +x it, or, if it is a Python script," : "a Python script:",
			 py != NULL && py[0] != '\0' ? py : "python3", exe);
		return rc;
	}
	if (rc != 0)
		return resolve_error(rc, exe, p->exe_from_env, err, errlen);
	if ((rc = check_interpreter(p->path, err, errlen)) != 0)
		return rc;
	if (python && !module && !has_macro(script)) {
		struct stat st;

		if (stat(script, &st) != 0) {
			rc = errno == EACCES ? -EACCES : -ENOENT;
			snprintf(err, errlen, "cannot open %.300s: %s", script, strerror(-rc));
			return rc;
		}
		/* Python runs a directory's (or a zip file's) __main__.py. */
		if (S_ISDIR(st.st_mode)) {
			if ((rc = python_dir_ok(script, err, errlen)) != 0)
				return rc;
		} else if (!S_ISREG(st.st_mode) || access(script, R_OK) != 0) {
			snprintf(err, errlen, "%.300s: permission denied (not a readable file)",
				 script);
			return -EACCES;
		}
	}
	p->argc = o->prog_argc + (python ? (module ? 3 : 2) : 0);
	p->argv = calloc((size_t)p->argc + 1, sizeof(*p->argv));
	if (p->argv == NULL)
		return -ENOMEM;
	if (python) {
		p->argv[k++] = (char *)exe;
		p->argv[k++] = "-u";
		if (module)
			p->argv[k++] = "-m";
	}
	for (i = 0; i < o->prog_argc; i++) {
		p->argv[k++] = o->prog_argv[i];
		if (has_macro(o->prog_argv[i]))
			p->has_macro = true;
	}
	/* torchrun's title: the script (or module) for Python, else the program. */
	p->entrypoint = script;
	return 0;
}

void prog_free(struct prog *p)
{
	free(p->path);
	free(p->argv);
	memset(p, 0, sizeof(*p));
}
