/* Unit tests for launcher/prog.c and workenv.c: what runs (PATH lookup as
 * execvp, *.py with Python -u, -m), ${local_rank}, and the environment. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "prog.h"
#include "workenv.h"

static void test_subst(void **state)
{
	char *s;

	s = prog_subst("--local-rank=${local_rank}", 3);
	assert_string_equal(s, "--local-rank=3");
	free(s);
	s = prog_subst("$local_rank/$local_rank_x/${local_rankx}/$$/${other}", 12);
	assert_string_equal(s, "12/$local_rank_x/${local_rankx}/$$/${other}");
	free(s);
	s = prog_subst("no macro", 1);
	assert_string_equal(s, "no macro");
	free(s);
}

static void test_template(void **state)
{
	const char *names[] = {"role_name", "rank", "local_rank"};
	const char *values[] = {"trainer", "7", "3"};
	char *s = prog_template("[${role_name}:$rank/${local_rank}] $ranks $$", names, values, 3,
				false);

	assert_string_equal(s, "[trainer:7/3] $ranks $$");
	free(s);
	/* string.Template's escape, as the prefix template's: "$$" is "$" */
	s = prog_template("<$$> $$rank $$$rank ${rank}$$", names, values, 3, true);
	assert_string_equal(s, "<$> $rank $7 7$");
	free(s);
}

static void test_lookup_like_execvp(void **state)
{
	char dir[] = "/tmp/test_launch_prog_XXXXXX";
	char path[256], pathenv[600];
	char *out = NULL;
	FILE *f;

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/tool", dir);
	f = fopen(path, "w");
	fputs("#!/bin/sh\n", f);
	fclose(f);
	chmod(path, 0644);
	snprintf(pathenv, sizeof(pathenv), "/nonexistent:%s", dir);
	/* Present but not executable: EACCES (126), like execvp. */
	assert_int_equal(prog_lookup("tool", pathenv, &out), -EACCES);
	chmod(path, 0755);
	assert_int_equal(prog_lookup("tool", pathenv, &out), 0);
	assert_string_equal(out, path);
	free(out);
	assert_int_equal(prog_lookup("nope-not-here", pathenv, &out), -ENOENT);
	assert_int_equal(prog_lookup("", pathenv, &out), -ENOENT);
	assert_int_equal(prog_lookup(dir, pathenv, &out), -EACCES); /* a directory */
	assert_int_equal(prog_lookup("sh", NULL, &out), 0);	    /* default /bin:/usr/bin */
	assert_string_equal(out, "/bin/sh");
	free(out);
	unlink(path);
	rmdir(dir);
}

static const char *python_env(const char *name)
{
	if (strcmp(name, "PYTHON_EXEC") == 0)
		return "sh"; /* any executable stands in for the interpreter */
	return getenv(name);
}

static const char *getenv_ptr(const char *name)
{
	return getenv(name);
}

static void resolve(const char *const *words, int n, bool module, struct prog *p)
{
	struct cli_opts o = {.module = module, .prog_argv = (char **)words, .prog_argc = n};
	char err[256];

	assert_int_equal(prog_resolve(&o, python_env, p, err, sizeof(err)), 0);
}

static void test_resolve_python_script_and_module(void **state)
{
	char script[] = "/tmp/test_launch_prog_XXXXXX.py";
	const char *words[] = {script, "--x=${local_rank}"};
	const char *mod[] = {"pkg.train", "a"};
	struct prog p;
	char **argv;

	close(mkstemps(script, 3));
	resolve(words, 2, false, &p);
	assert_string_equal(p.path + strlen(p.path) - 3, "/sh");
	assert_int_equal(p.argc, 4);
	assert_string_equal(p.argv[1], "-u");
	assert_string_equal(p.argv[2], script);
	assert_true(p.has_macro);
	assert_string_equal(p.entrypoint, script);
	argv = prog_argv_for(&p, 5);
	assert_string_equal(argv[3], "--x=5");
	assert_null(argv[4]);
	prog_argv_free(&p, argv);
	prog_free(&p);
	unlink(script);

	resolve(mod, 2, true, &p);
	assert_int_equal(p.argc, 5);
	assert_string_equal(p.argv[1], "-u");
	assert_string_equal(p.argv[2], "-m");
	assert_string_equal(p.argv[3], "pkg.train");
	assert_false(p.has_macro);
	assert_ptr_equal(prog_argv_for(&p, 0), p.argv);
	prog_free(&p);
}

/* What Python runs and an exec cannot is run with Python, as torchrun runs
 * every program: a zip application, a script named .PY, a directory with a
 * __main__.py (given as a path, or a name no command on PATH has). They
 * were exec'd: "command not found", exit 127. */
static void test_resolve_what_python_runs_by_its_name_or_kind(void **state)
{
	char dir[] = "/tmp/test_launch_prog_XXXXXX", main_py[64], app[64], upper[64];
	const char *words[1];
	struct prog p;
	char err[256];

	assert_non_null(mkdtemp(dir));
	snprintf(main_py, sizeof(main_py), "%s/__main__.py", dir);
	snprintf(app, sizeof(app), "%s/app.pyz", dir);
	snprintf(upper, sizeof(upper), "%s/tr2.PY", dir);
	close(open(main_py, O_CREAT | O_WRONLY, 0644));
	close(open(app, O_CREAT | O_WRONLY, 0644));
	close(open(upper, O_CREAT | O_WRONLY, 0644));
	words[0] = dir;
	resolve(words, 1, false, &p);
	assert_true(p.python);
	assert_string_equal(p.argv[2], dir);
	prog_free(&p);
	words[0] = app;
	resolve(words, 1, false, &p);
	assert_true(p.python);
	prog_free(&p);
	words[0] = upper;
	resolve(words, 1, false, &p);
	assert_true(p.python);
	prog_free(&p);
	/* A directory named as a command on PATH is not taken for Python. */
	{
		char cwd[4096];
		struct cli_opts o = {.prog_argv = (char **)words, .prog_argc = 1};

		assert_non_null(getcwd(cwd, sizeof(cwd)));
		assert_int_equal(chdir(dir), 0);
		assert_int_equal(mkdir("sh", 0755), 0);
		words[0] = "sh";
		assert_int_equal(prog_resolve(&o, python_env, &p, err, sizeof(err)), 0);
		assert_false(p.python);
		prog_free(&p);
		assert_int_equal(rmdir("sh"), 0);
		assert_int_equal(chdir(cwd), 0);
	}
	unlink(main_py);
	unlink(app);
	unlink(upper);
	rmdir(dir);
}

static void test_resolve_errors(void **state)
{
	const char *missing[] = {"/nonexistent/train.py"};
	char plain[] = "/tmp/test_launch_prog_XXXXXX";
	const char *noexec[] = {plain};
	struct cli_opts o = {.prog_argv = (char **)missing, .prog_argc = 1};
	struct prog p;
	char err[256];

	close(mkstemp(plain)); /* mode 0600: not executable */

	assert_int_equal(prog_resolve(&o, python_env, &p, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "/nonexistent/train.py"));
	prog_free(&p);
	o.prog_argv = (char **)noexec;
	assert_int_equal(prog_resolve(&o, python_env, &p, err, sizeof(err)), -EACCES);
	prog_free(&p);
	unlink(plain);
}

/* ddprun '' is "command not found" (execvp("") is ENOENT), not python3 run
 * with an empty argv[0], which read its script from stdin and exited 0. */
static void test_resolve_empty_name(void **state)
{
	const char *empty[] = {"", "a.py"};
	struct cli_opts o = {.prog_argv = (char **)empty, .prog_argc = 2};
	struct prog p;
	char err[256];

	assert_int_equal(prog_resolve(&o, getenv_ptr, &p, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "'': command not found"));
	prog_free(&p);
	o.run_path = true;
	assert_int_equal(prog_resolve(&o, getenv_ptr, &p, err, sizeof(err)), -ENOENT);
	prog_free(&p);
}

static const char *env_get(char **env, const char *name)
{
	size_t n = strlen(name);

	for (; *env != NULL; env++)
		if (strncmp(*env, name, n) == 0 && (*env)[n] == '=')
			return *env + n + 1;
	return NULL;
}

static void test_workenv(void **state)
{
	char *parent[] = {"PATH=/bin",
			  "RANK=99",
			  "OMP_NUM_THREADS=4",
			  "RANKX=keep",
			  "DDP_SHM_NONCE=outer",
			  "DDP_TIMEOUT=5",
			  NULL};
	char *outer[] = {"MASTER_ADDR=outer", "MASTER_PORT=1", "TORCHELASTIC_ERROR_FILE=/o", NULL};
	/* Node 1 of 2; the role's ranks (another role on node 0) count apart. */
	struct workenv_job j = {.world = {.world_size = 8,
					  .group_rank = 1,
					  .group_world_size = 2,
					  .rank_offset = 4,
					  .role_rank_offset = 0,
					  .role_world_size = 4,
					  .master_addr = "10.0.0.1",
					  .master_port = 29500,
					  .restart_count = 2,
					  .use_agent_store = true},
				.local_world_size = 4,
				.role = "trainer",
				.run_id = "job",
				.max_restarts = 3,
				.shm_nonce = "0123abcd"};
	char **env = workenv_build(parent, &j, 1, "/l/error.json");
	int n = 0;

	assert_non_null(env);
	assert_string_equal(env_get(env, "RANK"), "5");
	assert_string_equal(env_get(env, "LOCAL_RANK"), "1");
	assert_string_equal(env_get(env, "ROLE_RANK"), "1");
	assert_string_equal(env_get(env, "WORLD_SIZE"), "8");
	assert_string_equal(env_get(env, "LOCAL_WORLD_SIZE"), "4");
	assert_string_equal(env_get(env, "GROUP_RANK"), "1");
	assert_string_equal(env_get(env, "GROUP_WORLD_SIZE"), "2");
	assert_string_equal(env_get(env, "ROLE_WORLD_SIZE"), "4");
	assert_string_equal(env_get(env, "ROLE_NAME"), "trainer");
	assert_string_equal(env_get(env, "MASTER_ADDR"), "10.0.0.1");
	assert_string_equal(env_get(env, "MASTER_PORT"), "29500");
	assert_string_equal(env_get(env, "TORCHELASTIC_RESTART_COUNT"), "2");
	assert_string_equal(env_get(env, "TORCHELASTIC_MAX_RESTARTS"), "3");
	assert_string_equal(env_get(env, "TORCHELASTIC_RUN_ID"), "job");
	assert_string_equal(env_get(env, "TORCHELASTIC_USE_AGENT_STORE"), "True");
	assert_string_equal(env_get(env, "TORCHELASTIC_ERROR_FILE"), "/l/error.json");
	assert_string_equal(env_get(env, "OMP_NUM_THREADS"), "4"); /* the user's */
	assert_string_equal(env_get(env, "TORCH_NCCL_ASYNC_ERROR_HANDLING"), "1");
	assert_string_equal(env_get(env, "RANKX"), "keep");
	assert_string_equal(env_get(env, "DDP_TIMEOUT"), "5");
	/* this ddprun's, not an outer one's (whose sweep would not see it) */
	assert_string_equal(env_get(env, "DDP_SHM_NONCE"), "0123abcd");
	while (env[n] != NULL)
		n++;
	/* PATH, OMP, RANKX, DDP_TIMEOUT + what ddprun sets (with PyTorch 1.13's
	 * NCCL_ASYNC_ERROR_HANDLING, issue 12) */
	assert_string_equal(env_get(env, "NCCL_ASYNC_ERROR_HANDLING"), "1");
	assert_null(env_get(env, "TORCHELASTIC_SIGNALS_TO_HANDLE"));
	assert_null(env_get(env, "CUDA_VISIBLE_DEVICES"));
	/* the -u of a Python program, for the one a wrapper script starts too */
	assert_string_equal(env_get(env, "PYTHONUNBUFFERED"), "1");
	assert_int_equal(n, 4 + 20);
	free(env);
	/* without a nonce, none reaches the workers, not even an inherited one */
	j.shm_nonce = NULL;
	env = workenv_build(parent, &j, 1, "/l/error.json");
	assert_non_null(env);
	assert_null(env_get(env, "DDP_SHM_NONCE"));
	free(env);
	/* ddp_spawn's: no store and no error file, not even inherited ones */
	j.world.master_addr = NULL;
	env = workenv_build(outer, &j, 1, NULL);
	assert_non_null(env);
	assert_null(env_get(env, "MASTER_ADDR"));
	assert_null(env_get(env, "MASTER_PORT"));
	assert_null(env_get(env, "TORCHELASTIC_ERROR_FILE"));
	assert_string_equal(env_get(env, "RANK"), "5");
	free(env);
}

/* torchrun 2.x: TORCHELASTIC_SIGNALS_TO_HANDLE; --virtual-local-rank gives
 * LOCAL_RANK=0 and the worker's entry of CUDA_VISIBLE_DEVICES; the old NCCL
 * name follows the new one's value. */
static void test_workenv_torchrun2(void **state)
{
	char *parent[] = {"CUDA_VISIBLE_DEVICES=4, 6,7", "TORCH_NCCL_ASYNC_ERROR_HANDLING=3", NULL};
	char *bare[] = {NULL};
	struct workenv_job j = {.world = {.world_size = 3, .master_addr = "h"},
				.local_world_size = 3,
				.role = "default",
				.run_id = "job",
				.signals_to_handle = "SIGTERM,SIGUSR1",
				.virtual_local_rank = true};
	char **env = workenv_build(parent, &j, 1, "/e");
	char dev[WORKENV_DEVICE_MAX], err[256];

	(void)state;
	assert_non_null(env);
	assert_string_equal(env_get(env, "LOCAL_RANK"), "0");
	assert_string_equal(env_get(env, "RANK"), "1");
	assert_string_equal(env_get(env, "CUDA_VISIBLE_DEVICES"), "6");
	assert_string_equal(env_get(env, "TORCHELASTIC_SIGNALS_TO_HANDLE"), "SIGTERM,SIGUSR1");
	assert_string_equal(env_get(env, "TORCH_NCCL_ASYNC_ERROR_HANDLING"), "3");
	assert_string_equal(env_get(env, "NCCL_ASYNC_ERROR_HANDLING"), "3");
	free(env);
	env = workenv_build(bare, &j, 2, "/e");
	assert_non_null(env);
	assert_string_equal(env_get(env, "CUDA_VISIBLE_DEVICES"), "2");
	free(env);
	assert_int_equal(workenv_device("4, 6,7", 2, dev, sizeof(dev)), 0);
	assert_string_equal(dev, "7");
	assert_int_equal(workenv_device("4,6", 2, dev, sizeof(dev)), -ERANGE);
	assert_int_equal(workenv_check("4,6", true, 2, err, sizeof(err)), 0);
	assert_int_equal(workenv_check("4,6", false, 3, err, sizeof(err)), 0);
	assert_int_equal(workenv_check("4,6", true, 3, err, sizeof(err)), -ERANGE);
	assert_non_null(strstr(err, "local rank 2 has no GPU in CUDA_VISIBLE_DEVICES=4,6"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_subst),
		cmocka_unit_test(test_template),
		cmocka_unit_test(test_lookup_like_execvp),
		cmocka_unit_test(test_resolve_python_script_and_module),
		cmocka_unit_test(test_resolve_what_python_runs_by_its_name_or_kind),
		cmocka_unit_test(test_resolve_errors),
		cmocka_unit_test(test_resolve_empty_name),
		cmocka_unit_test(test_workenv),
		cmocka_unit_test(test_workenv_torchrun2),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
