/*
 * utf8.h -- how many bytes of a string are one valid UTF-8 character.
 *
 * Strings from publishers (queue names in x-death, keys) reach places that
 * require valid UTF-8: a Prometheus label value (one invalid byte and the
 * whole scrape is refused), a log line, a JSON document. utf8_char says
 * where a valid character ends, so a caller can copy it or replace it.
 * RFC 3629: no overlong form, no surrogate (U+D800..U+DFFF), nothing past
 * U+10FFFF. Pure; no allocation.
 */
#ifndef DB_UTF8_H
#define DB_UTF8_H

#include <stddef.h>

/* Length (1..4) of the valid UTF-8 character at s (n > 0 bytes left), or 0 if invalid. */
int utf8_char(const unsigned char *s, size_t n);

/* n bytes of s are valid UTF-8 throughout (n == 0: yes). */
int utf8_valid(const void *s, size_t n);

#endif
