/*
 * fuzz_routes.c -- libFuzzer harness for the routes file (config.h):
 * config_add_routes() over a parsed configuration, config_store_put() and
 * config_store_delete() on its text.
 *
 * Input: one option byte, then three parts separated by NUL bytes -- the
 * routes file's text, a route name, a route object's text (a missing part
 * is ""). Option bit 0 picks the configuration the routes are added to:
 * 0 one with route_templates (one with "{name}" everywhere, a retry one)
 * and instance set; 1 one with wal.replicate (its stream and lease queue
 * names, no stream ingress allowed).
 *
 * Contract checked:
 *   - config_add_routes: 0 or -1. On -1 one line of error, and c as it was
 *     (every byte of the routes it had, the count, the slots after them
 *     zero). On 0 the routes it had are untouched, the new ones come from
 *     the routes file (source), names unique across the bridge, ingress
 *     exchanges and queues unique per vhost, *shadowed >= 0; and adding
 *     the same text again fails (every name now clashes) unless it added
 *     nothing.
 *   - config_store_put: NULL with one line of error, or a text that ends in
 *     a newline, parses as a routes file whose entry called name comes
 *     first in its object; putting the same again gives the same text
 *     (a fixed point); deleting it then finds it.
 *   - config_store_delete: fails exactly when a put of "{}" fails on the
 *     same text (both read it the same way); what it returns no longer
 *     holds the name (a delete again does not find it).
 * Every text a put or delete returns is also given to config_add_routes.
 * LeakSanitizer checks that nothing is lost on either path.
 */
#include "delay-bridge/config.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_int.h"

#define CHECK(c)                                                                             \
    do {                                                                                     \
        if (!(c)) {                                                                          \
            fprintf(stderr, "fuzz_routes: %s:%d: check failed: %s\n", __FILE__, __LINE__,  \
                    #c);                                                                     \
            abort();                                                                         \
        }                                                                                    \
    } while (0)

static const char *const bases[2] = {
    "{\"instance\":\"i1\",\"broker\":{\"uri\":\"amqp://u:p@h/v\"},\"wal\":{\"dir\":\"/w\"},"
    "\"route_templates\":{"
    " \"delayed\":{\"ingress_exchange\":\"{name}.x\",\"ingress_queue\":\"{name}.q\","
    "  \"target_exchange\":\"{name}\",\"vhost\":\"v-{name}\",\"routes\":[\"t1\"]},"
    " \"retry\":{\"ingress_exchange\":\"{name}.r\",\"ingress_queue\":\"{name}.rq\","
    "  \"retry\":{\"parking_exchange\":\"{name}.p\",\"queues\":{\"w\":{\"max_attempts\":2}}}}},"
    "\"routes\":[{\"name\":\"orders\",\"ingress_exchange\":\"orders.x\","
    " \"ingress_queue\":\"orders.q\",\"target_exchange\":\"orders\"}]}",
    "{\"broker\":{\"uri\":\"amqp://h/%2f\"},"
    "\"wal\":{\"dir\":\"/w\",\"replicate\":{\"stream\":\"s\",\"lease_queue\":\"l\"}},"
    "\"routes\":[{\"name\":\"orders\",\"ingress_exchange\":\"orders.x\","
    " \"ingress_queue\":\"orders.q\",\"target_exchange\":\"orders\"}]}",
};
static struct config base[2];
static struct config_route *saved[2]; /* base[k]'s routes as parsed */
static int nsaved[2];
static const struct config_route zero_route;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    char err[512];
    unsetenv("DELAY_BRIDGE_BROKER_URI");
    for (int i = 0; i < 2; i++) {
        if (config_parse(&base[i], bases[i], "base.json", err, sizeof err) < 0) {
            fprintf(stderr, "fuzz_routes: %s\n", err);
            abort();
        }
        nsaved[i] = base[i].nroutes;
        saved[i] = malloc((size_t)nsaved[i] * sizeof *saved[i]);
        memcpy(saved[i], base[i].routes, (size_t)nsaved[i] * sizeof *saved[i]);
    }
    return 0;
}

static void check_error(const char *err, size_t cap)
{
    size_t n = strnlen(err, cap);
    CHECK(n < cap && n > 0);
    for (size_t i = 0; i < n; i++)
        CHECK((unsigned char)err[i] >= 0x20 && err[i] != 0x7f);
}

/* c holds exactly base k's routes again (and the slots after them are zero). */
static void check_as_before(const struct config *c, int k, int slots)
{
    CHECK(c->nroutes == nsaved[k]);
    CHECK(memcmp(c->routes, saved[k], (size_t)c->nroutes * sizeof *saved[k]) == 0);
    for (int i = c->nroutes; i < CONFIG_MAX_ROUTES && i < c->nroutes + slots; i++)
        CHECK(memcmp(&c->routes[i], &zero_route, sizeof zero_route) == 0);
}

/* The routes base k gained are what the routes file gave; then dropped again. */
static void check_added(struct config *c, int k, int shadowed)
{
    int n0 = nsaved[k];
    CHECK(shadowed >= 0 && c->nroutes >= n0 && c->nroutes <= CONFIG_MAX_ROUTES);
    CHECK(memcmp(c->routes, saved[k], (size_t)n0 * sizeof *saved[k]) == 0);
    for (int i = n0; i < c->nroutes; i++) {
        const struct config_route *r = &c->routes[i];
        CHECK(r->source == CONFIG_SOURCE_STORE && !r->retired && r->name[0]);
        CHECK(memchr(r->name, 0, sizeof r->name) && memchr(r->vhost, 0, sizeof r->vhost));
        CHECK(memchr(r->template_name, 0, sizeof r->template_name));
        CHECK(r->template_name[0] == '\0' || cfg_template_find(c, r->template_name) >= 0);
        for (int j = 0; j < i; j++) {
            const struct config_route *p = &c->routes[j];
            CHECK(strcmp(p->name, r->name) != 0);
            if (strcmp(config_route_vhost(c, p), config_route_vhost(c, r)) == 0)
                CHECK(strcmp(p->ingress_exchange, r->ingress_exchange) != 0 &&
                      strcmp(p->ingress_queue, r->ingress_queue) != 0);
        }
    }
}

static void drop_added(struct config *c, int k)
{
    for (int i = nsaved[k]; i < c->nroutes; i++) {
        cfg_free_route_retry(&c->routes[i]);
        memset(&c->routes[i], 0, sizeof c->routes[i]);
    }
    c->nroutes = nsaved[k];
}

/* config_add_routes(text) on base k, checked, and base k as before afterwards. */
static void add(int k, const char *text)
{
    struct config *c = &base[k];
    char err[512];
    int shadowed = -1;

    memset(err, 'X', sizeof err);
    int rc = config_add_routes(c, text, "routes.json", &shadowed, err, sizeof err);
    if (getenv("FUZZ_VERBOSE"))
        fprintf(stderr, "fuzz_routes: add rc=%d err=%s\n", rc, rc ? err : "");
    CHECK(rc == 0 || rc == -1);
    if (rc < 0) {
        check_error(err, sizeof err);
        check_as_before(c, k, 64);
        return;
    }
    check_added(c, k, shadowed);
    int added = c->nroutes - nsaved[k];
    if (added > 0) { /* again: each name it added is taken now */
        int n = c->nroutes;
        char err2[24];
        CHECK(config_add_routes(c, text, "r", &shadowed, err2, sizeof err2) == -1);
        check_error(err2, sizeof err2);
        CHECK(c->nroutes == n);
    }
    drop_added(c, k);
    check_as_before(c, k, added + 1);
}

/* s is a routes file whose first entry called name starts with "name". */
static void check_store_text(const char *s, const char *name, int present)
{
    size_t n = strlen(s);
    CHECK(n > 0 && s[n - 1] == '\n');
    json_object *root = json_tokener_parse(s), *routes;
    CHECK(root && json_object_get_type(root) == json_type_object);
    CHECK(json_object_object_get_ex(root, "routes", &routes) &&
          json_object_get_type(routes) == json_type_array);
    int seen = 0;
    for (size_t i = 0; i < json_object_array_length(routes); i++) {
        json_object *e = json_object_array_get_idx(routes, i), *v;
        if (!json_object_object_get_ex(e, "name", &v) || json_object_get_type(v) != json_type_string ||
            strcmp(json_object_get_string(v), name) != 0)
            continue;
        struct json_object_iterator it = json_object_iter_begin(e);
        CHECK(strcmp(json_object_iter_peek_name(&it), "name") == 0 || !present);
        seen = 1;
        if (present)
            break;
    }
    CHECK(seen == present);
    json_object_put(root);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    int k = data[0] & 1;
    char *buf = malloc(size + 2);
    memcpy(buf, data + 1, size - 1);
    buf[size - 1] = buf[size] = buf[size + 1] = '\0';
    const char *store = buf, *name = store + strlen(store) + 1;
    if (name > buf + size - 1)
        name = buf + size; /* "" */
    const char *route = name + strlen(name) + 1;
    if (route > buf + size)
        route = buf + size + 1; /* "" */

    add(k, store);

    char err[512];
    int found = -1;
    memset(err, 'X', sizeof err);
    char *put = config_store_put(store, name, route, err, sizeof err);
    if (!put) {
        check_error(err, sizeof err);
    } else {
        check_store_text(put, name, 1);
        char *again = config_store_put(put, name, route, err, sizeof err);
        CHECK(again && strcmp(again, put) == 0);
        char *gone = config_store_delete(put, name, &found, err, sizeof err);
        CHECK(gone && found == 1);
        check_store_text(gone, name, 0);
        add(k, put);
        add(k, gone);
        free(again);
        free(gone);
        free(put);
    }

    char *del = config_store_delete(store, name, &found, err, sizeof err);
    char *empty = config_store_put(store, name, "{}", NULL, 0);
    CHECK(!del == !empty);
    if (del) {
        check_store_text(del, name, 0);
        char *del2 = config_store_delete(del, name, &found, err, sizeof err);
        CHECK(del2 && found == 0 && strcmp(del, del2) == 0);
        free(del2);
    } else {
        check_error(err, sizeof err);
    }
    free(del);
    free(empty);
    free(buf);
    return 0;
}
