/*
 * xdelay.h -- what a publisher's x-delay asks for.
 *
 * Pure: the value arrives already taken out of its wire encoding (the AMQP
 * side maps rabbitmq-c's field kinds onto struct xdelay_value, see
 * broker_msg.h), so the rules are tested without a broker or a codec.
 *
 * x-delay accepted (delay in ms, as the plugin and better):
 *   any integer (signed or unsigned, 8 to 64 bit)            -> its value
 *     (an unsigned 64-bit value is read as signed: py-amqp's 'L')
 *   float or double                                          -> truncated toward zero
 *   decimal (scale s, value v)                               -> v / 10^s truncated
 *   text holding a decimal number ("7000.5", " 2.5e3 ",
 *   "1.0E+4"), surrounding ASCII spaces allowed              -> truncated toward zero
 * No value (header missing), or a value <= 0                 -> XDELAY_NOW (delay 0)
 * Anything else (other types, non-numeric or empty text,
 * NaN/inf, out of int64 range)                               -> XDELAY_EINVALID
 * A value above max_delay_ms                                 -> XDELAY_ETOOBIG
 *
 * x-delay-until and x-opt-delivery-time (an absolute due time): an AMQP
 * timestamp (seconds), an epoch-ms number (at least 10^11), or RFC 3339
 * text; never rounded down. Past -> NOW; unreadable -> *_EINVALID; further
 * than max_delay_ms ahead -> *_ETOOBIG. xdelay.c has the full table.
 */
#ifndef DB_XDELAY_H
#define DB_XDELAY_H

#include <stddef.h>
#include <stdint.h>

enum xdelay_status {
    XDELAY_OK = 0,       /* *delay_ms > 0 */
    XDELAY_NOW = 1,      /* missing, zero or negative: publish at once; *delay_ms = 0 */
    XDELAY_EINVALID = 2, /* not a number we accept */
    XDELAY_ETOOBIG = 3,  /* above max_delay_ms */
    XDELAY_EKEY = 4,     /* x-delay-key not a string, or over 255 bytes (an error code only) */
    XDELAY_UNTIL_EINVALID = 5, /* x-delay-until not a time we read */
    XDELAY_UNTIL_ETOOBIG = 6,  /* x-delay-until more than max_delay_ms ahead */
    XDELAY_DT_EINVALID = 7,    /* x-opt-delivery-time not a time we read */
    XDELAY_DT_ETOOBIG = 8,     /* x-opt-delivery-time more than max_delay_ms ahead */
    XDELAY_DD_EINVALID = 9,    /* x-opt-delivery-delay not a number we accept */
    XDELAY_DD_ETOOBIG = 10,    /* x-opt-delivery-delay above max_delay_ms */
    /* A retry route's parks (retry.h): never a publisher's x-delay, always dead-lettered. */
    XDELAY_RETRY_LAST = 11,    /* its last attempt failed (retry.max_attempts) */
    XDELAY_RETRY_REASON = 12,  /* dead-lettered for a reason the route does not retry */
    XDELAY_RETRY_NOQUEUE = 13, /* no x-death names a queue: not a dead-letter */
    XDELAY_RETRY_NOTADMITTED = 14, /* the queue named is not one the route sends back to */
};
/* The numbers are stored in the WAL (dead-lettered records): never renumber. */

/* Which header an absolute due time came from (for the error it reports). */
enum { XDELAY_H_UNTIL = 0, XDELAY_H_DELIVERY_TIME = 1 };

enum xdelay_kind {
    XDELAY_INT,
    XDELAY_UINT,
    XDELAY_FLOAT,
    XDELAY_DECIMAL,
    XDELAY_TEXT,
    XDELAY_OTHER,
    XDELAY_TIMESTAMP, /* u = seconds since the epoch (AMQP 'T') */
};

struct xdelay_value {
    enum xdelay_kind kind;
    int64_t i;  /* INT */
    uint64_t u; /* UINT, TIMESTAMP */
    double f;   /* FLOAT */
    struct {
        uint8_t scale;
        int32_t value;
    } dec;      /* DECIMAL */
    struct {
        const char *p; /* not NUL-terminated */
        size_t len;
    } text;     /* TEXT */
};

/* Judge v (NULL = no header). *delay_ms is 0 unless XDELAY_OK. */
enum xdelay_status xdelay_eval(const struct xdelay_value *v, uint64_t max_delay_ms,
                               uint64_t *delay_ms);

/*
 * Judge an absolute due time v (NULL = no header) from header `which`
 * (XDELAY_H_UNTIL or XDELAY_H_DELIVERY_TIME) at wall-clock now_ms.
 * XDELAY_OK: *delay_ms = due - now_ms > 0, so now_ms + *delay_ms is the
 * due time asked for (rounded up to the ms). Else *delay_ms = 0.
 */
enum xdelay_status xdelay_until_eval(const struct xdelay_value *v, int which, uint64_t now_ms,
                                     uint64_t max_delay_ms, uint64_t *delay_ms);

/* 1 for the statuses the route's invalid_delay policy handles (every *EINVALID, *ETOOBIG). */
int xdelay_invalid(enum xdelay_status s);

/* "invalid x-delay" / "x-delay above max_delay_ms" / ... / "" for OK and NOW. */
const char *xdelay_strerror(enum xdelay_status s);

#endif
