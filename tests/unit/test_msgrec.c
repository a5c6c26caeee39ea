/*
 * test_msgrec.c -- a delivery as a log record (due time, invalid-delay
 * policy) and a record as a publish (exchange, error, delay, id).
 */
#include "delay-bridge/msgrec.h"
#include "check.h"

static struct config_route route(enum invalid_delay_policy p)
{
    struct config_route rc;

    memset(&rc, 0, sizeof rc);
    strcpy(rc.name, "orders");
    strcpy(rc.target_exchange, "orders.close");
    strcpy(rc.dead_letter_exchange, "orders.errors");
    rc.invalid_delay = p;
    return rc;
}

static const uint8_t props[] = {0x10, 0x00, 0x02};
static const struct msgrec_in in = {"orders.delayed", 14, "close", 5, props, 3,
                                    (const uint8_t *)"body", 4, NULL, 0, 0};

static void test_valid_delay(void)
{
    struct config_route rc = route(INVALID_DELAY_PUBLISH);
    struct walrec_add a;
    struct msgrec_out o;

    CHECK(msgrec_from_delivery(&a, &rc, &in, 1000, XDELAY_OK, 5000) == 0);
    CHECK_U64(a.enqueue_ms, 1000);
    CHECK_U64(a.due_ms, 6000);
    CHECK(a.flags == 0 && a.error == 0);
    CHECK(a.route_len == 6 && memcmp(a.route, "orders", 6) == 0);
    CHECK(a.exchange_len == 14 && a.routing_key_len == 5 && a.props_len == 3 && a.body_len == 4);
    a.msg_id = 77;
    msgrec_to_publish(&a, &rc, 0xabcdefull, 0, &o);
    CHECK_STR(o.exchange, "orders.close");
    CHECK(o.error == NULL);
    CHECK_U64(o.delay_ms, 5000);
    CHECK_STR(o.id, "0000000000abcdef-77");
    CHECK(o.drop_stamp == 0); /* delay_from "bridge": headers forwarded as they came */
    rc.delay_from = DELAY_FROM_BROKER;
    msgrec_to_publish(&a, &rc, 0xabcdefull, 0, &o);
    CHECK(o.drop_stamp == 1); /* the broker's stamp dated this hop only */
    msgrec_to_handback(&a, &rc, 0xabcdefull, 0, 2000, &o);
    CHECK(o.handback == 1 && o.drop_stamp == 1);
}

static void test_now(void)
{
    struct config_route rc = route(INVALID_DELAY_DEAD_LETTER);
    struct walrec_add a;
    struct msgrec_out o;

    CHECK(msgrec_from_delivery(&a, &rc, &in, 1000, XDELAY_NOW, 0) == 0);
    CHECK_U64(a.due_ms, 1000);
    CHECK(a.flags == 0);
    msgrec_to_publish(&a, &rc, 1, 0, &o);
    CHECK_STR(o.exchange, "orders.close");
    CHECK_U64(o.delay_ms, 0);
}

static void test_invalid_publish_policy(void)
{
    struct config_route rc = route(INVALID_DELAY_PUBLISH);
    struct walrec_add a;
    struct msgrec_out o;

    CHECK(msgrec_from_delivery(&a, &rc, &in, 1000, XDELAY_EINVALID, 0) == 1);
    CHECK_U64(a.due_ms, 1000); /* at once, like the plugin */
    CHECK(a.flags == 0);
    msgrec_to_publish(&a, &rc, 1, 0, &o);
    CHECK_STR(o.exchange, "orders.close");
    CHECK(o.error == NULL);
}

static void test_invalid_dead_letter_policy(void)
{
    struct config_route rc = route(INVALID_DELAY_DEAD_LETTER);
    struct walrec_add a;
    struct msgrec_out o;

    CHECK(msgrec_from_delivery(&a, &rc, &in, 1000, XDELAY_ETOOBIG, 99999) == 1);
    CHECK_U64(a.due_ms, 1000);
    CHECK(a.flags == WALREC_ADD_DEADLETTER && a.error == XDELAY_ETOOBIG);
    msgrec_to_publish(&a, &rc, 1, 0, &o);
    CHECK_STR(o.exchange, "orders.errors");
    CHECK_STR(o.error, "x-delay above max_delay_ms");
}

static void test_long_names_cut(void)
{
    struct config_route rc = route(INVALID_DELAY_PUBLISH);
    struct msgrec_in big = in;
    struct walrec_add a;
    char name[400];

    memset(name, 'k', sizeof name);
    big.routing_key = name;
    big.routing_key_len = sizeof name;
    msgrec_from_delivery(&a, &rc, &big, 0, XDELAY_OK, 1);
    CHECK(a.routing_key_len == 255);
}

static void test_unroutable(void)
{
    struct config_route rc = route(INVALID_DELAY_DEAD_LETTER);
    struct walrec_add a;
    struct msgrec_out o;

    msgrec_from_delivery(&a, &rc, &in, 1000, XDELAY_OK, 5);
    msgrec_to_publish(&a, &rc, 1, 1, &o); /* returned, but no unroutable_exchange: as before */
    CHECK_STR(o.exchange, "orders.close");
    CHECK(o.original_exchange == NULL);
    strcpy(rc.unroutable_exchange, "orders.unroutable");
    msgrec_to_publish(&a, &rc, 1, 1, &o);
    CHECK_STR(o.exchange, "orders.unroutable");
    CHECK_STR(o.original_exchange, "orders.close");
    msgrec_to_publish(&a, &rc, 1, 0, &o);
    CHECK_STR(o.exchange, "orders.close");
}

static void test_keys(void)
{
    struct config_route rc = route(INVALID_DELAY_DEAD_LETTER);
    struct msgrec_in k = in;
    struct walrec_add a;
    struct msgrec_out o;
    char long_key[300];

    k.key = "order-7";
    k.key_len = 7;
    CHECK(msgrec_from_delivery(&a, &rc, &k, 1000, XDELAY_OK, 50) == 0);
    CHECK((a.flags & WALREC_ADD_KEYED) && a.key_len == 7 && memcmp(a.key, "order-7", 7) == 0);
    memset(long_key, 'k', sizeof long_key);
    k.key = long_key;
    k.key_len = 256; /* over 255: invalid, handled by the route's policy */
    CHECK(msgrec_from_delivery(&a, &rc, &k, 1000, XDELAY_OK, 50) == MSGREC_INVALID_KEY);
    CHECK(!(a.flags & WALREC_ADD_KEYED) && (a.flags & WALREC_ADD_DEADLETTER) && a.due_ms == 1000);
    msgrec_to_publish(&a, &rc, 1, 0, &o);
    CHECK_STR(o.error, "invalid x-delay-key");
    k.key = NULL;
    k.key_invalid = 1; /* present, not a string */
    CHECK(msgrec_from_delivery(&a, &rc, &k, 1000, XDELAY_EINVALID, 0) ==
          (MSGREC_INVALID_DELAY | MSGREC_INVALID_KEY));
    msgrec_to_publish(&a, &rc, 1, 0, &o);
    CHECK_STR(o.error, "invalid x-delay"); /* the delay is what made it invalid first */
}

/* A drain: a waiting message goes back to the ingress with the rest of its delay. */
static void test_handback(void)
{
    struct config_route rc = route(INVALID_DELAY_DEAD_LETTER);
    struct walrec_add a;
    struct msgrec_out o;

    strcpy(rc.ingress_exchange, "orders.delayed");
    CHECK(msgrec_from_delivery(&a, &rc, &in, 1000, XDELAY_OK, 60000) == 0);
    a.msg_id = 9;
    msgrec_to_handback(&a, &rc, 0xabcdefull, 0, 21000, &o);
    CHECK(o.handback == 1);
    CHECK_STR(o.exchange, "orders.delayed");
    CHECK_U64(o.remaining_ms, 40000); /* due 61000, now 21000 */
    CHECK_U64(o.delay_ms, 0);         /* x-delay is set, not negated */
    CHECK_STR(o.id, "0000000000abcdef-9");

    /* already due: published as usual */
    msgrec_to_handback(&a, &rc, 1, 0, 61000, &o);
    CHECK(o.handback == 0);
    CHECK_STR(o.exchange, "orders.close");

    /* dead-lettered (an invalid delay): to the dead-letter exchange, never back */
    CHECK(msgrec_from_delivery(&a, &rc, &in, 1000, XDELAY_ETOOBIG, 99999) == 1);
    msgrec_to_handback(&a, &rc, 1, 0, 0, &o);
    CHECK(o.handback == 0);
    CHECK_STR(o.exchange, "orders.errors");
}

/* delayed_exchanges: to the record's own exchange; a hand-back there too, unmarked. */
static void test_delayed_exchanges(void)
{
    struct config_route rc = route(INVALID_DELAY_PUBLISH);
    struct walrec_add a;
    struct msgrec_out o;

    rc.target_exchange[0] = '\0';
    rc.delayed_exchanges = 1;
    CHECK(msgrec_from_delivery(&a, &rc, &in, 1000, XDELAY_OK, 60000) == 0);
    a.msg_id = 4;
    msgrec_to_publish(&a, &rc, 1, 0, &o);
    CHECK_STR(o.exchange, "orders.delayed"); /* the delivery's exchange */
    CHECK(o.refused == 0 && o.unmarked == 0 && o.original_exchange == NULL);
    CHECK_U64(o.delay_ms, 60000);

    /* a drain: back to the same exchange, with what remains, without x-delay-bridge-id */
    msgrec_to_handback(&a, &rc, 1, 0, 21000, &o);
    CHECK(o.handback == 1 && o.unmarked == 1 && o.refused == 0);
    CHECK_STR(o.exchange, "orders.delayed");
    CHECK_U64(o.remaining_ms, 40000);
    /* diverted (its exchange returned it): to unroutable_exchange, even while draining */
    strcpy(rc.unroutable_exchange, "lost");
    msgrec_to_handback(&a, &rc, 1, 1, 21000, &o);
    CHECK(o.handback == 0);
    CHECK_STR(o.exchange, "lost");
    CHECK_STR(o.original_exchange, "orders.delayed");

    /* the default exchange, or the route's own ingress exchange: never published */
    struct msgrec_in raw = in;
    raw.exchange = "";
    raw.exchange_len = 0;
    raw.routing_key = "payments.secret";
    raw.routing_key_len = 15;
    msgrec_from_delivery(&a, &rc, &raw, 1000, XDELAY_OK, 5000);
    msgrec_to_publish(&a, &rc, 1, 0, &o);
    CHECK(o.refused == 1);
    msgrec_to_handback(&a, &rc, 1, 0, 2000, &o);
    CHECK(o.refused == 1);
    strcpy(rc.ingress_exchange, "orders.delayed");
    msgrec_from_delivery(&a, &rc, &in, 1000, XDELAY_OK, 5000);
    msgrec_to_publish(&a, &rc, 1, 0, &o);
    CHECK(o.refused == 1);
    /* ... but dead-lettered, it goes to the operator's dead-letter exchange */
    rc.invalid_delay = INVALID_DELAY_DEAD_LETTER;
    msgrec_from_delivery(&a, &rc, &raw, 1000, XDELAY_ETOOBIG, 0);
    msgrec_to_publish(&a, &rc, 1, 0, &o);
    CHECK(o.refused == 0);
    CHECK_STR(o.exchange, "orders.errors");

    /* an ordinary route is untouched: its target */
    rc = route(INVALID_DELAY_PUBLISH);
    msgrec_from_delivery(&a, &rc, &raw, 1000, XDELAY_OK, 5000);
    msgrec_to_publish(&a, &rc, 1, 0, &o);
    CHECK(o.refused == 0 && o.unmarked == 0);
    CHECK_STR(o.exchange, "orders.close");
}

static const struct check_case cases[] = {
    {"valid_delay", test_valid_delay},
    {"now", test_now},
    {"invalid_publish_policy", test_invalid_publish_policy},
    {"invalid_dead_letter_policy", test_invalid_dead_letter_policy},
    {"long_names_cut", test_long_names_cut},
    {"unroutable", test_unroutable},
    {"keys", test_keys},
    {"handback", test_handback},
    {"delayed_exchanges", test_delayed_exchanges},
};

int main(int argc, char **argv)
{
    return CHECK_MAIN(argc, argv, cases);
}
