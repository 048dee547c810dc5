/* output: carry the workers' stdout/stderr to ddprun's own, whole lines only.
 *
 * Each pumped stream is a pipe read by the libuv loop. Bytes go unchanged to
 * the stream's tee file (if any); complete lines, each with the stream's
 * prefix, go to ddprun's stdout or stderr in a single write, so a line is
 * never mixed with another worker's. An incomplete last line is held until
 * its newline arrives, up to OUTPUT_MAX_LINE bytes (longer lines are cut
 * there); at end of stream it is written with a newline added. Writing to a
 * console that is gone (EPIPE) drops console output and keeps the files.
 * The console itself never blocks the loop (output_console.c): output that
 * its reader is not ready for is queued, and a long queue pauses the
 * workers' pipes until it drains. */
#ifndef DDP_OUTPUT_H
#define DDP_OUTPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define OUTPUT_MAX_LINE (1u << 20)

struct output_buf {
	char *p;
	size_t len, cap;
};

/* Append to out the complete lines of pending + data, each preceded by
 * prefix; keep the incomplete tail in pending. With final, the tail is
 * emitted too, ending in '\n'. 0 or -ENOMEM. */
int output_lines(struct output_buf *pending, const char *prefix, size_t prefix_len,
		 const char *data, size_t n, bool final, struct output_buf *out);
void output_buf_free(struct output_buf *b);

struct output_stream {
	uv_pipe_t pipe;
	struct output_buf pending;
	int console_fd;	    /* 1 or 2; -1: not shown */
	int file_fd;	    /* tee file, closed with the stream; -1: none */
	const char *prefix; /* caller's, valid until closed_cb */
	size_t prefix_len;
	bool open;
	void (*closed_cb)(struct output_stream *s);
	void *data;		    /* caller's */
	struct output_stream *next; /* the list of open streams */
	int64_t last_ms;	    /* loop time of the last bytes read; -1: none */
};

/* Start pumping fd (a pipe's read end; the stream owns it and file_fd from
 * now on). Returns 0, and closed_cb runs exactly once later (at once if
 * pumping could not start); a negative errno only if no handle could be made
 * (then fd and file_fd are closed and closed_cb never runs). */
int output_stream_start(uv_loop_t *loop, struct output_stream *s, int fd);
/* Read what the pipe holds right now, flush, close; closed_cb runs later
 * from the loop. For when every writer is known dead (a background grandchild
 * may still hold the pipe open; its later output is not waited for). */
void output_stream_finish(struct output_stream *s);
/* When s last delivered output: the loop time (uv_now(), ms) at which its
 * last bytes were read, a line or part of one (a progress bar's update
 * counts); -1 if none yet in this attempt. Valid after the stream closed. */
int64_t output_last_line_ms(const struct output_stream *s);

/* Queue buf for ddprun's fd 1 or 2, in order with everything else written
 * there. Before output_console_open (and after output_console_finish) the
 * write is plain and blocking. */
void output_console_write(int fd, const char *buf, size_t len);
/* Make the console non-blocking on loop. 0 or a negative errno. */
int output_console_open(uv_loop_t *loop);
/* Stop watching the console (the loop can end); queued output stays. */
void output_console_close(void);
/* After the loop: write out what is queued, waiting for the readers. */
void output_console_finish(void);
/* Internal: write what the readers take now; pause/resume every stream. */
void output_console_flush_some(void);
void output_pause(bool on);

#endif
