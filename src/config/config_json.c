/*
 * config_json.c -- the configuration's access to JSON: every value config.c
 * copies goes through one of these getters, which check its type and range
 * and, on a problem, write the one message of the parse:
 *
 *   <name>: <key path>: <what is wrong>, <what is expected>
 *
 * with the value echoed back as JSON ("100", 1.5, true), cut to a few dozen
 * bytes (cfg_quote, cfg_show). A key absent leaves the field untouched (it
 * holds its default). cfg_check_keys refuses keys a section does not know:
 * a typo must not silently fall back to a default.
 */
#include "config_int.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cfg_fail(struct ctx *x, const char *path, const char *fmt, ...)
{
    if (!x->err || x->errlen == 0)
        return -1;
    int n = path && *path ? snprintf(x->err, x->errlen, "%s: %s: ", x->name, path)
                          : snprintf(x->err, x->errlen, "%s: ", x->name);
    if (n >= 0 && (size_t)n < x->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(x->err + n, x->errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* s (n bytes) as a JSON string literal, cut with "..." to fit out. */
const char *cfg_quote(const char *s, size_t n, char *out, size_t outlen)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0, max = outlen - 5; /* room for "...\"" and NUL */
    out[o++] = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        char e[6];
        size_t k = 0;
        if (ch == '"' || ch == '\\') {
            e[k++] = '\\';
            e[k++] = (char)ch;
        } else if (ch < 0x20 || ch == 0x7f) {
            e[k++] = '\\';
            e[k++] = 'u';
            e[k++] = '0';
            e[k++] = '0';
            e[k++] = hex[ch >> 4];
            e[k++] = hex[ch & 15];
        } else {
            e[k++] = (char)ch;
        }
        if (o + k > max) {
            memcpy(out + o, "...", 3);
            o += 3;
            break;
        }
        memcpy(out + o, e, k);
        o += k;
    }
    out[o++] = '"';
    out[o] = '\0';
    return out;
}

/* A JSON value as a person would write it, for "got ..." in messages. */
const char *cfg_show(json_object *v, char *out, size_t outlen)
{
    switch (json_object_get_type(v)) {
    case json_type_null: return "null";
    case json_type_boolean: return json_object_get_boolean(v) ? "true" : "false";
    case json_type_object: return "an object";
    case json_type_array: return "an array";
    case json_type_string:
        return cfg_quote(json_object_get_string(v), (size_t)json_object_get_string_len(v), out,
                     outlen);
    case json_type_int:
        /* json-c clamps what does not fit in 64 bits */
        if (json_object_get_uint64(v) == UINT64_MAX || json_object_get_int64(v) == INT64_MIN)
            return "a number out of range";
        snprintf(out, outlen, "%s", json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
        return out;
    default:
        snprintf(out, outlen, "%s", json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
        return out;
    }
}

/* Refuse keys of obj not in allowed (NULL-terminated). */
int cfg_check_keys(struct ctx *x, json_object *obj, const char *prefix,
                      const char *const *allowed)
{
    json_object_object_foreach(obj, key, val) {
        (void)val;
        int ok = 0;
        for (const char *const *a = allowed; *a; a++) {
            if (strcmp(key, *a) == 0) {
                ok = 1;
                break;
            }
        }
        if (ok)
            continue;
        char list[512], q[96], path[320];
        size_t o = 0;
        list[0] = '\0';
        for (const char *const *a = allowed; *a && o < sizeof list; a++) {
            int n = snprintf(list + o, sizeof list - o, "%s%s", a == allowed ? "" : ", ", *a);
            if (n < 0)
                break;
            o += (size_t)n;
        }
        cfg_quote(key, strlen(key), q, sizeof q);
        snprintf(path, sizeof path, "%s%s%.*s", prefix, *prefix ? "." : "",
                 (int)strlen(q) - 2, q + 1);
        return cfg_fail(x, path, "unknown key %s; expected one of: %s", q, list);
    }
    return 0;
}

const char *cfg_route_pre(const struct ctx *x, int i, char *buf, size_t n)
{
    if (x->where)
        return x->where[i].pre;
    snprintf(buf, n, "routes[%d]", i);
    return buf;
}

void cfg_join(char *out, size_t outlen, const char *prefix, const char *key)
{
    snprintf(out, outlen, "%s%s%s", prefix, *prefix ? "." : "", key);
}

/* Optional integer key in lo..hi (hi <= INT64_MAX). Absent: *out untouched. */
int cfg_get_int(struct ctx *x, json_object *obj, const char *prefix, const char *key,
                   int64_t lo, int64_t hi, uint64_t *out)
{
    json_object *v;
    if (!json_object_object_get_ex(obj, key, &v))
        return 0;
    char path[320], got[96];
    cfg_join(path, sizeof path, prefix, key);
    if (json_object_get_type(v) == json_type_int) {
        int64_t i = json_object_get_int64(v);
        int big = json_object_get_uint64(v) > (uint64_t)INT64_MAX;
        if (!big && i >= lo && i <= hi) {
            *out = (uint64_t)i;
            return 0;
        }
    }
    return cfg_fail(x, path, "expected an integer %lld..%lld, got %s", (long long)lo,
                (long long)hi, cfg_show(v, got, sizeof got));
}

/* cfg_get_int() for a uint32_t field that already holds its default. */
int cfg_get_u32(struct ctx *x, json_object *obj, const char *prefix, const char *key,
                   int64_t lo, uint32_t *field)
{
    uint64_t v = *field;

    if (cfg_get_int(x, obj, prefix, key, lo, UINT32_MAX, &v) < 0)
        return -1;
    *field = (uint32_t)v;
    return 0;
}

int cfg_get_bool(struct ctx *x, json_object *obj, const char *prefix, const char *key,
                    int *out)
{
    json_object *v;
    if (!json_object_object_get_ex(obj, key, &v))
        return 0;
    if (json_object_get_type(v) == json_type_boolean) {
        *out = json_object_get_boolean(v) ? 1 : 0;
        return 0;
    }
    char path[320], got[96];
    cfg_join(path, sizeof path, prefix, key);
    return cfg_fail(x, path, "expected true or false, got %s", cfg_show(v, got, sizeof got));
}

/* v as a JSON string without NUL characters: *s (borrowed) and *n. 0, or -1 (reported). */
int cfg_string(struct ctx *x, const char *path, json_object *v, const char **s, size_t *n)
{
    char got[96];

    if (json_object_get_type(v) != json_type_string)
        return cfg_fail(x, path, "expected a string, got %s", cfg_show(v, got, sizeof got));
    *s = json_object_get_string(v);
    *n = (size_t)json_object_get_string_len(v);
    if (strlen(*s) != *n)
        return cfg_fail(x, path, "must not contain a NUL character (\\u0000)");
    return 0;
}

/*
 * String key into buf (at most max bytes). REQUIRED: must be present;
 * NONEMPTY: must not be "". Returns 1 if present, 0 if absent, -1 on error.
 */
int cfg_get_str(struct ctx *x, json_object *obj, const char *prefix, const char *key,
                   int flags, char *buf, size_t max)
{
    json_object *v;
    const char *s = NULL; /* -O3 cannot see that cfg_string() fails or sets both */
    size_t n = 0;
    char path[320];

    cfg_join(path, sizeof path, prefix, key);
    if (!json_object_object_get_ex(obj, key, &v)) {
        if (flags & REQUIRED)
            return cfg_fail(x, path, "missing; expected a string");
        return 0;
    }
    if (cfg_string(x, path, v, &s, &n) < 0)
        return -1;
    if (n == 0 && (flags & NONEMPTY))
        return cfg_fail(x, path, "must not be empty");
    if (n > max)
        return cfg_fail(x, path, "too long (%zu bytes); at most %zu bytes", n, max);
    memcpy(buf, s, n + 1);
    return 1;
}

/*
 * An optional string key of o that must be one of choices (NULL-terminated):
 * *idx is its index when present. expect lists them for the error message.
 */
int cfg_get_choice(struct ctx *x, json_object *o, const char *prefix, const char *key,
                      const char *const *choices, const char *expect, int *idx)
{
    char buf[64], path[300], q[96];
    int have = cfg_get_str(x, o, prefix, key, OPTIONAL, buf, sizeof buf - 1);

    if (have <= 0)
        return have;
    for (int i = 0; choices[i]; i++)
        if (strcmp(buf, choices[i]) == 0) {
            *idx = i;
            return 1;
        }
    snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", key);
    return cfg_fail(x, path, "expected %s, got %s", expect, cfg_quote(buf, strlen(buf), q, sizeof q));
}


/* 1-based line and column of byte offset off in s. */
void cfg_line_col(const char *s, size_t off, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < off && s[i]; i++) {
        if (s[i] == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

json_object *cfg_json_parse(const char *text, const char **why, int *line, int *col)
{
    /* a UTF-8 byte order mark, as some editors write, is not an error */
    if (strncmp(text, "\xef\xbb\xbf", 3) == 0)
        text += 3;
    size_t len = strlen(text);
    *line = *col = 1;
    if (len >= (size_t)INT32_MAX) {
        *why = "too large";
        *line = 0;
        return NULL;
    }
    struct json_tokener *tok = json_tokener_new();
    if (!tok) {
        fprintf(stderr, "delay-bridge: out of memory (json tokener)\n");
        abort();
    }
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
    /* len + 1: the NUL ends a top-level number and marks the end of input */
    json_object *root = json_tokener_parse_ex(tok, text, (int)len + 1);
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    if (jerr == json_tokener_success && root)
        return root;
    json_object_put(root);
    if (strspn(text, " \t\r\n") == len) {
        *why = NULL;
        return NULL;
    }
    *why = json_tokener_error_desc(jerr);
    if (jerr == json_tokener_continue || jerr == json_tokener_error_parse_eof) {
        end = len;
        *why = "unexpected end of file (an unclosed { [ or \"?)";
    }
    cfg_line_col(text, end, line, col);
    return NULL;
}

json_object *cfg_parse_text(struct ctx *x, const char *text)
{
    const char *why;
    int line, col;
    json_object *root = cfg_json_parse(text, &why, &line, &col);

    if (!root) {
        if (!why)
            cfg_fail(x, NULL, "the file is empty; expected a JSON object");
        else if (line == 0)
            cfg_fail(x, NULL, "%s", why);
        else if (x->err && x->errlen) /* "name:line:col: ..." like a compiler, for editors */
            snprintf(x->err, x->errlen, "%s:%d:%d: invalid JSON: %s", x->name, line, col, why);
        return NULL;
    }
    if (json_object_get_type(root) != json_type_object) {
        cfg_fail(x, NULL, "expected a JSON object at the top level");
        json_object_put(root);
        return NULL;
    }
    return root;
}
