/* Unit tests for agent_sig (agent_sig.h): deliveries reach the loop once
 * each, told apart by sender; a delivery from a parent named slurmstepd is
 * the step's only under srun (a step id) and not with proctrack/pgid; the
 * close gives back the dispositions from before. The sender tests run in a
 * grandchild whose parent renames itself slurmstepd and signals it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent_sig.h"

struct seen {
	int n;	      /* deliveries handed to the callback */
	int by_stepd; /* of them, from the step's slurmstepd */
	int from;     /* the last one's sender */
	int sig;
	uv_loop_t *loop;
};

static void on_delivery(void *arg, int sig, enum agent_sig_from from)
{
	struct seen *s = arg;

	s->n++;
	s->by_stepd += from != AGENT_SIG_ANYONE;
	s->from = (int)from;
	s->sig = sig;
	if (s->loop != NULL)
		uv_stop(s->loop);
}

static void on_bound(uv_timer_t *t)
{
	uv_stop(t->loop);
}

static void close_all(uv_loop_t *loop, struct agent_sig *s, uv_timer_t *t)
{
	agent_sig_close(s);
	if (t != NULL)
		uv_close((uv_handle_t *)t, NULL);
	uv_run(loop, UV_RUN_DEFAULT);
	agent_sig_destroy(s);
	assert_int_equal(uv_loop_close(loop), 0);
}

static void test_each_delivery_from_anyone_reaches_the_loop_once(void **state)
{
	static const int sigs[] = {SIGUSR1, SIGUSR2};
	struct seen seen = {0};
	struct agent_sig *s;
	uv_timer_t alive; /* the set's own handle keeps no loop running */
	uv_loop_t loop;

	(void)state;
	assert_int_equal(uv_loop_init(&loop), 0);
	assert_int_equal(uv_timer_init(&loop, &alive), 0);
	assert_int_equal(uv_timer_start(&alive, on_bound, 20000, 0), 0);
	assert_int_equal(agent_sig_open(&loop, sigs, 2, on_delivery, &seen, &s), 0);
	raise(SIGUSR1);
	agent_sig_drain(s); /* handled now, without the loop */
	assert_int_equal(seen.n, 1);
	assert_int_equal(seen.sig, SIGUSR1);
	raise(SIGUSR2);
	uv_run(&loop, UV_RUN_NOWAIT); /* the handler woke the loop */
	assert_int_equal(seen.n, 2);
	assert_int_equal(seen.sig, SIGUSR2);
	agent_sig_drain(s);
	assert_int_equal(seen.n, 2);
	assert_int_equal(seen.by_stepd, 0);
	close_all(&loop, s, &alive);
}

static void test_close_gives_back_the_old_disposition(void **state)
{
	static const int sigs[] = {SIGUSR1};
	struct seen seen = {0};
	struct agent_sig *s;
	struct sigaction old;
	uv_loop_t loop;

	(void)state;
	signal(SIGUSR1, SIG_IGN);
	assert_int_equal(uv_loop_init(&loop), 0);
	assert_int_equal(agent_sig_open(&loop, sigs, 1, on_delivery, &seen, &s), 0);
	close_all(&loop, s, NULL);
	assert_int_equal(sigaction(SIGUSR1, NULL, &old), 0);
	assert_ptr_equal(old.sa_handler, SIG_IGN);
	raise(SIGUSR1); /* ignored: nothing counts it */
	assert_int_equal(seen.n, 0);
	signal(SIGUSR1, SIG_DFL);
}

/* ddprun ending (its status decided): a delivery now is ignored, where the
 * old disposition (SIG_DFL) ended ddprun with the signal (Slurm repeats
 * its SIGTERM; a forwarded SIGUSR1 came late). */
static void test_end_ignores_the_signals_from_then_on(void **state)
{
	static const int sigs[] = {SIGUSR1};
	struct seen seen = {0};
	struct agent_sig *s;
	struct sigaction now;
	uv_loop_t loop;

	(void)state;
	signal(SIGUSR1, SIG_DFL);
	assert_int_equal(uv_loop_init(&loop), 0);
	assert_int_equal(agent_sig_open(&loop, sigs, 1, on_delivery, &seen, &s), 0);
	agent_sig_end(s, false);
	uv_run(&loop, UV_RUN_DEFAULT);
	agent_sig_destroy(s);
	assert_int_equal(uv_loop_close(&loop), 0);
	assert_int_equal(sigaction(SIGUSR1, NULL, &now), 0);
	assert_ptr_equal(now.sa_handler, SIG_IGN);
	raise(SIGUSR1); /* ignored: this process lives on */
	assert_int_equal(seen.n, 0);
	signal(SIGUSR1, SIG_DFL);
}

/* A stop signal after the end is ignored too, until main.c's last write of
 * the held output: from agent_sig_exit_with on it ends ddprun at once with
 * the job's status (a reader that never reads held ddprun there for good). */
static void test_a_stop_signal_after_the_end_exits_with_the_status_once_told(void **state)
{
	static const int sigs[] = {SIGUSR1};
	int st = 0;
	pid_t pid;

	(void)state;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct seen seen = {0};
		struct agent_sig *s;
		uv_loop_t loop;

		signal(SIGUSR1, SIG_DFL);
		if (uv_loop_init(&loop) != 0 ||
		    agent_sig_open(&loop, sigs, 1, on_delivery, &seen, &s) != 0)
			_exit(1);
		agent_sig_end(s, true);
		uv_run(&loop, UV_RUN_DEFAULT);
		raise(SIGUSR1); /* not yet: this process lives on */
		if (seen.n != 0)
			_exit(2);
		agent_sig_exit_with(7);
		raise(SIGUSR1);
		_exit(3);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 7);
}

/* In the grandchild: catch SIGUSR1, say so on ready, wait (bounded) for one
 * delivery; exit with its sender (enum agent_sig_from), 3 when none came. */
static void grandchild(int ready, bool step, const char *conf)
{
	static const int sigs[] = {SIGUSR1};
	struct seen seen = {0};
	struct agent_sig *s;
	uv_timer_t bound;
	uv_loop_t loop;

	setenv("SLURM_JOB_ID", "12", 1);
	if (step)
		setenv("SLURM_STEP_ID", "0", 1);
	else
		unsetenv("SLURM_STEP_ID");
	unsetenv("SLURM_STEPID");
	setenv("SLURM_CONF", conf, 1);
	seen.loop = &loop;
	if (uv_loop_init(&loop) != 0 ||
	    agent_sig_open(&loop, sigs, 1, on_delivery, &seen, &s) != 0 ||
	    uv_timer_init(&loop, &bound) != 0 || uv_timer_start(&bound, on_bound, 20000, 0) != 0)
		_exit(4);
	if (write(ready, "r", 1) != 1)
		_exit(4);
	uv_run(&loop, UV_RUN_DEFAULT);
	_exit(seen.n == 0 ? 3 : seen.from);
}

/* The grandchild's exit status, signalled by its parent named slurmstepd. */
static int sent_by_slurmstepd(bool step, const char *conf)
{
	int status;
	pid_t p = fork();

	assert_true(p >= 0);
	if (p == 0) {
		int fds[2];
		char c;
		pid_t g;

		prctl(PR_SET_NAME, "slurmstepd");
		if (pipe(fds) != 0)
			_exit(5);
		g = fork();
		if (g < 0)
			_exit(5);
		if (g == 0) {
			close(fds[0]);
			grandchild(fds[1], step, conf);
		}
		close(fds[1]);
		if (read(fds[0], &c, 1) != 1 || kill(g, SIGUSR1) != 0 ||
		    waitpid(g, &status, 0) != g || !WIFEXITED(status))
			_exit(5);
		_exit(WEXITSTATUS(status));
	}
	assert_int_equal(waitpid(p, &status, 0), p);
	assert_true(WIFEXITED(status));
	return WEXITSTATUS(status);
}

static const char *conf_with(const char *proctrack, char *path, size_t len)
{
	FILE *f;

	snprintf(path, len, "/tmp/test_launch_sig.%d.%s.conf", (int)getpid(),
		 strchr(proctrack, '/') + 1);
	f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "ClusterName=t\nProctrackType=%s\n", proctrack);
	fclose(f);
	return path;
}

static void test_the_steps_slurmstepd_is_told_apart(void **state)
{
	char linuxproc[256], cgroup[256], pgid[256];

	(void)state;
	conf_with("proctrack/linuxproc", linuxproc, sizeof(linuxproc));
	conf_with("proctrack/cgroup", cgroup, sizeof(cgroup));
	conf_with("proctrack/pgid", pgid, sizeof(pgid));
	/* Under srun, proctrack/linuxproc: every process of the step had it
	 * from slurmstepd. */
	assert_int_equal(sent_by_slurmstepd(true, linuxproc), AGENT_SIG_STEPD_ALL);
	/* proctrack/cgroup signals only slurmstepd's children (ddprun), pgid
	 * only their process group; a type not read may be either. Still
	 * Slurm's: a repeat of it is not passed on twice. */
	assert_int_equal(sent_by_slurmstepd(true, cgroup), AGENT_SIG_STEPD);
	assert_int_equal(sent_by_slurmstepd(true, pgid), AGENT_SIG_STEPD);
	assert_int_equal(sent_by_slurmstepd(true, "/nonexistent/slurm.conf"), AGENT_SIG_STEPD);
	/* A batch script's slurmstepd signals the script alone. */
	assert_int_equal(sent_by_slurmstepd(false, linuxproc), AGENT_SIG_ANYONE);
	unlink(linuxproc);
	unlink(cgroup);
	unlink(pgid);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_each_delivery_from_anyone_reaches_the_loop_once),
		cmocka_unit_test(test_close_gives_back_the_old_disposition),
		cmocka_unit_test(test_end_ignores_the_signals_from_then_on),
		cmocka_unit_test(test_a_stop_signal_after_the_end_exits_with_the_status_once_told),
		cmocka_unit_test(test_the_steps_slurmstepd_is_told_apart),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
