/* Unit tests for launcher/output.c: the prefix only where a line starts
 * (and after a carriage return); live streams on a real loop: an incomplete
 * line shown before its newline, another stream's line never inside it,
 * nor let in by a pause of the console, the last bytes kept for the failure
 * report, line_cb's whole lines. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "output.h"

static struct output_buf out;

static int reset(void **state)
{
	output_buf_free(&out);
	return 0;
}

static const char *pre(enum output_col *col, const char *prefix, const char *data)
{
	out.len = 0;
	assert_int_equal(output_prefixed(col, prefix, strlen(prefix), data, strlen(data), &out), 0);
	assert_int_equal(output_prefixed(col, "", 0, "", 0, &out), 0);
	out.p = realloc(out.p, out.len + 1);
	assert_non_null(out.p);
	out.cap = out.len + 1;
	out.p[out.len] = '\0';
	return out.p;
}

static void test_prefix_before_every_line(void **state)
{
	enum output_col col = OUTPUT_BOL;

	assert_string_equal(pre(&col, "[r3]: ", "a\nb\nc"), "[r3]: a\n[r3]: b\n[r3]: c");
	assert_int_equal(col, OUTPUT_MID);
	/* The rest of "c", then empty lines: each has its prefix. */
	assert_string_equal(pre(&col, "[r3]: ", "d\n\n"), "d\n[r3]: \n");
	assert_int_equal(col, OUTPUT_BOL);
}

static void test_continued_line_gets_no_second_prefix(void **state)
{
	enum output_col col = OUTPUT_BOL;
	const char *parts[] = {"x", "y", "z", "w\n"};
	const char *want[] = {"p:x", "y", "z", "w\n"};
	size_t i;

	for (i = 0; i < 4; i++)
		assert_string_equal(pre(&col, "p:", parts[i]), want[i]);
}

static void test_carriage_return_redraws_with_prefix(void **state)
{
	enum output_col col = OUTPUT_BOL;

	/* tqdm's style: "\r" then the bar. */
	assert_string_equal(pre(&col, "[0]:", "\rstep 1"), "\r[0]:step 1");
	assert_string_equal(pre(&col, "[0]:", "\rstep 2"), "\r[0]:step 2");
	/* The other style: the bar then "\r"; then the final newline. */
	assert_string_equal(pre(&col, "[0]:", "\n"), "\n");
	assert_string_equal(pre(&col, "[0]:", "bar\r"), "[0]:bar\r");
	assert_int_equal(col, OUTPUT_CR);
	assert_string_equal(pre(&col, "[0]:", "bar2\r\n"), "[0]:bar2\r\n");
	/* CRLF text keeps one prefix per line. */
	assert_string_equal(pre(&col, "[0]:", "a\r\nb\r\n"), "[0]:a\r\n[0]:b\r\n");
	/* After a line ended early, the prefix comes again. */
	col = OUTPUT_BROKEN;
	assert_string_equal(pre(&col, "[0]:", "more\n"), "[0]:more\n");
}

/* Live streams: fd 1 is a pipe the test reads. */
static uv_loop_t loop;
static int console_r = -1, saved_stdout = -1;
static struct output_buf seen;
static int closed;

static void read_console(void)
{
	char buf[4096];
	ssize_t r;

	while ((r = read(console_r, buf, sizeof(buf))) > 0) {
		seen.p = realloc(seen.p, seen.len + (size_t)r + 1);
		assert_non_null(seen.p);
		memcpy(seen.p + seen.len, buf, (size_t)r);
		seen.len += (size_t)r;
		seen.p[seen.len] = '\0';
	}
}

static void on_tick(uv_timer_t *t)
{
	uv_stop(t->loop);
}

/* Run the loop until the console shows want (bounded: 10 s). */
static bool wait_console(const char *want)
{
	uv_timer_t tick;
	int i;

	uv_timer_init(&loop, &tick);
	for (i = 0; i < 1000; i++) {
		read_console();
		if (seen.p != NULL && strstr(seen.p, want) != NULL)
			break;
		uv_timer_start(&tick, on_tick, 10, 0);
		uv_run(&loop, UV_RUN_DEFAULT);
	}
	uv_close((uv_handle_t *)&tick, NULL);
	uv_run(&loop, UV_RUN_NOWAIT);
	return i < 1000;
}

static void on_closed(struct output_stream *s)
{
	closed++;
}

/* The streams a live test started: a failed assertion leaves the test
 * function with them open, and live_teardown ends them (so they must
 * outlive it: static). */
static struct output_stream *started[4];
static int nstarted;

static int start(struct output_stream *s, const char *prefix, int *wfd)
{
	int p[2];

	if (nstarted < 4)
		started[nstarted++] = s;

	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	memset(s, 0, sizeof(*s));
	s->console_fd = 1;
	s->file_fd = -1;
	s->prefix = prefix;
	s->prefix_len = strlen(prefix);
	s->closed_cb = on_closed;
	*wfd = p[1];
	return output_stream_start(&loop, s, p[0]);
}

static int live_setup(void **state)
{
	int p[2];

	assert_int_equal(uv_loop_init(&loop), 0);
	assert_int_equal(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
	fflush(stdout);
	saved_stdout = dup(1);
	dup2(p[1], 1);
	close(p[1]);
	console_r = p[0];
	seen.len = 0;
	closed = 0;
	nstarted = 0;
	return 0;
}

static int live_teardown(void **state)
{
	output_pause(output_console_sink(1), false); /* a failed test may leave it */
	for (int i = 0; i < nstarted; i++)
		if (started[i]->open)
			output_stream_finish(started[i]);
	uv_run(&loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&loop), 0);
	dup2(saved_stdout, 1);
	close(saved_stdout);
	close(console_r);
	output_buf_free(&seen);
	return 0;
}

static void put(int fd, const char *s)
{
	assert_int_equal(write(fd, s, strlen(s)), (ssize_t)strlen(s));
}

/* End a and b (b NULL: none) as their workers' exit does: the write ends
 * closed, then the streams finished. Returns all the console showed. */
static const char *finish_streams(struct output_stream *a, int wa, struct output_stream *b, int wb)
{
	close(wa);
	if (b != NULL)
		close(wb);
	output_stream_finish(a);
	if (b != NULL)
		output_stream_finish(b);
	uv_run(&loop, UV_RUN_DEFAULT);
	read_console();
	return seen.p;
}

static void test_partial_line_shown_before_its_newline(void **state)
{
	static struct output_stream a; /* live_teardown may end it */
	int wa;

	assert_int_equal(start(&a, "[a]", &wa), 0);
	put(wa, "\rstep 1");
	assert_true(wait_console("step 1"));
	put(wa, "\rstep 2");
	assert_true(wait_console("step 2"));
	put(wa, "\n");
	assert_true(wait_console("\n"));
	assert_string_equal(finish_streams(&a, wa, NULL, -1), "\r[a]step 1\r[a]step 2\n");
	assert_int_equal(closed, 1);
}

static void test_other_line_never_inside_an_open_line(void **state)
{
	static struct output_stream a, b; /* live_teardown may end them */
	int wa, wb;

	assert_int_equal(start(&a, "[a]", &wa), 0);
	assert_int_equal(start(&b, "[b]", &wb), 0);
	put(wa, "prompt? ");
	assert_true(wait_console("prompt? "));
	/* b's line waits, then ends a's idle line early, on a line of its own. */
	put(wb, "b says\n");
	assert_true(wait_console("b says\n"));
	put(wa, "yes\n");
	assert_true(wait_console("yes\n"));
	assert_string_equal(finish_streams(&a, wa, &b, wb), "[a]prompt? \n[b]b says\n[a]yes\n");
}

static void test_open_line_completed_before_the_others(void **state)
{
	static struct output_stream a, b; /* live_teardown may end them */
	int wa, wb;

	assert_int_equal(start(&a, "", &wa), 0);
	assert_int_equal(start(&b, "", &wb), 0);
	put(wa, "left ");
	assert_true(wait_console("left "));
	/* Both come before the loop looks: a's line completes, b follows. */
	put(wb, "other\n");
	put(wa, "right\n");
	assert_true(wait_console("other\n"));
	finish_streams(&a, wa, &b, wb);
	/* a's bytes were read first (it was started last: the list's head). */
	assert_true(strcmp(seen.p, "left right\nother\n") == 0 ||
		    strcmp(seen.p, "left \nother\nright\n") == 0);
}

/* a ("[a]") and b ("[b]") started, a's line "open" on the console. */
static void a_line_open(struct output_stream *a, int *wa, struct output_stream *b, int *wb)
{
	assert_int_equal(start(a, "[a]", wa), 0);
	assert_int_equal(start(b, "[b]", wb), 0);
	put(*wa, "open");
	assert_true(wait_console("[a]open"));
}

/* A worker whose bytes wait unread in its pipe is not silent, however late
 * the loop comes to them: a loop descheduled past the idle deadline, or
 * whose poll gave it the waiting stream's bytes first, broke the open line
 * of a worker that never stopped writing (once in a loaded CI run). a's last
 * read is set back past the deadline rather than slept through, so that the
 * loop's clock stays where it is and b's own wait (OUTPUT_HOLD_MAX_MS) has
 * not run out. Before the paused-console test: a pause it ends moves the
 * idle deadline. */
static void test_unread_bytes_are_not_silence(void **state)
{
	static struct output_stream a, b; /* live_teardown may end them */
	int wa, wb;

	a_line_open(&a, &wa, &b, &wb);
	put(wa, " rest\n"); /* a goes on; the loop has not read it yet */
	a.last_ms = (int64_t)uv_now(&loop) - OUTPUT_HOLD_IDLE_MS - 1;
	put(wb, "b says\n");
	output_stream_drain(&b); /* b waits: a's line is not ended */
	output_stream_drain(&a);
	assert_string_equal(finish_streams(&a, wa, &b, wb), "[a]open rest\n[b]b says\n");
}

/* A pause of the console (output_pause: its queue backed up) is neither
 * silence of the worker whose line is open there (it could not write) nor
 * time another worker waited for that line (the e2e test of a paused
 * console, on real time, caught a regression only now and then). The clock
 * here is the loop's time, which moves only when the loop updates it: from
 * the pause on the test never runs the loop but reads the pipes with
 * output_stream_drain, so b decides at the very time the pause ended. The
 * pause outlasts both OUTPUT_HOLD_IDLE_MS and OUTPUT_HOLD_MAX_MS: counting
 * it towards either ends a's line at once. */
static void test_paused_console_breaks_no_line(void **state)
{
	const long pause_ms = OUTPUT_HOLD_MAX_MS + 100;
	const struct timespec pause = {pause_ms / 1000, pause_ms % 1000 * 1000000};
	int k = output_console_sink(1);
	static struct output_stream a, b; /* live_teardown may end them */
	int wa, wb;

	a_line_open(&a, &wa, &b, &wb);
	output_pause(k, true);
	put(wb, "b says\n");
	output_stream_drain(&b); /* b waits for a's line */
	assert_int_equal(nanosleep(&pause, NULL), 0);
	uv_update_time(&loop);
	output_pause(k, false);
	put(wb, "b again\n");
	output_stream_drain(&b); /* b still waits: a's line is not ended here */
	put(wa, " rest\n");	 /* a's line ends: b's lines follow */
	output_stream_drain(&a);
	assert_string_equal(finish_streams(&a, wa, &b, wb),
			    "[a]open rest\n[b]b says\n[b]b again\n");
}

static void sleep_ms(long ms)
{
	const struct timespec t = {ms / 1000, ms % 1000 * 1000000};

	assert_int_equal(nanosleep(&t, NULL), 0);
	uv_update_time(&loop);
}

/* Pauses do not count towards a wait, but the waits between them add up: a
 * console that paused again within OUTPUT_HOLD_MAX_MS of its every resume
 * (a slow reader of one worker's endless line) held the other workers'
 * lines for ever. Each round here waits 300 ms unpaused while a writes on,
 * so by the fourth b has waited its OUTPUT_HOLD_MAX_MS and ends a's line;
 * the old deadline restarted at every resume. (That pauses do not count is
 * test_paused_console_breaks_no_line's.) */
static void test_waits_between_pauses_add_up(void **state)
{
	int k = output_console_sink(1), round;
	static struct output_stream a, b; /* live_teardown may end them */
	int wa, wb;

	a_line_open(&a, &wa, &b, &wb);
	put(wb, "b waits\n");
	output_stream_drain(&b);
	for (round = 0; round < 6; round++) {
		output_pause(k, true);
		sleep_ms(50);
		output_pause(k, false);
		sleep_ms(300);
		put(wa, "."); /* a is not silent */
		output_stream_drain(&a);
		put(wb, "b again\n");
		output_stream_drain(&b);
		read_console();
		if (strstr(seen.p, "[b]b waits") != NULL)
			break;
	}
	assert_true(round <= 3); /* 4 x 300 ms; sooner only if the test was slow */
	put(wa, "\n");
	finish_streams(&a, wa, &b, wb);
	assert_true(strncmp(seen.p, "[a]open", 7) == 0 && strstr(seen.p, "\n[b]b waits\n") != NULL);
}

/* a writes on; then b adds a line and the console is read: whether b has
 * ended a's line. */
static bool b_broke_in(int wa, struct output_stream *a, int wb, struct output_stream *b)
{
	put(wa, ".");
	output_stream_drain(a);
	put(wb, "b again\n");
	output_stream_drain(b);
	read_console();
	return strstr(seen.p, "[b]b waits") != NULL;
}

/* A pause is taken off the wait of a stream that waited before it began:
 * 300 ms of wait, 1100 ms paused, and b has not waited its
 * OUTPUT_HOLD_MAX_MS at the resume; 800 ms later it has. */
static void test_a_pause_is_off_a_wait_begun_before_it(void **state)
{
	int k = output_console_sink(1);
	static struct output_stream a, b; /* live_teardown may end them */
	int wa, wb;

	a_line_open(&a, &wa, &b, &wb);
	put(wb, "b waits\n");
	output_stream_drain(&b);
	sleep_ms(300);
	output_pause(k, true);
	sleep_ms(1100);
	output_pause(k, false);
	assert_false(b_broke_in(wa, &a, wb, &b));
	sleep_ms(800);
	assert_true(b_broke_in(wa, &a, wb, &b));
	put(wa, "\n");
	finish_streams(&a, wa, &b, wb);
}

/* A stream that begins to wait during a pause waits from its end on, not
 * from a time after it: 1050 ms after the resume it has waited its
 * OUTPUT_HOLD_MAX_MS. */
static void test_a_wait_begun_in_a_pause_counts_from_its_end(void **state)
{
	int k = output_console_sink(1);
	static struct output_stream a, b; /* live_teardown may end them */
	int wa, wb;

	a_line_open(&a, &wa, &b, &wb);
	output_pause(k, true);
	sleep_ms(200);
	put(wb, "b waits\n");
	output_stream_drain(&b);
	sleep_ms(900);
	output_pause(k, false);
	sleep_ms(1050);
	assert_true(b_broke_in(wa, &a, wb, &b));
	put(wa, "\n");
	finish_streams(&a, wa, &b, wb);
}

static struct output_buf got_lines;

static void on_line(struct output_stream *s, const char *line, size_t n)
{
	got_lines.p = realloc(got_lines.p, got_lines.len + n + 2);
	memcpy(got_lines.p + got_lines.len, line, n);
	got_lines.len += n;
	got_lines.p[got_lines.len++] = '|';
	got_lines.p[got_lines.len] = '\0';
}

static void test_tail_and_lines_whatever_the_console(void **state)
{
	static struct output_stream a; /* live_teardown may end it */
	char buf[OUTPUT_TAIL_MAX], big[6000];
	bool cut;
	size_t n;
	int wa;

	assert_int_equal(start(&a, "", &wa), 0);
	a.console_fd = -1; /* not shown */
	a.keep_tail = true;
	a.line_cb = on_line;
	put(wa, "one\ntw");
	put(wa, "o\nthree");
	close(wa);
	output_stream_finish(&a);
	uv_run(&loop, UV_RUN_DEFAULT);
	read_console();
	assert_int_equal(seen.len, 0);
	assert_string_equal(got_lines.p, "one|two|three|");
	n = output_tail(&a, buf, sizeof(buf), &cut);
	assert_int_equal(n, 13);
	assert_false(cut);
	assert_memory_equal(buf, "one\ntwo\nthree", 13);

	/* More than the tail holds, over the ring's end. */
	output_stream_release(&a);
	assert_int_equal(start(&a, "", &wa), 0);
	a.console_fd = -1;
	a.keep_tail = true;
	memset(big, 'x', sizeof(big));
	big[sizeof(big) - 1] = '\0';
	put(wa, "start\n");
	put(wa, big);
	put(wa, "\nthe end\n");
	close(wa);
	output_stream_finish(&a);
	uv_run(&loop, UV_RUN_DEFAULT);
	n = output_tail(&a, buf, sizeof(buf), &cut);
	assert_int_equal(n, OUTPUT_TAIL_MAX);
	assert_true(cut);
	assert_memory_equal(buf + n - 9, "\nthe end\n", 9);
	assert_int_equal(buf[0], 'x');
	output_stream_release(&a);
	free(got_lines.p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_prefix_before_every_line, reset),
		cmocka_unit_test_setup(test_continued_line_gets_no_second_prefix, reset),
		cmocka_unit_test_setup(test_carriage_return_redraws_with_prefix, reset),
		cmocka_unit_test_setup_teardown(test_partial_line_shown_before_its_newline,
						live_setup, live_teardown),
		cmocka_unit_test_setup_teardown(test_other_line_never_inside_an_open_line,
						live_setup, live_teardown),
		cmocka_unit_test_setup_teardown(test_open_line_completed_before_the_others,
						live_setup, live_teardown),
		cmocka_unit_test_setup_teardown(test_unread_bytes_are_not_silence, live_setup,
						live_teardown),
		cmocka_unit_test_setup_teardown(test_paused_console_breaks_no_line, live_setup,
						live_teardown),
		cmocka_unit_test_setup_teardown(test_waits_between_pauses_add_up, live_setup,
						live_teardown),
		cmocka_unit_test_setup_teardown(test_a_pause_is_off_a_wait_begun_before_it,
						live_setup, live_teardown),
		cmocka_unit_test_setup_teardown(test_a_wait_begun_in_a_pause_counts_from_its_end,
						live_setup, live_teardown),
		cmocka_unit_test_setup_teardown(test_tail_and_lines_whatever_the_console,
						live_setup, live_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, reset);
}
