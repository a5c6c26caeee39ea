/*
 * publisher_gone.c -- a delayed_exchanges route's exchanges that are gone.
 *
 * Such a route publishes each message to its own exchange, many exchanges
 * on one confirm channel (config_delayed.c). A publish to an exchange that
 * was deleted (404 NOT_FOUND) or that the bridge's user may not write
 * (403 ACCESS_REFUSED) closes that channel, and everything in flight is
 * due again -- the same message first, for ever, holding up every other
 * exchange's. So the name the broker's close gives ("no exchange 'X' in
 * vhost 'V'", "access to exchange 'X' in vhost 'V' refused for user 'U'")
 * is remembered for PUB_GONE_MS (at most PUB_GONE_MAX names a route, the
 * oldest replaced), the channel reopens at once, and a message for that
 * exchange meanwhile is reported returned without a publish
 * (publisher_send): the bridge's unroutable path takes it
 * (unroutable_exchange, with x-original-exchange; else counted, logged
 * and dropped -- what the plugin did with a message whose exchange was
 * deleted). After PUB_GONE_MS one publish tries the exchange again, so one
 * declared anew is used again.
 *
 * Only for a publish: a close while the channel is set up (a passive
 * declare of unroutable_exchange or dead_letter_exchange) fails the route
 * as on any route.
 */
#include "publisher_int.h"

#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/xalloc.h"

/* The exchange a close names ("... exchange 'NAME' in vhost ..."), into buf; 0 if none. */
static int close_exchange(const amqp_channel_close_t *cm, char *buf, size_t len)
{
    static const char open[] = "exchange '", end[] = "' in vhost '";
    const char *t = cm->reply_text.bytes, *from = NULL, *to = NULL;
    size_t n = t ? cm->reply_text.len : 0;

    for (size_t i = 0; i + sizeof(open) - 1 <= n && !from; i++)
        if (memcmp(t + i, open, sizeof(open) - 1) == 0)
            from = t + i + sizeof(open) - 1;
    for (const char *q = from; q && q + sizeof(end) - 1 <= t + n; q++)
        if (memcmp(q, end, sizeof(end) - 1) == 0)
            to = q; /* the last: a name may hold the words */
    if (!to || (size_t)(to - from) >= len)
        return 0;
    memcpy(buf, from, (size_t)(to - from));
    buf[to - from] = '\0';
    return 1;
}

int pub_note_gone(struct route_pub *r, const amqp_channel_close_t *cm, const char *why)
{
    char name[CONFIG_NAME_MAX + 1];
    uint64_t now = clock_mono_ms();
    int k = 0;

    if (!r->cfg->delayed_exchanges || r->opening ||
        (cm->reply_code != AMQP_NOT_FOUND && cm->reply_code != AMQP_ACCESS_REFUSED) ||
        !close_exchange(cm, name, sizeof(name)))
        return 0;
    if (!r->gone)
        r->gone = xcalloc(PUB_GONE_MAX, sizeof(*r->gone));
    for (int i = 0; i < PUB_GONE_MAX; i++) {
        if (!strcmp(r->gone[i].name, name)) {
            k = i;
            break;
        }
        if (r->gone[i].until < r->gone[k].until)
            k = i;
    }
    memcpy(r->gone[k].name, name, strlen(name) + 1);
    r->gone[k].until = now + PUB_GONE_MS;
    log_warn("publish", "a message's exchange is gone or refused: its messages go the "
             "unroutable way (unroutable_exchange, else dropped) for a while, then it is tried "
             "again", "route=%s exchange=\"%s\" for_ms=%d reason=\"%s\"", r->cfg->name, name,
             PUB_GONE_MS, why);
    return 1;
}

int pub_is_gone(const struct route_pub *r, const char *exchange)
{
    uint64_t now = clock_mono_ms();

    for (int i = 0; r->gone && i < PUB_GONE_MAX; i++)
        if (r->gone[i].until > now && !strcmp(r->gone[i].name, exchange))
            return 1;
    return 0;
}
