/*
 * log.c -- one line per event on stderr.
 *
 * Line format (UTC, millisecond precision):
 *
 *   2026-11-22T05:02:28.123Z level=info mod=wal msg="segment rolled" seg=12
 *   |----- time ----------| |- level -| |- mod -| |-- msg, quoted --| |- kv -|
 *
 * - msg is always quoted; '"' and '\' are escaped with a backslash, \n \r \t
 *   as such, every other control byte (and DEL) as \xHH. Bytes >= 0x80 pass
 *   through, so UTF-8 stays readable.
 * - the key=value part is the caller's printf format; it is not quoted, but
 *   control bytes in it are written as \xHH so an odd queue name can never
 *   split one event over two lines.
 * - the whole line is built in one buffer of LOG_LINE_MAX bytes and handed
 *   to a single write(2). LOG_LINE_MAX is PIPE_BUF, so lines written to a
 *   pipe by the threads of one process (or by several processes) never
 *   interleave. A longer line is cut and ends in "..." before the newline.
 * - errno is preserved across log_at(), so callers can log and then use it.
 *
 * The level is a process-wide atomic; log_ratelimit state belongs to the
 * caller and is not locked.
 */
#include "log.h"

#include "clock.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LOG_LINE_MAX 4096 /* == PIPE_BUF on Linux: one atomic write */

static _Atomic int g_level = LOG_LEVEL_INFO;

static const char *const level_names[] = { "debug", "info", "warn", "error" };

void log_set_level(enum log_level l)
{
    if ((int)l < LOG_LEVEL_DEBUG || l > LOG_LEVEL_ERROR)
        return;
    atomic_store_explicit(&g_level, (int)l, memory_order_relaxed);
}

enum log_level log_get_level(void)
{
    return (enum log_level)atomic_load_explicit(&g_level, memory_order_relaxed);
}

int log_parse_level(const char *s, enum log_level *l)
{
    if (!s)
        return -1;
    for (int i = LOG_LEVEL_DEBUG; i <= LOG_LEVEL_ERROR; i++) {
        if (strcmp(s, level_names[i]) == 0) {
            *l = (enum log_level)i;
            return 0;
        }
    }
    return -1;
}

/* A line under construction; pos never exceeds cap (room for "...\n" kept aside). */
struct line {
    char buf[LOG_LINE_MAX];
    size_t pos;
    size_t cap; /* usable bytes before the reserved tail */
    int cut;
};

/* Once cut, nothing more is added: the line ends in "..." where it was cut. */
static void put(struct line *ln, const char *s, size_t n)
{
    if (ln->cut)
        return;
    if (ln->pos + n > ln->cap) {
        n = ln->cap - ln->pos;
        ln->cut = 1;
    }
    memcpy(ln->buf + ln->pos, s, n);
    ln->pos += n;
}

static void puts_(struct line *ln, const char *s)
{
    put(ln, s, strlen(s));
}

/* Append s escaped; quoted selects the msg rules (escape '"' and '\' too). */
static void put_escaped(struct line *ln, const char *s, int quoted)
{
    static const char hex[] = "0123456789abcdef";
    for (const unsigned char *p = (const unsigned char *)s; *p && !ln->cut; p++) {
        char e[4];
        size_t n = 0;
        unsigned char ch = *p;
        if (quoted && (ch == '"' || ch == '\\')) {
            e[n++] = '\\';
            e[n++] = (char)ch;
        } else if (ch == '\n' || ch == '\r' || ch == '\t') {
            e[n++] = '\\';
            e[n++] = ch == '\n' ? 'n' : ch == '\r' ? 'r' : 't';
        } else if (ch < 0x20 || ch == 0x7f) {
            e[n++] = '\\';
            e[n++] = 'x';
            e[n++] = hex[ch >> 4];
            e[n++] = hex[ch & 15];
        } else {
            e[n++] = (char)ch;
        }
        if (ln->pos + n > ln->cap) { /* never split an escape */
            ln->cut = 1;
            break;
        }
        memcpy(ln->buf + ln->pos, e, n);
        ln->pos += n;
    }
}

static void write_all(const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(STDERR_FILENO, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return; /* nowhere left to report it */
        }
        p += w;
        n -= (size_t)w;
    }
}

void log_at(enum log_level l, const char *mod, const char *msg, const char *fmt, ...)
{
    if ((int)l < (int)log_get_level())
        return;
    int saved_errno = errno;

    struct line ln;
    ln.pos = 0;
    ln.cap = sizeof ln.buf - 4; /* "...\n" */
    ln.cut = 0;

    char tbuf[CLOCK_ISO_LEN];
    puts_(&ln, clock_iso8601(clock_now_ms(), tbuf));

    puts_(&ln, " level=");
    puts_(&ln, ((int)l >= LOG_LEVEL_DEBUG && l <= LOG_LEVEL_ERROR) ? level_names[l] : "?");
    puts_(&ln, " mod=");
    put_escaped(&ln, mod ? mod : "-", 0);
    puts_(&ln, " msg=\"");
    put_escaped(&ln, msg ? msg : "", 1);
    puts_(&ln, "\"");

    if (fmt && *fmt && !ln.cut) {
        char kv[LOG_LINE_MAX];
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(kv, sizeof kv, fmt, ap);
        va_end(ap);
        if (n > 0) {
            puts_(&ln, " ");
            put_escaped(&ln, kv, 0);
            if ((size_t)n >= sizeof kv)
                ln.cut = 1;
        }
    }

    if (ln.cut) {
        memcpy(ln.buf + ln.pos, "...", 3);
        ln.pos += 3;
    }
    ln.buf[ln.pos++] = '\n';
    write_all(ln.buf, ln.pos);
    errno = saved_errno;
}

/*
 * A zeroed state has never allowed an event: the first call is always
 * allowed. (An allowed event at now_ms == 0 looks like "never" again; wall
 * clock ms are never 0.) A clock that steps back also allows the event.
 */
uint64_t log_ratelimit(struct log_ratelimit *r, uint64_t now_ms, uint64_t interval_ms)
{
    int never = r->last_ms == 0 && r->suppressed == 0;
    if (never || now_ms < r->last_ms || now_ms - r->last_ms >= interval_ms) {
        uint64_t n = r->suppressed + 1;
        r->suppressed = 0;
        r->last_ms = now_ms;
        return n;
    }
    r->suppressed++;
    return 0;
}

/*
 * scheme://user:password@host:port/vhost -> scheme://user:***@host:port/vhost
 *
 * The userinfo ends at the LAST '@' (a raw '@' or '/' in a password would
 * otherwise leak part of it) and the password starts after the first ':'
 * before that '@'. Without "://" the whole string is taken as authority.
 * No '@', or no ':' before it: copied unchanged. Output is always
 * NUL-terminated and cut to outlen.
 */
void log_mask_uri(const char *uri, char *out, size_t outlen)
{
    if (!out || outlen == 0)
        return;
    out[0] = '\0';
    if (!uri)
        return;

    const char *rest = strstr(uri, "://");
    rest = rest ? rest + 3 : uri;
    const char *at = strrchr(rest, '@');
    const char *colon = NULL;
    if (at) {
        colon = memchr(rest, ':', (size_t)(at - rest));
    }
    if (!colon) {
        snprintf(out, outlen, "%s", uri);
        return;
    }
    snprintf(out, outlen, "%.*s***%s", (int)(colon + 1 - uri), uri, at);
}
