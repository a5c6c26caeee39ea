/*
 * fuzz_config.c -- libFuzzer harness for config_parse() (config.h).
 *
 * The fuzz bytes, NUL-terminated in an exact-size heap copy, are parsed as
 * a configuration file. Contract checked: the result is 0 or -1; on -1 the
 * message is non-empty, one line (no control characters at all), and NUL-
 * terminated inside the buffer, also when the buffer is small; on 0 the
 * config holds what the header promises (at least one route, 1..8 URIs,
 * NUL-terminated names) and config_free() releases it (LeakSanitizer
 * checks). DELAY_BRIDGE_BROKER_URI is unset so the file's broker.uri is
 * what gets parsed. FUZZ_VERBOSE=1 prints each result (for reproducing).
 */
#include "delay-bridge/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c)                                                                             \
    do {                                                                                     \
        if (!(c)) {                                                                          \
            fprintf(stderr, "fuzz_config: %s:%d: check failed: %s\n", __FILE__, __LINE__,  \
                    #c);                                                                     \
            abort();                                                                         \
        }                                                                                    \
    } while (0)

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    unsetenv("DELAY_BRIDGE_BROKER_URI");
    return 0;
}

static void check_error(const char *err, size_t cap)
{
    size_t n = strnlen(err, cap);
    CHECK(n < cap);
    CHECK(n > 0 || cap == 1);
    for (size_t i = 0; i < n; i++)
        CHECK((unsigned char)err[i] >= 0x20 && err[i] != 0x7f);
}

static void check_ok(const struct config *c)
{
    CHECK(c->nroutes >= 1 && c->nroutes <= CONFIG_MAX_ROUTES && c->routes);
    CHECK(c->nuris >= 1 && c->nuris <= CONFIG_MAX_URIS);
    for (int i = 0; i < c->nuris; i++)
        CHECK(c->uris[i] && c->uris[i][0]);
    CHECK(memchr(c->wal_dir, 0, sizeof c->wal_dir) && c->wal_dir[0]);
    CHECK(memchr(c->http_listen, 0, sizeof c->http_listen));
    CHECK(memchr(c->http_host, 0, sizeof c->http_host));
    CHECK(memchr(c->instance, 0, sizeof c->instance));
    CHECK(c->segment_bytes > 0);
    for (int i = 0; i < c->nroutes; i++) {
        const struct config_route *r = &c->routes[i];
        CHECK(memchr(r->name, 0, sizeof r->name) && r->name[0]);
        CHECK(memchr(r->ingress_exchange, 0, sizeof r->ingress_exchange));
        CHECK(memchr(r->ingress_queue, 0, sizeof r->ingress_queue));
        CHECK(memchr(r->target_exchange, 0, sizeof r->target_exchange));
        CHECK(memchr(r->target_type, 0, sizeof r->target_type));
        CHECK(memchr(r->dead_letter_exchange, 0, sizeof r->dead_letter_exchange));
        CHECK(r->prefetch >= 1);
        for (int j = 0; j < i; j++)
            CHECK(strcmp(r->name, c->routes[j].name) != 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *json = malloc(size + 1);
    memcpy(json, data, size);
    json[size] = '\0';

    struct config c;
    char err[512];
    memset(err, 'X', sizeof err);
    int rc = config_parse(&c, json, "fuzz.json", err, sizeof err);
    CHECK(rc == 0 || rc == -1);
    if (getenv("FUZZ_VERBOSE"))
        fprintf(stderr, "fuzz_config: rc=%d err=%s\n", rc, rc ? err : "");
    if (rc == 0) {
        check_ok(&c);
        config_free(&c);
    } else {
        check_error(err, sizeof err);
    }

    /* a short error buffer truncates, never overflows */
    char small[24];
    rc = config_parse(&c, json, "fuzz.json", small, sizeof small);
    CHECK(rc == 0 || rc == -1);
    if (rc == 0)
        config_free(&c);
    else
        check_error(small, sizeof small);

    free(json);
    return 0;
}
