/* Unit tests for the agent's coordinator interface (agent.h), the hook that
 * multi-node plugs into: a fake coordinator places this node in a bigger
 * world, hears of local failure and success, and stops or restarts the
 * workers. Real worker processes (/bin/sh) run on a real loop. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "agent_int.h"
#include "hang.h"
#include "cli.h"
#include "prog.h"

extern char **environ;

struct fake {
	int rendezvous_calls;
	int halt_on_finish; /* agent_halt(this) from the first finished() */
	bool signalled_at_finish;
	size_t nfailures_at_finish;
	int last_restart_count;
	int failed_calls;
	int failed_status;
	int failed_rank;
	int finished_calls;
	int finished_status;
	int restart_on_failure; /* agent_restart() from failed() this many times */
	int stop_on_finish;	/* agent_stop(status) from finished() */
	int stop_in_rendezvous; /* answer the rendezvous with agent_stop(7) */
	uv_timer_t timer;
	void (*later)(struct fake *f); /* see rendezvous_then_later */
	struct agent *agent;
	const char *ready_file; /* halt once it exists and local rank 0 is gone */
	int polls;
	struct hang_where where[2]; /* hang_where_local() at finished() */
};

static void fake_rendezvous(struct agent *a, int restart_count, void *arg)
{
	struct fake *f = arg;
	/* Node 1 of 2, two workers each: global ranks 2 and 3. */
	struct workenv_world w = {.group_rank = 1,
				  .group_world_size = 2,
				  .rank_offset = 2,
				  .world_size = 4,
				  .role_rank_offset = 2,
				  .role_world_size = 4,
				  .master_addr = "127.0.0.1",
				  .master_port = 1,
				  .use_agent_store = false,
				  .restart_count = restart_count};

	f->rendezvous_calls++;
	f->last_restart_count = restart_count;
	if (f->stop_in_rendezvous) {
		agent_stop(a, 7);
		return;
	}
	agent_rendezvous_done(a, 0, &w);
}

static void fake_failed(struct agent *a, const struct report_entry *root, int status, void *arg)
{
	struct fake *f = arg;

	f->failed_calls++;
	f->failed_status = status;
	f->failed_rank = root->global_rank;
	if (f->restart_on_failure-- > 0)
		agent_restart(a);
}

static void fake_finished(struct agent *a, int status, void *arg)
{
	struct fake *f = arg;

	f->finished_calls++;
	f->finished_status = status;
	hang_where_local(a, f->where);
	f->signalled_at_finish = agent_signalled(a);
	agent_failures(a, &f->nfailures_at_finish);
	if (f->halt_on_finish) {
		int st = f->halt_on_finish;

		f->halt_on_finish = 0;
		agent_halt(a, st, true); /* calls finished() again at once: nothing runs */
		return;
	}
	agent_stop(a, f->stop_on_finish);
}

/* Run ddprun's words (after "ddprun") on a real loop under the fake
 * coordinator, with rdzv as its rendezvous hook; the exit status. */
static int run_words(struct fake *f, char **words, void (*rdzv)(struct agent *, int, void *))
{
	const char *(*env)(const char *) = (const char *(*)(const char *))getenv;
	struct agent_coord coord = {rdzv, fake_failed, fake_finished, f};
	struct agent_config cfg = {0};
	struct cli_opts o;
	struct job j;
	struct agent *a;
	uv_loop_t loop;
	char err[512];
	int argc = 0, status;

	while (words[argc] != NULL)
		argc++;
	assert_int_equal(cli_parse(argc, words, env, &o, err, sizeof(err)), CLI_OK);
	job_from_opts(&j, &o, env);
	assert_int_equal(prog_resolve(&o, env, &j.prog, err, sizeof(err)), 0);
	j.nproc = 2;
	snprintf(j.hostname, sizeof(j.hostname), "testhost");
	cfg.job = &j;
	cfg.worker_env = environ;
	assert_int_equal(uv_loop_init(&loop), 0);
	assert_int_equal(agent_create(&loop, &cfg, &coord, &a, err, sizeof(err)), 0);
	f->agent = a;
	agent_start(a);
	uv_run(&loop, UV_RUN_DEFAULT);
	status = agent_exit_status(a);
	agent_destroy(a);
	assert_int_equal(uv_loop_close(&loop), 0);
	job_free(&j);
	cli_free(&o);
	return status;
}

/* `sh -c script` on 2 workers. */
static int run_job(struct fake *f, const char *script, int max_restarts)
{
	char restarts[16];
	char *words[] = {"ddprun",
			 "--nproc-per-node=2",
			 "--max-restarts",
			 restarts,
			 "--shutdown-timeout",
			 "5",
			 "sh",
			 "-c",
			 (char *)script,
			 NULL};

	snprintf(restarts, sizeof(restarts), "%d", max_restarts);
	return run_words(f, words, fake_rendezvous);
}

static void test_world_from_the_coordinator_reaches_the_workers(void **state)
{
	struct fake f = {0};
	/* Exits 0 only if the environment carries the coordinator's world. */
	const char *check =
		"[ \"$RANK\" = $((LOCAL_RANK + 2)) ] && [ \"$WORLD_SIZE\" = 4 ] && "
		"[ \"$GROUP_RANK\" = 1 ] && [ \"$GROUP_WORLD_SIZE\" = 2 ] && "
		"[ \"$LOCAL_WORLD_SIZE\" = 2 ] && [ \"$TORCHELASTIC_USE_AGENT_STORE\" = False ]";

	assert_int_equal(run_job(&f, check, 0), 0);
	assert_int_equal(f.rendezvous_calls, 1);
	assert_int_equal(f.failed_calls, 0);
	assert_int_equal(f.finished_calls, 1);
	assert_int_equal(f.finished_status, 0);
}

static void test_local_failure_is_reported_with_global_rank_and_status(void **state)
{
	struct fake f = {.stop_on_finish = 9};

	/* Global rank 3 exits 5; the coordinator ends the job with its own status. */
	assert_int_equal(run_job(&f, "[ \"$RANK\" = 3 ] && exit 5; exec sleep 30", 0), 9);
	assert_int_equal(f.failed_calls, 1);
	assert_int_equal(f.failed_status, 5);
	assert_int_equal(f.failed_rank, 3);
	assert_int_equal(f.finished_calls, 1);
	assert_int_equal(f.finished_status, 5);
}

static void test_restart_requested_by_the_coordinator_goes_back_to_rendezvous(void **state)
{
	struct fake f = {.restart_on_failure = 1};

	/* Fails on the first attempt only; max-restarts 0, but the coordinator
	 * asks for a restart (a failure elsewhere would do the same). */
	assert_int_equal(run_job(&f,
				 "[ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ] && [ \"$RANK\" = 2 ] && "
				 "exit 4; exit 0",
				 0),
			 0);
	assert_int_equal(f.rendezvous_calls, 2);
	assert_int_equal(f.last_restart_count, 1);
	assert_int_equal(f.failed_calls, 1);
	assert_int_equal(f.finished_calls, 1);
	assert_int_equal(f.finished_status, 0);
}

static void test_stop_during_rendezvous_ends_with_the_given_status(void **state)
{
	struct fake f = {.stop_in_rendezvous = 1};

	assert_int_equal(run_job(&f, "exit 0", 0), 7);
	assert_int_equal(f.finished_calls, 0);
}

/* What the coordinator does 200 ms into the attempt, while workers run. */
static void on_later_timer(uv_timer_t *t)
{
	struct fake *f = t->data;

	f->later(f);
	uv_close((uv_handle_t *)t, NULL);
}

/* With f->ready_file, in place of f->later: halt once local rank 0 has
 * exited and the file exists (polled, bounded: a slow start is no failure). */
static void on_poll_timer(uv_timer_t *t)
{
	struct fake *f = t->data;

	if ((f->agent->w[0].running || access(f->ready_file, F_OK) != 0) && ++f->polls < 1000) {
		uv_timer_start(t, on_poll_timer, 10, 0);
		return;
	}
	uv_close((uv_handle_t *)t, NULL);
	agent_halt(f->agent, 5, true);
}

static void rendezvous_then_later(struct agent *a, int restart_count, void *arg)
{
	struct fake *f = arg;

	fake_rendezvous(a, restart_count, arg);
	uv_timer_init(agent_loop(a), &f->timer);
	f->timer.data = f;
	if (f->ready_file != NULL)
		uv_timer_start(&f->timer, on_poll_timer, 10, 0);
	else
		uv_timer_start(&f->timer, on_later_timer, 200, 0);
}

/* A failure on another node: stop every local worker now. */
static void stop_now(struct fake *f)
{
	agent_stop(f->agent, 3);
}

static void test_stop_from_the_coordinator_ends_running_workers(void **state)
{
	char *words[] = {"ddprun", "--nproc-per-node=2", "sleep", "30", NULL};
	struct fake f = {0};

	/* The workers' SIGTERM deaths are not local failures; the status is the
	 * coordinator's. */
	f.later = stop_now;
	assert_int_equal(run_words(&f, words, rendezvous_then_later), 3);
	assert_int_equal(f.failed_calls, 0);
	assert_int_equal(f.finished_calls, 0);
}

static void test_the_agent_never_restarts_by_itself_under_a_coordinator(void **state)
{
	struct fake f = {.stop_on_finish = 6};

	/* Restarts are left, but the coordinator decides: it is told of the
	 * failure and ends the job. */
	assert_int_equal(run_job(&f, "[ \"$RANK\" = 2 ] && exit 4; exec sleep 30", 3), 6);
	assert_int_equal(f.rendezvous_calls, 1);
	assert_int_equal(f.failed_calls, 1);
	assert_int_equal(f.finished_calls, 1);
	assert_int_equal(f.finished_status, 4);
	assert_int_equal(f.nfailures_at_finish, 1);
}

/* A failure elsewhere: stop the workers, but the coordinator still has to
 * publish and report before the end. */
static void halt_now(struct fake *f)
{
	agent_halt(f->agent, 5, true);
}

static void test_halt_stops_the_workers_and_hands_back_to_the_coordinator(void **state)
{
	char *words[] = {"ddprun", "--nproc-per-node=2", "sleep", "30", NULL};
	struct fake f = {.stop_on_finish = 5, .later = halt_now};

	assert_int_equal(run_words(&f, words, rendezvous_then_later), 5);
	assert_int_equal(f.failed_calls, 0); /* stopped by us: not failures */
	assert_int_equal(f.finished_calls, 1);
	assert_int_equal(f.finished_status, 5);
	assert_false(f.signalled_at_finish);
}

/* A hang's report names a rank that exited 0 while its peers ran (they
 * may wait for it), not one that exited 0 on the stop's SIGTERM: that one
 * was stopped (it did: every worker reaped with status 0 counted, once the
 * node had stopped and drained). */
static void test_a_worker_that_ended_well_on_the_stop_is_not_an_exited_rank(void **state)
{
	char ready[] = "/tmp/ddp-test-agent-XXXXXX", script[256];
	struct fake f = {.stop_on_finish = 5, .ready_file = ready};
	int fd = mkstemp(ready);
	char *words[] = {"ddprun", "--nproc-per-node=2", "sh", "-c", script, NULL};

	assert_true(fd >= 0);
	close(fd);
	unlink(ready);
	snprintf(script, sizeof(script),
		 "[ \"$LOCAL_RANK\" = 0 ] && exit 0; trap 'exit 0' TERM; : > %s; "
		 "while :; do sleep 0.05; done",
		 ready);
	assert_int_equal(run_words(&f, words, rendezvous_then_later), 5);
	unlink(ready);
	assert_true(f.polls < 1000);
	assert_int_equal(f.failed_calls, 0);
	assert_int_equal(f.finished_calls, 1);
	assert_int_equal(f.where[0].rank, 2);
	assert_true(f.where[0].exited);
	assert_int_equal(f.where[1].rank, -1);
	assert_false(f.where[1].exited);
}

static void signal_now(struct fake *f)
{
	raise(SIGTERM);
}

static void test_a_signal_is_handed_to_the_coordinator_once_the_workers_stopped(void **state)
{
	char *words[] = {"ddprun", "--nproc-per-node=2", "sleep", "30", NULL};
	struct fake f = {.halt_on_finish = 143, .stop_on_finish = 143, .later = signal_now};

	assert_int_equal(run_words(&f, words, rendezvous_then_later), 143);
	assert_int_equal(f.failed_calls, 0);
	assert_int_equal(f.finished_calls, 2); /* then again after agent_halt */
	assert_int_equal(f.finished_status, 143);
	assert_true(f.signalled_at_finish);
}

/* Each test is a ddprun process of its own: an agent that ended leaves its
 * signals ignored (agent_sig_end), and the next would not catch them. */
static int fresh_process(void **state)
{
	static const int sigs[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		signal(sigs[i], SIG_DFL);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_world_from_the_coordinator_reaches_the_workers,
				       fresh_process),
		cmocka_unit_test_setup(test_local_failure_is_reported_with_global_rank_and_status,
				       fresh_process),
		cmocka_unit_test_setup(
			test_restart_requested_by_the_coordinator_goes_back_to_rendezvous,
			fresh_process),
		cmocka_unit_test_setup(test_stop_during_rendezvous_ends_with_the_given_status,
				       fresh_process),
		cmocka_unit_test_setup(test_stop_from_the_coordinator_ends_running_workers,
				       fresh_process),
		cmocka_unit_test_setup(test_the_agent_never_restarts_by_itself_under_a_coordinator,
				       fresh_process),
		cmocka_unit_test_setup(
			test_halt_stops_the_workers_and_hands_back_to_the_coordinator,
			fresh_process),
		cmocka_unit_test_setup(
			test_a_worker_that_ended_well_on_the_stop_is_not_an_exited_rank,
			fresh_process),
		cmocka_unit_test_setup(
			test_a_signal_is_handed_to_the_coordinator_once_the_workers_stopped,
			fresh_process),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
