/*
 * config_schema.c -- the configuration's schema, and the walks over it.
 *
 * config_keys.def names every key of the file once: its section, type,
 * field, range, default, how a reload applies it, and a line of
 * description. This file makes one struct config_key of each row and owns
 * what every reader does with a row, so that a key with a field of its own
 * (a boolean, an integer, a string, one of a few names) needs no code
 * anywhere else:
 *
 *   cfg_defaults     a section's defaults, written into its struct
 *   cfg_read_keys    a section's keys read from its JSON object, in the
 *                    table's order, each checked for type and range with
 *                    config_json.c's getters (their messages, word for word)
 *   cfg_check_sect   unknown keys refused; "expected one of" lists the
 *                    section's rows in the table's order
 *   config_key_*     a row's value in a struct: read, compared, copied --
 *                    what config_diff.c, GET /routes (api_routes.c) and a
 *                    reload's live changes (bridge_routes.c) use
 *
 * Rows marked OWN are read by the code of their section (config.c,
 * config_routes.c, config_retry.c ...), because their rules need more than
 * a range: a URI, a name checked against the other routes, an object.
 * The table still gives their place in the key lists, their default, how
 * a reload compares them and their documentation.
 *
 * The floor of config/ with config_json.c: it calls nothing above it.
 */
#include "config_int.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "delay-bridge/wal.h"

static const char *const queue_types[] = {"classic", "quorum", "stream", NULL};
static const char *const target_types[] = {"direct", "topic", "fanout", "headers", NULL};
static const char *const invalid_delays[] = {"publish", "dead-letter", NULL};
static const char *const delay_froms[] = {"bridge", "broker", NULL};
static const char *const log_levels[] = {"debug", "info", "warn", "error", NULL};

/* The struct a section's fields are in. */
#define BASE_TOP struct config
#define BASE_BROKER struct config
#define BASE_TLS struct config
#define BASE_WAL struct config
#define BASE_REPL struct config
#define BASE_HTTP struct config
#define BASE_LOG struct config
#define BASE_LIMITS struct config
#define BASE_ROUTE struct config_route

#define NONE NULL
#define REQUIRED CONFIG_KEY_REQUIRED
#define NONEMPTY CONFIG_KEY_NONEMPTY
#define OWN CONFIG_KEY_OWN
#define LIVE CONFIG_KEY_LIVE
#define RECONSUME CONFIG_KEY_RECONSUME
#define NO_RETRY CONFIG_KEY_NO_RETRY
#define NO_DELAYED CONFIG_KEY_NO_DELAYED
#define STREAM_ONLY CONFIG_KEY_STREAM_ONLY

#define CFG_KEY(S, K, T, F, LO, HI, DEF, SDEF, SH, FL, CH, DIFF, DOCDEF, DOC)                   \
    {.sect = CONFIG_SECT_##S, .key = K, .type = CONFIG_T_##T, .has_field = 1,                  \
     .off = offsetof(BASE_##S, F), .size = sizeof(((BASE_##S *)0)->F), .lo = (int64_t)(LO),     \
     .hi = (int64_t)(HI), .def = (uint64_t)(DEF), .sdef = SDEF, .shift = SH, .flags = FL,      \
     .choices = CH, .cmp = CMP_NONE, .diff = DIFF},
#define CFG_OWN(S, K, T, FL, CMP, DIFF, DOCDEF, DOC)                                            \
    {.sect = CONFIG_SECT_##S, .key = K, .type = CONFIG_T_##T, .flags = (FL) | OWN, .cmp = CMP, \
     .diff = DIFF},

const struct config_key config_keys[] = {
#include "config_keys.def"
};
const int config_nkeys = (int)(sizeof config_keys / sizeof config_keys[0]);

const char *const cfg_sect_pre[] = {
    [CONFIG_SECT_TOP] = "",           [CONFIG_SECT_BROKER] = "broker",
    [CONFIG_SECT_TLS] = "broker.tls", [CONFIG_SECT_WAL] = "wal",
    [CONFIG_SECT_REPL] = "wal.replicate", [CONFIG_SECT_HTTP] = "http",
    [CONFIG_SECT_LOG] = "log",        [CONFIG_SECT_LIMITS] = "limits",
    [CONFIG_SECT_ROUTE] = "routes[]", [CONFIG_SECT_RETRY] = "routes[].retry",
    [CONFIG_SECT_POLICY] = "routes[].retry.queues.*",
};

const struct config_key *config_key_find(enum config_sect s, const char *key)
{
    for (int i = 0; i < config_nkeys; i++)
        if (config_keys[i].sect == s && strcmp(config_keys[i].key, key) == 0)
            return &config_keys[i];
    return NULL;
}

const struct config_key *config_key_by_path(const char *path)
{
    char p[CFG_PATH_MAX];

    for (int i = 0; i < config_nkeys; i++) {
        const struct config_key *k = &config_keys[i];
        if (k->sect >= CONFIG_SECT_ROUTE || !k->has_field || k->diff)
            continue;
        cfg_join(p, sizeof p, cfg_sect_pre[k->sect], k->key);
        if (strcmp(p, path) == 0)
            return k;
    }
    return NULL;
}

/* A row's field held as a string: a STR, or a CHOICE kept by name (target_type). */
static int held_as_string(const struct config_key *k)
{
    return k->type == CONFIG_T_STR || (k->type == CONFIG_T_CHOICE && k->size != sizeof(int));
}

/* The field's integer as stored (shifted), by its size. */
static uint64_t get_raw(const struct config_key *k, const void *base)
{
    const char *p = (const char *)base + k->off;
    switch (k->size) {
    case 1: return *(const uint8_t *)p;
    case 2: return *(const uint16_t *)p;
    case 4: return *(const uint32_t *)p;
    default: return *(const uint64_t *)p;
    }
}

static void set_raw(const struct config_key *k, void *base, uint64_t v)
{
    char *p = (char *)base + k->off;
    switch (k->size) {
    case 1: *(uint8_t *)p = (uint8_t)v; break;
    case 2: *(uint16_t *)p = (uint16_t)v; break;
    case 4: *(uint32_t *)p = (uint32_t)v; break;
    default: *(uint64_t *)p = v; break;
    }
}

uint64_t config_key_uint(const struct config_key *k, const void *base)
{
    return get_raw(k, base) >> k->shift;
}

const char *config_key_str(const struct config_key *k, const void *base)
{
    if (held_as_string(k))
        return (const char *)base + k->off;
    uint64_t i = get_raw(k, base), n = 0;
    while (k->choices && k->choices[n])
        n++;
    return k->choices && i < n ? k->choices[i] : "";
}

int config_key_differs(const struct config_key *k, const void *a, const void *b)
{
    if (held_as_string(k))
        return strcmp((const char *)a + k->off, (const char *)b + k->off) != 0;
    return get_raw(k, a) != get_raw(k, b);
}

void config_key_copy(const struct config_key *k, void *a, const void *b)
{
    memcpy((char *)a + k->off, (const char *)b + k->off, k->size);
}

void cfg_defaults(enum config_sect s, void *base)
{
    for (int i = 0; i < config_nkeys; i++) {
        const struct config_key *k = &config_keys[i];
        if (k->sect != s || !k->has_field)
            continue;
        if (!held_as_string(k))
            set_raw(k, base, k->def << k->shift);
        else if (k->sdef)
            snprintf((char *)base + k->off, k->size, "%s", k->sdef);
    }
}

/* "\"a\", \"b\" or \"c\"": a CHOICE row's names for messages. */
static const char *choices_text(const struct config_key *k, char *out, size_t n)
{
    size_t o = 0;
    out[0] = '\0';
    for (int i = 0; k->choices[i] && o < n; i++) {
        const char *sep = i == 0 ? "" : k->choices[i + 1] ? ", " : " or ";
        int w = snprintf(out + o, n - o, "%s\"%s\"", sep, k->choices[i]);
        if (w < 0)
            break;
        o += (size_t)w;
    }
    return out;
}

int cfg_read_key(struct ctx *x, const struct config_key *k, json_object *o, const char *pre,
                    void *base)
{
    char *p = (char *)base + k->off, expect[160];
    uint64_t v;
    int idx = -1;

    switch (k->type) {
    case CONFIG_T_BOOL:
        return cfg_get_bool(x, o, pre, k->key, (int *)(void *)p);
    case CONFIG_T_INT:
        v = get_raw(k, base) >> k->shift;
        if (cfg_get_int(x, o, pre, k->key, k->lo, k->hi, &v) < 0)
            return -1;
        set_raw(k, base, v << k->shift);
        return 0;
    case CONFIG_T_STR:
        return cfg_get_str(x, o, pre, k->key, (int)(k->flags & (REQUIRED | NONEMPTY)), p,
                           k->size - 1) < 0 ? -1 : 0;
    case CONFIG_T_CHOICE:
        if (cfg_get_choice(x, o, pre, k->key, k->choices,
                           choices_text(k, expect, sizeof expect), &idx) < 0)
            return -1;
        if (idx >= 0 && held_as_string(k))
            snprintf(p, k->size, "%s", k->choices[idx]);
        else if (idx >= 0)
            set_raw(k, base, (uint64_t)idx);
        return 0;
    default:
        return 0;
    }
}

int cfg_read_keys(struct ctx *x, enum config_sect s, json_object *o, const char *pre, void *base)
{
    for (int i = 0; i < config_nkeys; i++) {
        const struct config_key *k = &config_keys[i];
        if (k->sect == s && k->has_field && !(k->flags & OWN) && cfg_read_key(x, k, o, pre, base) < 0)
            return -1;
    }
    return 0;
}

int cfg_sect_keys(enum config_sect s, const char **out, int max)
{
    int n = 0;
    for (int i = 0; i < config_nkeys; i++) {
        if (config_keys[i].sect != s)
            continue;
        if (n + 1 >= max) { /* the schema outgrew CFG_SECT_MAX_KEYS: a build mistake */
            fprintf(stderr, "delay-bridge: %s has more than %d keys; raise CFG_SECT_MAX_KEYS\n",
                    cfg_sect_pre[s][0] ? cfg_sect_pre[s] : "the top level", max - 1);
            abort();
        }
        out[n++] = config_keys[i].key;
    }
    out[n] = NULL;
    return n;
}

int cfg_check_sect(struct ctx *x, json_object *o, const char *pre, enum config_sect s)
{
    const char *keys[CFG_SECT_MAX_KEYS + 1];

    cfg_sect_keys(s, keys, CFG_SECT_MAX_KEYS + 1);
    return cfg_check_keys(x, o, pre, keys);
}

int cfg_section(struct ctx *x, json_object *root, const char *key, enum config_sect s,
                json_object **out)
{
    json_object *v;

    *out = NULL;
    if (!json_object_object_get_ex(root, key, &v))
        return 0;
    if (json_object_get_type(v) != json_type_object) {
        char got[96];
        return cfg_fail(x, key, "expected an object, got %s", cfg_show(v, got, sizeof got));
    }
    if (cfg_check_sect(x, v, key, s) < 0)
        return -1;
    *out = v;
    return 0;
}

int cfg_refuse_flagged(struct ctx *x, json_object *o, const char *pre, unsigned flag,
                       const char *kind, const struct cfg_refusal *no, size_t nno,
                       const char *dflt)
{
    char path[320];

    for (int i = 0; i < config_nkeys; i++) {
        const struct config_key *k = &config_keys[i];
        const char *why = dflt;
        if (k->sect != CONFIG_SECT_ROUTE || !(k->flags & flag) ||
            !json_object_object_get_ex(o, k->key, NULL))
            continue;
        for (size_t j = 0; j < nno; j++)
            if (strcmp(no[j].key, k->key) == 0)
                why = no[j].why;
        cfg_join(path, sizeof path, pre, k->key);
        return cfg_fail(x, path, "not allowed with %s: %s", kind, why);
    }
    return 0;
}
