/* prog: what each worker runs, decided once before any worker starts.
 *
 * Rules (ddprun's, close to torchrun's): --run-path or a PROGRAM ending in
 * ".py", ".pyw" or ".pyz" (any case), or a directory with a __main__.py,
 * runs "$PYTHON_EXEC -u PROGRAM ARGS" (PYTHON_EXEC defaults to python3);
 * -m runs "$PYTHON_EXEC -u -m MODULE ARGS"; anything else, or --no-python, is
 * exec'd directly. The executable is looked up on PATH exactly as execvp
 * does, and the resolved path is what the workers exec, so a program that is
 * missing (-ENOENT, exit 127) or not executable (-EACCES, exit 126) is
 * reported before any worker starts. "${local_rank}" and "$local_rank" in the
 * arguments become each worker's local rank. */
#ifndef DDP_PROG_H
#define DDP_PROG_H

#include <stdbool.h>
#include <stddef.h>

#include "cli.h"

struct prog {
	char *path;  /* executable to execve (resolved) */
	char **argv; /* argv template, NULL-terminated (argv[0] as given) */
	int argc;
	const char *entrypoint; /* name in the failure report's title */
	bool has_macro;		/* some argument mentions local_rank */
	bool python;		/* run by the Python interpreter at path */
	const char *exe_name;	/* what was looked up: $PYTHON_EXEC, python3, ... */
	bool exe_from_env;	/* exe_name is $PYTHON_EXEC */
};

/* The workers' program from the command line; 0, or an error said in err:
 * -ENOENT (not found), -EACCES (not executable), -ENOEXEC (its "#!" names
 * an interpreter that is missing or not executable), -ENOMEM. */
int prog_resolve(const struct cli_opts *o, const char *(*getenv_fn)(const char *name),
		 struct prog *p, char *err, size_t errlen);
void prog_free(struct prog *p);

/* execvp's search: name containing '/' is taken as is; else each PATH entry
 * (PATH unset: /bin:/usr/bin; an empty entry: the current directory), every
 * one, as Python's subprocess does. *out is malloc'd. -ENOENT, -EACCES
 * (found but not an executable file), -ELOOP, -ENAMETOOLONG, -ENOTDIR (the
 * name's own path; on PATH, the first met where nothing is found), -ENOMEM. */
int prog_lookup(const char *name, const char *path_env, char **out);

/* Copy of tpl with "${name}" / "$name" replaced by values (the variables of
 * Python's string.Template.safe_substitute; other '$' text is kept as is,
 * but for "$$", which is "$" where escapes is set, as there). malloc'd, NULL
 * on ENOMEM. */
char *prog_template(const char *tpl, const char *const *names, const char *const *values, size_t n,
		    bool escapes);
/* Copy of arg with the local_rank macros replaced (malloc'd), NULL on ENOMEM. */
char *prog_subst(const char *arg, int local_rank);

/* argv for one worker: p->argv itself when nothing needs substituting, else a
 * malloc'd copy (release with prog_argv_free). */
char **prog_argv_for(const struct prog *p, int local_rank);
void prog_argv_free(const struct prog *p, char **argv);

#endif
