/* output: carry the workers' stdout/stderr to ddprun's own, live, with
 * whole lines never mixed between workers.
 *
 * Each pumped stream is a pipe read by the libuv loop. Bytes go unchanged to
 * the stream's tee file (if any), as they are read. On the console:
 * - complete lines are written as they arrive, each in one piece;
 * - an incomplete last line (a progress bar, a prompt) is written once it
 *   has waited OUTPUT_PARTIAL_MS or has grown to OUTPUT_PARTIAL_MAX bytes;
 *   the rest of that line follows as it comes, so the console shows what
 *   the worker wrote within about OUTPUT_PARTIAL_MS;
 * - the stream's prefix (--tag-output, tee's "[default0]:") is written where
 *   a line starts and again after a carriage return that is not followed by
 *   a newline (a redrawn progress bar keeps its prefix), never in the middle;
 * - while one stream's line is open on the console (its start written, its
 *   newline not yet), the other streams' output for that console waits. The
 *   open line is ended early, by a newline on the console only, when its
 *   worker has written nothing for OUTPUT_HOLD_IDLE_MS, when another stream
 *   has waited OUTPUT_HOLD_MAX_MS, or holds OUTPUT_HOLD_BYTES, or ends; the
 *   worker's next bytes then start a new line with the prefix. Bytes are
 *   never dropped or reordered within a stream, and no line holds two
 *   workers' bytes. stdout and stderr count as one console when they are the
 *   same file (a terminal, one pipe), else as two;
 * - at end of stream an open line gets its newline.
 * A console whose reader went away (EPIPE: `| head`, a pager that quit) is
 * as gone for the workers as it would be without ddprun between: the
 * streams shown only there are closed, so a worker's next write there
 * fails (SIGPIPE), as under torchrun, whose workers write to that pipe
 * themselves; a stream with a tee file goes on into its file. Any other
 * console failure (a full disk) drops console output and the job goes on. The console itself never blocks the loop (output_console.c):
 * output that its reader is not ready for is queued, and a long queue pauses
 * the workers' pipes until it drains. A stream can also keep the last
 * OUTPUT_TAIL_MAX bytes it carried (for the failure report), shown or not. */
#ifndef DDP_OUTPUT_H
#define DDP_OUTPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define OUTPUT_PARTIAL_MS   50
#define OUTPUT_PARTIAL_MAX  (64u * 1024)
#define OUTPUT_HOLD_IDLE_MS 200
#define OUTPUT_HOLD_MAX_MS  1000
#define OUTPUT_HOLD_BYTES   (1u << 20)
#define OUTPUT_TAIL_MAX	    4096
/* The longest line given to line_cb (longer lines are given in pieces). */
#define OUTPUT_MAX_LINE (1u << 20)

struct output_buf {
	char *p;
	size_t len, cap;
};

/* Where a stream's console output stands: at the start of a line, just
 * after a carriage return, inside a line, or at the start of a line because
 * its open line was ended early (a '\n' it writes next is that line's end,
 * already shown, so the console skips it). */
enum output_col { OUTPUT_BOL, OUTPUT_CR, OUTPUT_MID, OUTPUT_BROKEN };

/* Append data to out with prefix inserted where a line starts (*col says
 * where the previous bytes left off; updated): before any byte at
 * OUTPUT_BOL (or BROKEN) but '\r', before any byte after a '\r' but '\r'
 * and '\n'.
 * 0 or -ENOMEM. */
int output_prefixed(enum output_col *col, const char *prefix, size_t prefix_len, const char *data,
		    size_t n, struct output_buf *out);
void output_buf_free(struct output_buf *b);

struct output_stream;
/* Called with every complete line the stream carries, without its '\n' (a
 * line longer than OUTPUT_MAX_LINE in pieces; the last line at end of
 * stream even without one). */
typedef void (*output_line_cb)(struct output_stream *s, const char *line, size_t n);

struct output_stream {
	uv_pipe_t pipe;
	uv_timer_t timer;
	struct output_buf held; /* console bytes not written yet */
	struct output_buf line; /* the line being assembled for line_cb */
	int console_fd;		/* 1 or 2; -1: not shown */
	int file_fd;		/* tee file, closed with the stream; -1: none */
	const char *prefix;	/* caller's, valid until closed_cb */
	size_t prefix_len;
	bool keep_tail;		/* keep the last bytes (output_tail) */
	output_line_cb line_cb; /* caller's; NULL: none */
	void (*closed_cb)(struct output_stream *s);
	void *data;		    /* caller's */
	struct output_stream *next; /* the list of open streams */
	/* Private. */
	bool open;
	int closing;		   /* handles whose close callback is pending */
	enum output_col col;	   /* where its console output stands */
	bool ready;		   /* the held incomplete line may be written */
	uint64_t due_ms;	   /* loop time it may be written anyway; 0: none */
	uint64_t wait_seq;	   /* waiting for another's open line; 0: not */
	uint64_t wait_since;	   /* loop time it began waiting */
	int64_t last_ms;	   /* loop time of the last bytes read; -1: none */
	size_t tail_len, tail_end; /* bytes kept, and where the next one goes */
	uint64_t tail_total;	   /* bytes ever carried */
	char *tail;		   /* OUTPUT_TAIL_MAX bytes, made at the first byte kept */
};

/* Start pumping fd (a pipe's read end; the stream owns it and file_fd from
 * now on). Set the public fields first (a stream started again keeps its
 * tail's memory; zero tail before the first start). Returns 0, and closed_cb runs exactly
 * once later (at once if pumping could not start); a negative errno only if
 * no handle could be made (then fd and file_fd are closed and closed_cb never
 * runs). */
int output_stream_start(uv_loop_t *loop, struct output_stream *s, int fd);
/* Carry what the pipe holds right now (the worker has exited: everything it
 * wrote is there), without closing. */
void output_stream_drain(struct output_stream *s);
/* Drain, flush, close; closed_cb runs later from the loop. For when every
 * writer is known dead (a background grandchild may still hold the pipe
 * open; its later output is not waited for). */
void output_stream_finish(struct output_stream *s);
/* When s last delivered output: the loop time (uv_now(), ms) at which its
 * last bytes were read, a line or part of one (a progress bar's update
 * counts); -1 if none yet in this attempt. Valid after the stream closed. */
int64_t output_last_line_ms(const struct output_stream *s);
/* Copy the kept last bytes of a keep_tail stream, oldest first, to buf
 * (at most cap); *cut: earlier bytes were dropped. Valid after the stream
 * closed, until it starts again. Returns the number of bytes copied. */
size_t output_tail(const struct output_stream *s, char *buf, size_t cap, bool *cut);
/* Free what a closed stream keeps for output_tail (the stream's owner
 * calls it once the stream is done with for good). */
void output_stream_release(struct output_stream *s);

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
/* Whether the reader of ddprun's fd 1 or 2 went away (EPIPE). */
bool output_console_reader_gone(int fd);
/* Internal: the reader of console fd went away: close the streams shown
 * only there (their workers' writes then fail as on that pipe). */
void output_console_gone(int fd);
/* Internal: pause/resume the streams shown on console k (output_console_sink). */
void output_pause(int k, bool on);
/* Internal: which console fd 1 or 2 writes to: 0 for both when they are
 * the same file (the default before output_console_open), else fd - 1. */
int output_console_sink(int fd);
/* What /proc shows for s's pipe ("pipe:[inode]") into link; false when
 * s is closed. */
bool output_pipe_name(const struct output_stream *s, char *link, size_t len);
/* Whether s is open and its pipe paused for a slow console (its worker
 * may be waiting on its own write: the hang monitor's progress). */
bool output_paused(const struct output_stream *s);

#endif
