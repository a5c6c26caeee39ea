/*
 * log.c -- one line per event on stderr.
 *
 * Line format (UTC, millisecond precision):
 *
 *   2026-11-22T05:02:28.123Z level=info mod=wal msg="segment rolled" seg=12
 *   |----- time ----------| |- level -| |- mod -| |-- msg, quoted --| |- kv -|
 *
 * - msg is always quoted; '"' and '\' are escaped with a backslash, \n \r \t
 *   as such, every other control byte (and DEL) as \xHH. Valid UTF-8 passes
 *   through, so it stays readable; a byte that does not start a valid UTF-8
 *   sequence (stray continuation, overlong form, surrogate, past U+10FFFF,
 *   cut short) is written as \xHH, and so are the C1 controls U+0080..U+009F
 *   (\xc2\xHH: a terminal may read U+009B as CSI). Every line is valid UTF-8.
 * - the key=value part is the caller's printf format; it is not quoted, but
 *   control bytes and invalid UTF-8 in it are written as \xHH so an odd
 *   queue name can never split one event over two lines.
 * - a value a stranger chose (a queue name from x-death, a query argument,
 *   a broker's error text) goes through log_quote() and "%s": quoted, with
 *   '"' and '\' escaped as well, it stays one value -- it cannot close its
 *   quotes and add a key=value pair of its own. The escapes are ASCII, so
 *   the pass over the whole key=value part leaves them as they are.
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
#include "utf8.h"

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

/*
 * The length of the valid UTF-8 sequence at p (utf8.h), at most left
 * bytes long; 0 if p does not start one. C1 controls (U+0080..U+009F)
 * count as invalid here: they are escaped like the C0 ones.
 */
static size_t utf8_len(const unsigned char *p, size_t left)
{
    int n = utf8_char(p, left);

    return n == 2 && p[0] == 0xc2 && p[1] < 0xa0 ? 0 : (size_t)n;
}

/*
 * The escaped form of the bytes at p (left > 0 of them) into e (room for 4):
 * returns its length and sets *used to the bytes of p it stands for.
 * quoted: '"' and '\' are escaped too (inside a quoted value).
 */
static size_t escape_at(const unsigned char *p, size_t left, int quoted, char *e, size_t *used)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char ch = *p;
    size_t n = 0, u = ch < 0x80 ? 1 : utf8_len(p, left); /* 0: not valid UTF-8 */

    *used = 1;
    if (quoted && (ch == '"' || ch == '\\')) {
        e[n++] = '\\';
        e[n++] = (char)ch;
    } else if (ch == '\n' || ch == '\r' || ch == '\t') {
        e[n++] = '\\';
        e[n++] = ch == '\n' ? 'n' : ch == '\r' ? 'r' : 't';
    } else if (ch < 0x20 || ch == 0x7f || u == 0) {
        e[n++] = '\\';
        e[n++] = 'x';
        e[n++] = hex[ch >> 4];
        e[n++] = hex[ch & 15];
    } else {
        memcpy(e, p, u); /* ASCII, or one whole UTF-8 sequence (at most 4 bytes) */
        n = *used = u;
    }
    return n;
}

/* Append s escaped; quoted selects the msg rules (escape '"' and '\' too). */
static void put_escaped(struct line *ln, const char *s, int quoted)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t left = strlen(s);

    while (left > 0 && !ln->cut) {
        char e[4];
        size_t used, n = escape_at(p, left, quoted, e, &used);
        if (ln->pos + n > ln->cap) { /* never split an escape */
            ln->cut = 1;
            break;
        }
        memcpy(ln->buf + ln->pos, e, n);
        ln->pos += n;
        p += used;
        left -= used;
    }
}

/* The length of len bytes at p escaped as in a quoted value. */
static size_t quoted_len(const unsigned char *p, size_t len)
{
    size_t total = 0;

    while (len > 0) {
        char e[4];
        size_t used;
        total += escape_at(p, len, 1, e, &used);
        p += used;
        len -= used;
    }
    return total;
}

const char *log_quote(char *buf, size_t n, const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t pos = 1, room;

    if (!buf || n < 6) { /* room for "..." in quotes */
        if (buf && n)
            buf[0] = '\0';
        return buf ? buf : "";
    }
    if (!s)
        len = 0;
    else if (len == SIZE_MAX)
        len = strlen(s);
    /* all of it and the closing quote and NUL, else what fits before "..." */
    room = quoted_len(p, len) + 3 <= n ? n - 2 : n - 5;
    buf[0] = '"';
    while (len > 0) {
        char e[4];
        size_t used, k = escape_at(p, len, 1, e, &used);
        if (pos + k > room) { /* never split an escape */
            memcpy(buf + pos, "...", 3);
            pos += 3;
            break;
        }
        memcpy(buf + pos, e, k);
        pos += k;
        p += used;
        len -= used;
    }
    buf[pos++] = '"';
    buf[pos] = '\0';
    return buf;
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
