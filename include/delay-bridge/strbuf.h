/*
 * strbuf.h -- a growing byte buffer for building text (metrics, JSON, CLI output).
 *
 * The buffer owns p (malloc'd, always NUL-terminated once anything was
 * appended); out of memory aborts (xalloc.h). Pure: no I/O.
 */
#ifndef DB_STRBUF_H
#define DB_STRBUF_H

#include <stdarg.h>
#include <stddef.h>

struct strbuf {
    char *p;    /* NULL until the first append */
    size_t len; /* bytes, not counting the NUL */
    size_t cap;
};

#define STRBUF_INIT {NULL, 0, 0}

void strbuf_append(struct strbuf *b, const void *data, size_t n);
void strbuf_puts(struct strbuf *b, const char *s);
void strbuf_printf(struct strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void strbuf_vprintf(struct strbuf *b, const char *fmt, va_list ap);
/*
 * Append n bytes of s as valid UTF-8: well-formed sequences as they are,
 * every byte that is not part of one as U+FFFD. AMQP strings may hold any
 * bytes; JSON and logs may not.
 */
void strbuf_append_utf8(struct strbuf *b, const char *s, size_t n);

/* Empty it, keeping the memory. */
void strbuf_reset(struct strbuf *b);
/* Hand p to the caller (who frees it) and leave b empty. Never NULL. */
char *strbuf_detach(struct strbuf *b, size_t *len);
void strbuf_free(struct strbuf *b);

#endif
