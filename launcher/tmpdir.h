/* tmpdir: the directory ddprun's temporary files go in (the log directory
 * without --log-dir, the file timer's FIFO).
 *
 * Chosen as Python's tempfile.gettempdir() chooses the one torchrun's go in:
 * the first usable of $TMPDIR, $TEMP, $TMP (empty ones skipped), /tmp,
 * /var/tmp, /usr/tmp and the current directory. So a $TMPDIR that does not
 * exist or cannot be written falls back instead of failing the job. Usable:
 * a directory this process may create files in. The path is absolute (a
 * worker that changes directory still finds its files), as Python's. */
#ifndef DDP_TMPDIR_H
#define DDP_TMPDIR_H

#include <stddef.h>

/* What was tried, for the message when none is usable. */
#define TMPDIR_TRIED "$TMPDIR, $TEMP, $TMP, /tmp, /var/tmp, /usr/tmp, the current directory"

/* The directory into buf (size len). 0, or -ENOENT when none is usable. */
int tmpdir_find(char *buf, size_t len);

#endif
