/*
 * dstash.c -- deliveries waiting for the log to have room (dstash.h).
 *
 * One allocation per delivery: the struct, then every string and buffer
 * it points to, copied behind it, and the pointers set to the copies. The
 * queue is a singly linked list, oldest first; it holds at most what the
 * broker had in flight when intake paused (the routes' prefetch), so
 * nothing here needs to be faster than a walk.
 */
#include "dstash.h"

#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

struct dstash_item {
    struct dstash_item *next;
    size_t bytes;
    struct delivery d;
    uint8_t data[];
};

/* Copy n bytes of p to *at, point *dst there; NULL stays NULL. */
static void take(uint8_t **at, const void *p, size_t n, const void **dst)
{
    if (!p) {
        *dst = NULL;
        return;
    }
    if (n)
        memcpy(*at, p, n);
    *dst = *at;
    *at += n;
}

void dstash_put(struct dstash *s, const struct delivery *d)
{
    size_t body = d->body ? (size_t)d->body_size : 0;
    size_t props = d->props && d->props_len > 0 ? (size_t)d->props_len : 0;
    size_t n = (d->exchange ? d->exchange_len : 0) + (d->routing_key ? d->routing_key_len : 0) +
               body + (d->cancel_key ? d->cancel_key_len : 0) + (d->key_str ? d->key_len : 0) +
               props + (d->ev.kind ? d->ev.kind_len : 0) + (d->ev.key ? d->ev.key_len : 0) +
               (d->ev.origin ? d->ev.origin_len : 0) + (d->retry_queue ? d->retry_queue_len : 0);
    struct dstash_item *it = xmalloc(sizeof(*it) + n);
    uint8_t *at = it->data;

    it->next = NULL;
    it->bytes = n;
    it->d = *d;
    take(&at, d->exchange, d->exchange_len, (const void **)&it->d.exchange);
    take(&at, d->routing_key, d->routing_key_len, (const void **)&it->d.routing_key);
    take(&at, d->body, body, (const void **)&it->d.body);
    take(&at, d->cancel_key, d->cancel_key_len, (const void **)&it->d.cancel_key);
    take(&at, d->key_str, d->key_len, (const void **)&it->d.key_str);
    take(&at, d->props, props, (const void **)&it->d.props);
    take(&at, d->ev.kind, d->ev.kind_len, (const void **)&it->d.ev.kind);
    take(&at, d->ev.key, d->ev.key_len, (const void **)&it->d.ev.key);
    take(&at, d->ev.origin, d->ev.origin_len, (const void **)&it->d.ev.origin);
    take(&at, d->retry_queue, d->retry_queue_len, (const void **)&it->d.retry_queue);
    if (s->tail)
        s->tail->next = it;
    else
        s->head = it;
    s->tail = it;
    s->n++;
    s->bytes += n;
    s->stashed++;
}

const struct delivery *dstash_peek(const struct dstash *s)
{
    return s->head ? &s->head->d : NULL;
}

void dstash_pop(struct dstash *s)
{
    struct dstash_item *it = s->head;

    if (!it)
        return;
    s->head = it->next;
    if (!s->head)
        s->tail = NULL;
    s->n--;
    s->bytes -= it->bytes;
    free(it);
}

void dstash_clear(struct dstash *s)
{
    while (s->head)
        dstash_pop(s);
}

uint64_t dstash_min_tag(const struct dstash *s, uint32_t gen)
{
    uint64_t min = UINT64_MAX;

    for (const struct dstash_item *it = s->head; it; it = it->next)
        if (it->d.gen == gen && it->d.tag < min)
            min = it->d.tag;
    return min;
}

int64_t dstash_min_offset(const struct dstash *s, int route)
{
    int64_t min = INT64_MAX;

    for (const struct dstash_item *it = s->head; it; it = it->next)
        if (it->d.route == route && it->d.stream_offset >= 0 && it->d.stream_offset < min)
            min = it->d.stream_offset;
    return min;
}
