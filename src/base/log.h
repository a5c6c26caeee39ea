/*
 * log.h -- one line per event on stderr.
 *
 *   2026-11-22T05:02:28.123Z level=info mod=wal msg="segment rolled" seg=12
 *
 * The format string holds the key=value pairs after the message; callers
 * never log payloads, pass URIs through log_mask_uri() first, and every
 * value a publisher, the network or the broker chose through log_quote().
 */
#ifndef DB_LOG_H
#define DB_LOG_H

#include <stddef.h>
#include <stdint.h>

enum log_level { LOG_LEVEL_DEBUG, LOG_LEVEL_INFO, LOG_LEVEL_WARN, LOG_LEVEL_ERROR };

void log_set_level(enum log_level l);
enum log_level log_get_level(void);
/* "debug", "info", "warn", "error" -> 0 and *l, else -1. */
int log_parse_level(const char *s, enum log_level *l);

/* log_at(LOG_LEVEL_INFO, "wal", "segment rolled", "seg=%u", n); fmt may be NULL. */
void log_at(enum log_level l, const char *mod, const char *msg, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define log_debug(mod, msg, ...) \
    do { if (log_get_level() <= LOG_LEVEL_DEBUG) log_at(LOG_LEVEL_DEBUG, mod, msg, __VA_ARGS__); } while (0)
#define log_info(mod, msg, ...) log_at(LOG_LEVEL_INFO, mod, msg, __VA_ARGS__)
#define log_warn(mod, msg, ...) log_at(LOG_LEVEL_WARN, mod, msg, __VA_ARGS__)
#define log_error(mod, msg, ...) log_at(LOG_LEVEL_ERROR, mod, msg, __VA_ARGS__)

/*
 * Rate limiting for repeated events: log_ratelimit(&state, now_ms, interval_ms)
 * returns the number of events suppressed since the last allowed one plus
 * one when this event may be logged, 0 when it should be counted silently.
 */
struct log_ratelimit {
    uint64_t last_ms;
    uint64_t suppressed;
};
uint64_t log_ratelimit(struct log_ratelimit *r, uint64_t now_ms, uint64_t interval_ms);

/*
 * A value a stranger chose (a header's queue name, a query argument, a
 * broker's error text) as one quoted log value: the len bytes at s (NULL:
 * none) in double quotes, '"' and '\' escaped with a backslash, \n \r \t as
 * such, other control bytes and every byte that is not valid UTF-8 as \xHH.
 * It can neither end its quotes early (to add a key=value pair of its own)
 * nor start a new line. Written into buf (n bytes, NUL-terminated); too long
 * a value is cut, never inside an escape, and ends in ..." . Returns buf.
 * Use it with a plain %s:
 *
 *   char qb[LOG_QUOTE_BUF];
 *   log_warn("retry", "message parked", "queue=%s", log_quote(qb, sizeof qb, q, qlen));
 *
 * or, with a buffer of the call's own (a compound literal, alive until the
 * end of the enclosing block):
 *
 *   log_warn("consume", "connection lost", "reason=%s", LOG_QUOTE_STR(why));
 *
 * len SIZE_MAX: up to s's NUL. LOG_QUOTE_BUF holds any AMQP short string
 * (255 bytes, at most 4 per byte escaped); a longer value is cut.
 */
#define LOG_QUOTE_BUF (4 * 255 + 3)
const char *log_quote(char *buf, size_t n, const char *s, size_t len);
#define LOG_QUOTE(s, len) log_quote((char[LOG_QUOTE_BUF]){ 0 }, LOG_QUOTE_BUF, (s), (len))
#define LOG_QUOTE_STR(s) LOG_QUOTE((s), SIZE_MAX)

/* Copy uri into out with the password replaced by "***". */
void log_mask_uri(const char *uri, char *out, size_t outlen);

#endif
