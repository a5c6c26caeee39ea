/*
 * test_config_delayed.c -- routes[].delayed_exchanges (config_delayed.c):
 * the defaults it sets, the keys it refuses by name and why, the queue it
 * allows, one such route per vhost, what it does to the loop check, the
 * reload diff, and GET /routes's rendering of it.
 */
#include "delay-bridge/config.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "config_test.h"

#define DX(extra) "{\"name\":\"delayed\",\"delayed_exchanges\":true" extra "}"

static void test_defaults(void)
{
    struct config c;

    if (OK(CFG(DX("")), &c) == 0) {
        CHECK(c.nroutes == 1);
        CHECK(c.routes[0].delayed_exchanges == 1);
        CHECK_STR(c.routes[0].ingress_queue, "delay-bridge.delayed");
        CHECK_STR(c.routes[0].ingress_exchange, ""); /* nothing declared, nothing bound */
        CHECK_STR(c.routes[0].target_exchange, "");
        CHECK(c.routes[0].queue_type == QUEUE_CLASSIC);
        CHECK(c.routes[0].retry == NULL);
        config_free(&c);
    }
    /* named ingress, limits and side exits as on any route */
    if (OK(CFG(DX(",\"ingress_queue\":\"dq\",\"ingress_exchange\":\"dx.in\","
                  "\"max_delay_ms\":1000,\"invalid_delay\":\"dead-letter\","
                  "\"dead_letter_exchange\":\"dl\",\"unroutable_exchange\":\"lost\","
                  "\"queue_type\":\"classic\",\"vhost\":\"apps\"")), &c) == 0) {
        CHECK_STR(c.routes[0].ingress_queue, "dq");
        CHECK_STR(c.routes[0].ingress_exchange, "dx.in");
        CHECK_STR(c.routes[0].unroutable_exchange, "lost");
        config_free(&c);
    }
    /* false: an ordinary route, which needs its ingress and target */
    ERRX(CFG("{\"name\":\"d\",\"delayed_exchanges\":false}"),
         "test.json: routes[0].ingress_exchange: missing; expected a string");
    if (OK(CFG(ROUTE(",\"delayed_exchanges\":false")), &c) == 0) {
        CHECK(c.routes[0].delayed_exchanges == 0);
        config_free(&c);
    }
}

static void test_refused(void)
{
    ERRX(CFG(DX(",\"target_exchange\":\"orders\"")),
         "test.json: routes[0].target_exchange: not allowed with delayed_exchanges: each message "
         "is published to the exchange it was published to (its delivery's exchange); leave "
         "target_exchange out");
    ERR2(CFG(DX(",\"declare_target\":false")), "routes[0].declare_target",
         "not allowed with delayed_exchanges");
    ERR2(CFG(DX(",\"target_type\":\"topic\"")), "routes[0].target_type",
         "not allowed with delayed_exchanges");
    ERR2(CFG(DX(",\"retry\":{\"parking_exchange\":\"p\",\"queues\":{\"w\":{}}}")),
         "routes[0].retry", "make them two routes");
    ERRX(CFG(DX(",\"queue_type\":\"quorum\"")),
         "test.json: routes[0].queue_type: a delayed_exchanges route's ingress is a classic "
         "queue: the x-delayed-message exchanges declare \"delay-bridge.delayed\" classic, and "
         "both declares must agree; leave queue_type out");
    ERR2(CFG(DX(",\"queue_type\":\"stream\"")), "routes[0].queue_type", "classic");
    ERR2(CFG(DX(",\"single_active_consumer\":true")), "routes[0].single_active_consumer",
         "x-single-active-consumer");
    ERR2(CFG(DX(",\"share_keys\":true")), "routes[0].share_keys", "needs ingress_exchange");
    ERR2(CFG(DX(",\"ingress_queue\":\"\"")), "routes[0].ingress_queue", "must not be empty");
    ERR2(CFG(DX(",\"ingress_exchange\":\"\"")), "routes[0].ingress_exchange",
         "must not be empty");
    ERR2(CFG(DX(",\"ingress_queue\":\"amq.q\"")), "routes[0].ingress_queue", "amq.");
    ERRX(CFG("{\"name\":\"d\",\"delayed_exchanges\":1}"),
         "test.json: routes[0].delayed_exchanges: expected true or false, got 1");
}

/* One per vhost (the queue), and "" is no ingress exchange: no false clash, no false loop. */
static void test_between_routes(void)
{
    struct config c;

    ERRX(CFG(DX("") "," "{\"name\":\"d2\",\"delayed_exchanges\":true}"),
         "test.json: routes[1].ingress_queue: \"delay-bridge.delayed\" is already used by "
         "routes[0]; expected a unique ingress_queue");
    /* two vhosts, two routes */
    if (OK(CFG(DX("") "," "{\"name\":\"d2\",\"delayed_exchanges\":true,\"vhost\":\"other\"}"),
           &c) == 0) {
        CHECK(c.nroutes == 2);
        config_free(&c);
    }
    /* beside an ordinary route whose target is the default exchange "" */
    if (OK(CFG(DX("") "," ROUTE2("") "," "{\"name\":\"raw\",\"ingress_exchange\":\"raw.d\","
               "\"ingress_queue\":\"raw.q\",\"target_exchange\":\"\"}"), &c) == 0) {
        CHECK(c.nroutes == 3);
        config_free(&c);
    }
}

static void saw(void *arg, const char *key)
{
    char *buf = arg;
    strncat(buf, key, 200 - strlen(buf) - 2);
    strcat(buf, " ");
}

/* The reload diff names the key (bridge_routes.c makes every key of that route wait). */
static void test_diff(void)
{
    struct config a, b;
    char keys[200] = "";

    if (OK(CFG(DX("")), &a) < 0)
        return;
    if (OK(CFG(DX("")), &b) < 0) {
        config_free(&a);
        return;
    }
    CHECK(config_route_same(&a.routes[0], &b.routes[0]));
    b.routes[0].delayed_exchanges = 0;
    CHECK(config_route_keys_diff(&a.routes[0], &b.routes[0], saw, keys) == 1);
    CHECK_STR(keys, "delayed_exchanges ");
    config_free(&a);
    config_free(&b);
}

static const struct check_case cases[] = {
    {"defaults", test_defaults},
    {"refused", test_refused},
    {"between_routes", test_between_routes},
    {"diff", test_diff},
};

int main(int argc, char **argv)
{
    unsetenv("DELAY_BRIDGE_BROKER_URI");
    return CHECK_MAIN(argc, argv, cases);
}
