/* text: a growable, NUL-terminated text buffer for the launcher's reports
 * (the failure summary, the hang dump). Appending never fails the caller: out
 * of memory, the buffer stops growing and says so in oom, so a report comes
 * out shorter rather than not at all. The caller owns the struct (zeroed to
 * start) and frees p. */
#ifndef DDP_TEXT_H
#define DDP_TEXT_H

#include <stddef.h>

struct text {
	char *p; /* NULL until the first append */
	size_t len, cap;
	int oom; /* an append was dropped for want of memory */
};

void text_add(struct text *t, const char *s, size_t n);
void text_puts(struct text *t, const char *s);
void text_printf(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
