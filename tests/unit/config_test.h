/*
 * config_test.h -- what the configuration's unit tests share: a config
 * around given routes (CFG, ROUTE, ...) and the checks of config_parse()'s
 * result -- an error that is one line naming the file and holding the
 * given needles (ERR), or exactly a given message (ERRX); a success (OK).
 * Include after check.h.
 */
#ifndef DB_TEST_CONFIG_TEST_H
#define DB_TEST_CONFIG_TEST_H

#include <string.h>

#include "delay-bridge/config.h"

/* no '%' here: these strings are also used as printf formats */
#define URI "amqp://guest:guest@127.0.0.1:5672/dev"
#define BROKER "\"broker\":{\"uri\":\"" URI "\"}"
#define WAL "\"wal\":{\"dir\":\"/var/lib/delay-bridge\"}"
#define ROUTE_KEYS                                                                     \
    "\"name\":\"orders\",\"ingress_exchange\":\"orders.delayed\","                     \
    "\"ingress_queue\":\"orders.delayed.q\",\"target_exchange\":\"orders\""
/* one route with extra keys (start them with a comma) */
#define ROUTE(extra) "{" ROUTE_KEYS extra "}"
#define ROUTE2(extra)                                                                  \
    "{\"name\":\"billing\",\"ingress_exchange\":\"billing.delayed\","                  \
    "\"ingress_queue\":\"billing.delayed.q\",\"target_exchange\":\"billing\"" extra "}"
/* a config around the given routes array body */
#define CFG(routes) "{" BROKER "," WAL ",\"routes\":[" routes "]}"
/* a config with extra top-level members (start them with a comma) */
#define CFGX(extra, routes) "{" BROKER "," WAL extra ",\"routes\":[" routes "]}"

static const struct config zero __attribute__((unused));

static inline int is_zero(const struct config *c)
{
    return memcmp(c, &zero, sizeof zero) == 0;
}

/*
 * config_parse(json) must fail; the message is one line, starts with
 * "test.json", and holds every non-NULL needle.
 */
static inline void expect_err_at(int line, const char *json, const char *n1, const char *n2,
                          const char *n3)
{
    struct config c;
    char err[512];
    memset(&c, 0x5a, sizeof c);
    memset(err, 'Z', sizeof err);
    int rc = config_parse(&c, json, "test.json", err, sizeof err);
    int ok = rc == -1 && strncmp(err, "test.json", 9) == 0 && !strchr(err, '\n') &&
             (!n1 || strstr(err, n1)) && (!n2 || strstr(err, n2)) && (!n3 || strstr(err, n3));
    if (!ok)
        check_failed(__FILE__, line, "config_parse() == -1, one line naming file and key",
                     "rc=%d err=\"%s\"\n  want: %s | %s | %s\n  json: %s", rc,
                     rc == 0 ? "(none)" : err, n1 ? n1 : "", n2 ? n2 : "", n3 ? n3 : "", json);
    if (!is_zero(&c))
        check_failed(__FILE__, line, "is_zero(&c)", "*c not zeroed after an error");
    if (rc == 0)
        config_free(&c);
}
#define ERR(json, n1) expect_err_at(__LINE__, json, n1, NULL, NULL)
#define ERR2(json, n1, n2) expect_err_at(__LINE__, json, n1, n2, NULL)
#define ERR3(json, n1, n2, n3) expect_err_at(__LINE__, json, n1, n2, n3)

/* config_parse(json) must fail with exactly the message want. */
static inline void expect_errx_at(int line, const char *json, const char *want)
{
    struct config c;
    char err[512] = "";
    int rc = config_parse(&c, json, "test.json", err, sizeof err);
    if (rc != -1 || strcmp(err, want) != 0)
        check_failed(__FILE__, line, "config_parse() == -1 with the message",
                     "rc=%d\n  got:  %s\n  want: %s\n  json: %s", rc, rc == 0 ? "(none)" : err,
                     want, json);
    if (rc == 0)
        config_free(&c);
}
#define ERRX(json, want) expect_errx_at(__LINE__, json, want)

/* config_parse(json) must succeed; the caller frees c. */
static inline int expect_ok_at(int line, const char *json, struct config *c)
{
    char err[512] = "";
    int rc = config_parse(c, json, "test.json", err, sizeof err);
    if (rc != 0)
        check_failed(__FILE__, line, "config_parse() == 0", "rc=%d err=\"%s\"\n  json: %s", rc,
                     err, json);
    return rc;
}
#define OK(json, c) expect_ok_at(__LINE__, json, c)

#endif
