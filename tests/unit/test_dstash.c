/*
 * test_dstash.c -- the stash of deliveries waiting for the WAL to have room
 * (src/daemon/dstash.c): copies that outlive the consumer's buffers, FIFO order,
 * the lowest tag per connection and the lowest stream offset per route
 * (what the bridge's acks and place files must stay below), and clearing.
 */
#include "daemon/dstash.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

/* A delivery whose every pointer is into buf, as the consumer's are into its frames. */
static struct delivery make(char *buf, uint32_t gen, uint64_t tag, int route, int64_t off,
                            const char *body)
{
    struct delivery d;

    memset(&d, 0, sizeof(d));
    d.gen = gen;
    d.tag = tag;
    d.route = route;
    d.stream_offset = off;
    sprintf(buf, "ex|rk.%llu|%s|KEY|props", (unsigned long long)tag, body);
    d.exchange = buf;
    d.exchange_len = 2;
    d.routing_key = buf + 3;
    d.routing_key_len = strchr(buf + 3, '|') - (buf + 3);
    d.body = (const uint8_t *)d.routing_key + d.routing_key_len + 1;
    d.body_size = strlen(body);
    d.key = 1;
    d.key_str = (const char *)d.body + d.body_size + 1;
    d.key_len = 3;
    d.props = (const uint8_t *)d.key_str + 4;
    d.props_len = 5;
    d.delay_ms = 1000 + tag;
    d.now_ms = 5000;
    return d;
}

static void test_copies_and_order(void)
{
    struct dstash s = {0};
    char buf[256];

    for (uint64_t tag = 1; tag <= 5; tag++) {
        struct delivery d = make(buf, 7, tag, 0, -1, tag % 2 ? "odd body" : "even");
        dstash_put(&s, &d);
        memset(buf, 'X', sizeof(buf)); /* the consumer reuses its buffers */
    }
    CHECK(s.n == 5 && s.stashed == 5, "5 waiting: %zu", s.n);
    for (uint64_t tag = 1; tag <= 5; tag++) {
        const struct delivery *d = dstash_peek(&s);
        char rk[32];
        const char *body = tag % 2 ? "odd body" : "even";
        CHECK(d && d->tag == tag, "FIFO: want tag %llu", (unsigned long long)tag);
        snprintf(rk, sizeof(rk), "rk.%llu", (unsigned long long)tag);
        CHECK(d->exchange_len == 2 && memcmp(d->exchange, "ex", 2) == 0, "exchange copied");
        CHECK(d->routing_key_len == strlen(rk) && memcmp(d->routing_key, rk, strlen(rk)) == 0,
              "routing key copied");
        CHECK(d->body_size == strlen(body) && memcmp(d->body, body, strlen(body)) == 0,
              "body copied");
        CHECK(d->key_len == 3 && memcmp(d->key_str, "KEY", 3) == 0, "key copied");
        CHECK(d->props_len == 5 && memcmp(d->props, "props", 5) == 0, "properties copied");
        CHECK(d->delay_ms == 1000 + tag && d->now_ms == 5000, "the clock it counts from kept");
        CHECK(d->cancel_key == NULL && d->ev.kind == NULL, "absent strings stay NULL");
        dstash_pop(&s);
    }
    CHECK(s.n == 0 && s.bytes == 0 && !dstash_peek(&s), "empty");
    dstash_pop(&s); /* popping an empty stash is harmless */
}

static void test_floors(void)
{
    struct dstash s = {0};
    char buf[256];
    struct delivery d;

    CHECK(dstash_min_tag(&s, 1) == UINT64_MAX, "no tag when empty");
    CHECK(dstash_min_offset(&s, 0) == INT64_MAX, "no offset when empty");
    d = make(buf, 1, 40, 0, -1, "a"); /* an older connection's */
    dstash_put(&s, &d);
    d = make(buf, 2, 9, 1, 700, "b");
    dstash_put(&s, &d);
    d = make(buf, 2, 12, 1, 650, "c"); /* offsets need not rise with arrival */
    dstash_put(&s, &d);
    d = make(buf, 2, 15, 0, -1, "d");
    dstash_put(&s, &d);
    CHECK(dstash_min_tag(&s, 2) == 9, "lowest tag of connection 2: %llu",
          (unsigned long long)dstash_min_tag(&s, 2));
    CHECK(dstash_min_tag(&s, 1) == 40, "lowest tag of connection 1");
    CHECK(dstash_min_tag(&s, 3) == UINT64_MAX, "none of connection 3");
    CHECK(dstash_min_offset(&s, 1) == 650, "lowest offset of route 1: %lld",
          (long long)dstash_min_offset(&s, 1));
    CHECK(dstash_min_offset(&s, 0) == INT64_MAX, "route 0 is no stream");
    CHECK(s.bytes > 0, "bytes counted");
    dstash_clear(&s);
    CHECK(s.n == 0 && s.bytes == 0 && !dstash_peek(&s), "cleared");
    CHECK(s.stashed == 4, "the counter stays: %llu", (unsigned long long)s.stashed);
}

static void test_big_body(void)
{
    struct dstash s = {0};
    struct delivery d;
    size_t n = 3u << 20;
    uint8_t *body = malloc(n);

    for (size_t i = 0; i < n; i++)
        body[i] = (uint8_t)(i * 31);
    memset(&d, 0, sizeof(d));
    d.body = body;
    d.body_size = n;
    d.tag = 1;
    dstash_put(&s, &d);
    free(body);
    const struct delivery *c = dstash_peek(&s);
    int same = 1;
    for (size_t i = 0; i < n && same; i++)
        same = c->body[i] == (uint8_t)(i * 31);
    CHECK(same && c->body_size == n, "a 3 MiB body copied whole");
    dstash_clear(&s);
}

static const struct check_case cases[] = {
    {"copies_and_order", test_copies_and_order},
    {"floors", test_floors},
    {"big_body", test_big_body},
};

int main(int argc, char **argv)
{
    return CHECK_MAIN(argc, argv, cases);
}
