/*
 * xdelay.h -- what a publisher's x-delay asks for.
 *
 * Pure: the value arrives already taken out of its wire encoding (the AMQP
 * side maps rabbitmq-c's field kinds onto struct xdelay_value, see
 * amqp_msg.h), so the rules are tested without a broker or a codec.
 *
 * x-delay accepted (delay in ms, as the plugin and better):
 *   any integer (signed or unsigned, 8 to 64 bit)            -> its value
 *   float or double                                          -> truncated toward zero
 *   decimal (scale s, value v)                               -> v / 10^s truncated
 *   text holding an optionally signed decimal integer,
 *   surrounding ASCII spaces allowed                         -> its value
 * No value (header missing), or a value <= 0                 -> XDELAY_NOW (delay 0)
 * Anything else (other types, non-numeric or empty text,
 * NaN/inf, out of int64 range)                               -> XDELAY_EINVALID
 * A value above max_delay_ms                                 -> XDELAY_ETOOBIG
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
};

enum xdelay_kind { XDELAY_INT, XDELAY_UINT, XDELAY_FLOAT, XDELAY_DECIMAL, XDELAY_TEXT, XDELAY_OTHER };

struct xdelay_value {
    enum xdelay_kind kind;
    int64_t i;  /* INT */
    uint64_t u; /* UINT */
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

/* "invalid x-delay" / "x-delay above max_delay_ms" / "" for OK and NOW. */
const char *xdelay_strerror(enum xdelay_status s);

#endif
