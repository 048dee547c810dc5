/* text: growable text for the launcher's reports (see text.h). */
#include "text.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Room for n more bytes and the NUL; 0, or -1 once memory ran out. */
static int reserve(struct text *t, size_t n)
{
	size_t cap;
	char *p;

	if (t->oom)
		return -1;
	if (t->len + n + 1 <= t->cap)
		return 0;
	cap = t->cap ? t->cap : 1024;
	while (cap < t->len + n + 1)
		cap *= 2;
	p = realloc(t->p, cap);
	if (p == NULL) {
		t->oom = 1;
		return -1;
	}
	t->p = p;
	t->cap = cap;
	return 0;
}

void text_add(struct text *t, const char *s, size_t n)
{
	if (reserve(t, n) != 0)
		return;
	memcpy(t->p + t->len, s, n);
	t->len += n;
	t->p[t->len] = '\0';
}

void text_puts(struct text *t, const char *s)
{
	text_add(t, s, strlen(s));
}

void text_printf(struct text *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n <= 0 || reserve(t, (size_t)n) != 0)
		return;
	va_start(ap, fmt);
	vsnprintf(t->p + t->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	t->len += (size_t)n;
}
