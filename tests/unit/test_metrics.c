/*
 * test_metrics.c -- metrics_render() output read back line by line the way
 * a Prometheus scraper would: every family announced once by # HELP then
 * # TYPE before its samples, label values escaped and unescaped back to
 * the route name, histogram buckets cumulative with +Inf equal to _count,
 * and the series a user relies on present with the right values. Also the
 * histogram helpers of stats.h.
 *
 * Usage: test_metrics [case...]   (--list names the cases)
 */
#include "status/metrics.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "delay-bridge/retry.h"

#include "check.h"

/* ---- a parsed exposition ---- */

#define MAXL 8
struct sample {
    char name[128];
    int nlabels;
    char key[MAXL][32];
    char val[MAXL][128]; /* unescaped */
    char value[64];
};

struct family {
    char name[128];
    char type[32];
    int help_line, type_line, first_sample, nsamples;
};

struct expo {
    struct sample *s;
    int ns;
    struct family f[128];
    int nf;
    int bad; /* lines that did not parse */
};

static struct family *find_family(struct expo *e, const char *name)
{
    for (int i = 0; i < e->nf; i++)
        if (!strcmp(e->f[i].name, name))
            return &e->f[i];
    return NULL;
}

static struct family *add_family(struct expo *e, const char *name)
{
    struct family *f = find_family(e, name);
    if (f)
        return f;
    if (e->nf == 128)
        abort();
    f = &e->f[e->nf++];
    memset(f, 0, sizeof *f);
    snprintf(f->name, sizeof f->name, "%s", name);
    f->help_line = f->type_line = f->first_sample = -1;
    return f;
}

/* Parse one sample line; 0 or -1. */
static int parse_sample(const char *p, struct sample *s)
{
    memset(s, 0, sizeof *s);
    size_t n = strcspn(p, "{ ");
    if (!n || n >= sizeof s->name)
        return -1;
    memcpy(s->name, p, n);
    p += n;
    if (*p == '{') {
        p++;
        while (*p != '}') {
            if (s->nlabels == MAXL)
                return -1;
            size_t k = strcspn(p, "=");
            if (!k || k >= sizeof s->key[0] || p[k] != '=' || p[k + 1] != '"')
                return -1;
            memcpy(s->key[s->nlabels], p, k);
            p += k + 2;
            size_t o = 0;
            while (*p != '"') {
                char c = *p++;
                if (!c || c == '\n')
                    return -1; /* raw newline inside a label value */
                if (c == '\\') {
                    c = *p++;
                    if (c == 'n')
                        c = '\n';
                    else if (c != '\\' && c != '"')
                        return -1;
                }
                if (o + 1 >= sizeof s->val[0])
                    return -1;
                s->val[s->nlabels][o++] = c;
            }
            p++;
            s->nlabels++;
            if (*p == ',')
                p++;
            else if (*p != '}')
                return -1;
        }
        p++;
    }
    if (*p++ != ' ')
        return -1;
    n = strlen(p);
    if (!n || n >= sizeof s->value || strchr(p, ' '))
        return -1;
    memcpy(s->value, p, n);
    return 0;
}

/* The family a sample belongs to: histogram suffixes stripped when that family is a histogram. */
static struct family *family_of(struct expo *e, const char *name)
{
    struct family *f = find_family(e, name);
    if (f)
        return f;
    static const char *const sfx[] = { "_bucket", "_sum", "_count" };
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(name), m = strlen(sfx[i]);
        if (n > m && !strcmp(name + n - m, sfx[i])) {
            char base[128];
            snprintf(base, sizeof base, "%.*s", (int)(n - m), name);
            f = find_family(e, base);
            if (f && !strcmp(f->type, "histogram"))
                return f;
        }
    }
    return NULL;
}

static void parse(const char *text, struct expo *e)
{
    memset(e, 0, sizeof *e);
    int cap = 64;
    e->s = malloc(sizeof *e->s * (size_t)cap);
    const char *p = text;
    int line = 0;
    struct family *cur = NULL;
    CHECK(text[strlen(text) - 1] == '\n');
    while (*p) {
        const char *nl = strchr(p, '\n');
        if (!nl) {
            e->bad++;
            break;
        }
        char buf[1024];
        size_t n = (size_t)(nl - p);
        CHECK(n > 0 && n < sizeof buf); /* no empty lines */
        if (n >= sizeof buf)
            n = sizeof buf - 1;
        memcpy(buf, p, n);
        buf[n] = '\0';
        p = nl + 1;
        line++;

        char name[128], rest[512];
        if (!strncmp(buf, "# HELP ", 7)) {
            if (sscanf(buf + 7, "%127s %511[^\n]", name, rest) != 2) {
                e->bad++;
                continue;
            }
            struct family *f = add_family(e, name);
            CHECK(f->help_line < 0); /* one HELP per family */
            CHECK(f->type_line < 0); /* HELP before TYPE */
            f->help_line = line;
            cur = f;
        } else if (!strncmp(buf, "# TYPE ", 7)) {
            char type[32];
            if (sscanf(buf + 7, "%127s %31s", name, type) != 2) {
                e->bad++;
                continue;
            }
            struct family *f = add_family(e, name);
            CHECK(f->type_line < 0);
            CHECK(f->help_line == line - 1);
            CHECK(!strcmp(type, "counter") || !strcmp(type, "gauge") ||
                  !strcmp(type, "histogram"));
            if (!strcmp(type, "counter"))
                CHECK(strlen(name) > 6 && !strcmp(name + strlen(name) - 6, "_total"));
            snprintf(f->type, sizeof f->type, "%s", type);
            f->type_line = line;
            cur = f;
        } else if (buf[0] == '#') {
            e->bad++;
        } else {
            if (e->ns == cap) {
                cap *= 2;
                e->s = realloc(e->s, sizeof *e->s * (size_t)cap);
            }
            struct sample *s = &e->s[e->ns];
            if (parse_sample(buf, s) < 0) {
                fprintf(stderr, "unparsable: %s\n", buf);
                e->bad++;
                continue;
            }
            e->ns++;
            CHECK(!strncmp(s->name, "delay_bridge_", 13));
            struct family *f = family_of(e, s->name);
            CHECK(f != NULL);          /* announced */
            CHECK(f == cur);           /* and samples of a family are contiguous */
            if (f) {
                if (f->first_sample < 0)
                    f->first_sample = line;
                f->nsamples++;
            }
        }
    }
}

static const char *label(const struct sample *s, const char *k)
{
    for (int i = 0; i < s->nlabels; i++)
        if (!strcmp(s->key[i], k))
            return s->val[i];
    return NULL;
}

/* The value of the sample name{k=v} (k NULL: no labels), NULL if absent. */
static const char *value(struct expo *e, const char *name, const char *k, const char *v)
{
    for (int i = 0; i < e->ns; i++) {
        struct sample *s = &e->s[i];
        if (strcmp(s->name, name))
            continue;
        if (!k && s->nlabels == 0)
            return s->value;
        if (k && label(s, k) && !strcmp(label(s, k), v))
            return s->value;
    }
    return NULL;
}

static int count_samples(struct expo *e, const char *name)
{
    int n = 0;
    for (int i = 0; i < e->ns; i++)
        n += !strcmp(e->s[i].name, name);
    return n;
}

/* ---- a snapshot to render ---- */

#define EVIL "we\\ird\"ro\nute"

static struct db_route_stats routes[2];

static void fill(struct db_stats *s)
{
    memset(s, 0, sizeof *s);
    memset(routes, 0, sizeof routes);
    s->version = "1.2.3";
    s->instance = "inst\"a";
    s->now_ms = 1800000000000ULL;
    s->start_ms = 1799999990000ULL;
    s->loop_turn_ms = s->now_ms;
    s->recovered = 1;
    s->recovery_seconds = 1.5;
    s->recovery_progress = 1;
    s->consumer = DB_CONN_UP;
    s->publisher = DB_CONN_BLOCKED;
    s->held = 42;
    s->orphaned = 3;
    s->ram_bytes = 123456;
    s->rss_bytes = 0; /* unknown */
    s->wal.segments = 2;
    s->wal.disk_bytes = 2048;
    s->wal.live_bytes = 1024;
    s->wal.commits = 9;
    s->wal.writable = 1;
    s->wal.ckpt_installed = 4;
    s->wal.ckpt_age_seconds = 12.5;
    db_hist_observe(&s->wal.fsync, 0.002);
    db_hist_observe(&s->wal.fsync, 0.0005);

    routes[0].name = "orders";
    routes[0].target_exchange = "orders.x";
    routes[0].received = 100;
    routes[0].published = 90;
    routes[0].confirmed = 88;
    routes[0].pending = 12;
    routes[0].waiting = 10;
    routes[0].inflight = 2;
    routes[0].channel_open = 1;
    routes[0].oldest_due_ms = s->now_ms - 2500; /* due 2.5 s ago, not yet published */
    s->next_due_ms = s->now_ms + 2500;          /* the next one due in 2.5 s */
    db_hist_observe(&routes[0].lateness, 0.003);
    db_hist_observe(&routes[0].lateness, 0.003);
    db_hist_observe(&routes[0].lateness, 0.7);
    db_hist_observe(&routes[0].lateness, 100.0); /* only +Inf */
    db_hist_observe(&routes[0].stage[DB_STAGE_WAKE], 0.002);
    db_hist_observe(&routes[0].stage[DB_STAGE_CONFIRM], 0.0004);
    db_hist_observe(&routes[0].stage[DB_STAGE_CONFIRM], 0.0004);
    db_hist_observe(&routes[1].stage[DB_STAGE_READ], 0.03);

    routes[1].name = EVIL;
    routes[1].target_exchange = "x";
    routes[1].published = 7;
    routes[1].oldest_due_ms = 0; /* nothing due: overdue 0 */

    s->routes = routes;
    s->nroutes = 2;
}

static void render(const struct db_stats *s, struct expo *e, char **text)
{
    struct strbuf b = STRBUF_INIT;
    metrics_render(s, &b);
    *text = strbuf_detach(&b, NULL);
    parse(*text, e);
    CHECK(e->bad == 0);
}

/* ---- cases ---- */

static void test_hist_observe(void)
{
    struct db_hist h;
    memset(&h, 0, sizeof h);
    CHECK(isinf(db_hist_le[DB_HIST_BUCKETS - 1]));
    for (int i = 1; i < DB_HIST_BUCKETS; i++)
        CHECK(db_hist_le[i] > db_hist_le[i - 1]);
    db_hist_observe(&h, db_hist_le[3]); /* on the bound: le is inclusive */
    CHECK(h.count[3] == 1);
    db_hist_observe(&h, -5);             /* negative counts as 0 */
    CHECK(h.count[0] == 1);
    db_hist_observe(&h, NAN);
    CHECK(h.count[0] == 2);
    db_hist_observe(&h, 1e9);
    CHECK(h.count[DB_HIST_BUCKETS - 1] == 1);
    db_hist_observe(&h, 0.0011);
    CHECK(h.count[4] == 1);
    CHECK(h.n == 5);
    CHECK(fabs(h.sum - (db_hist_le[3] + 1e9 + 0.0011)) < 1e-3);
}

static void test_families(void)
{
    struct db_stats s;
    struct expo e;
    char *text;
    fill(&s);
    render(&s, &e, &text);

    static const char *const want[][2] = {
        { "pending_messages", "gauge" },      { "inflight_messages", "gauge" },
        { "due_messages", "gauge" },          { "waiting_messages", "gauge" },
        { "received_total", "counter" },      { "rejected_total", "counter" },
        { "published_total", "counter" },     { "confirmed_total", "counter" },
        { "publish_nacks_total", "counter" }, { "publish_retries_total", "counter" },
        { "returned_total", "counter" },      { "invalid_delay_total", "counter" },
        { "dead_lettered_total", "counter" }, { "cancelled_total", "counter" },
        { "cancel_missed_total", "counter" }, { "route_channel_open", "gauge" },
        { "fire_lateness_seconds", "histogram" }, { "fire_stage_seconds", "histogram" }, { "next_due_seconds", "gauge" }, { "overdue_seconds", "gauge" },
        { "orphaned_messages", "gauge" },     { "held_messages", "gauge" },
        { "wal_bytes", "gauge" },             { "wal_live_bytes", "gauge" },
        { "wal_segments", "gauge" },          { "wal_commits_total", "counter" },
        { "wal_fsync_seconds", "histogram" }, { "wal_writable", "gauge" },
        { "wal_checkpoints_total", "counter" }, { "wal_checkpoint_failures_total", "counter" },
        { "wal_checkpoint_bytes", "gauge" },  { "wal_checkpoint_age_seconds", "gauge" },
        { "broker_connected", "gauge" },      { "broker_blocked", "gauge" },
        { "recovery_seconds", "gauge" },      { "ready", "gauge" },
        { "build_info", "gauge" },            { "process_resident_memory_bytes", "gauge" },
        { "engine_memory_bytes", "gauge" },   { "start_time_seconds", "gauge" },
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char name[128];
        snprintf(name, sizeof name, "delay_bridge_%s", want[i][0]);
        struct family *f = find_family(&e, name);
        CHECK(f != NULL, "missing family %s", name);
        if (!f)
            continue;
        CHECK(!strcmp(f->type, want[i][1]));
        CHECK(f->help_line > 0 && f->type_line == f->help_line + 1);
        CHECK(f->first_sample < 0 || f->first_sample > f->type_line);
    }
    free(text);
    free(e.s);
}

static void test_values(void)
{
    struct db_stats s;
    struct expo e;
    char *text;
    fill(&s);
    render(&s, &e, &text);

    const char *v = value(&e, "delay_bridge_published_total", "route", "orders");
    CHECK(v && !strcmp(v, "90"));
    v = value(&e, "delay_bridge_received_total", "route", "orders");
    CHECK(v && !strcmp(v, "100"));
    v = value(&e, "delay_bridge_pending_messages", "route", "orders");
    CHECK(v && !strcmp(v, "12"));
    v = value(&e, "delay_bridge_route_channel_open", "route", "orders");
    CHECK(v && !strcmp(v, "1"));
    v = value(&e, "delay_bridge_route_channel_open", "route", EVIL);
    CHECK(v && !strcmp(v, "0"));
    v = value(&e, "delay_bridge_held_messages", NULL, NULL);
    CHECK(v && !strcmp(v, "42"));
    v = value(&e, "delay_bridge_orphaned_messages", NULL, NULL);
    CHECK(v && !strcmp(v, "3"));
    v = value(&e, "delay_bridge_wal_bytes", NULL, NULL);
    CHECK(v && !strcmp(v, "2048"));
    v = value(&e, "delay_bridge_wal_writable", NULL, NULL);
    CHECK(v && !strcmp(v, "1"));
    v = value(&e, "delay_bridge_wal_checkpoints_total", NULL, NULL);
    CHECK(v && !strcmp(v, "4"));
    v = value(&e, "delay_bridge_wal_checkpoint_age_seconds", NULL, NULL);
    CHECK(v && !strcmp(v, "12.5"), "%s", v ? v : "(none)");
    v = value(&e, "delay_bridge_engine_memory_bytes", NULL, NULL);
    CHECK(v && !strcmp(v, "123456"));
    v = value(&e, "delay_bridge_start_time_seconds", NULL, NULL);
    CHECK(v && !strcmp(v, "1799999990"));
    v = value(&e, "delay_bridge_recovery_seconds", NULL, NULL);
    CHECK(v && !strcmp(v, "1.5"));

    /* BLOCKED is connected, and blocked. */
    v = value(&e, "delay_bridge_broker_connected", "connection", "publisher");
    CHECK(v && !strcmp(v, "1"));
    v = value(&e, "delay_bridge_broker_blocked", "connection", "publisher");
    CHECK(v && !strcmp(v, "1"));
    v = value(&e, "delay_bridge_broker_blocked", "connection", "consumer");
    CHECK(v && !strcmp(v, "0"));
    v = value(&e, "delay_bridge_ready", NULL, NULL);
    CHECK(v && !strcmp(v, "1"));

    /* build_info carries version and instance, escaped. */
    CHECK(count_samples(&e, "delay_bridge_build_info") == 1);
    CHECK(strstr(text, "delay_bridge_build_info{version=\"1.2.3\",instance=\"inst\\\"a\"} 1\n"));

    /* overdue: 2.5 s for orders, 0 for the route with nothing due; next due in 2.5 s. */
    v = value(&e, "delay_bridge_overdue_seconds", "route", "orders");
    CHECK(v && !strcmp(v, "2.5"));
    v = value(&e, "delay_bridge_overdue_seconds", "route", EVIL);
    CHECK(v && !strcmp(v, "0"));
    v = value(&e, "delay_bridge_next_due_seconds", NULL, NULL);
    CHECK(v && !strcmp(v, "2.5"));
    CHECK(count_samples(&e, "delay_bridge_next_due_seconds") == 1);

    /* unknown RSS: no sample, family still announced */
    CHECK(count_samples(&e, "delay_bridge_process_resident_memory_bytes") == 0);

    /* max_held: no bound in all (0) and none of a route's own: families, no samples */
    CHECK(count_samples(&e, "delay_bridge_max_held_messages") == 0);
    CHECK(count_samples(&e, "delay_bridge_route_max_held_messages") == 0);
    CHECK(strstr(text, "# TYPE delay_bridge_max_held_messages gauge\n"));
    CHECK(strstr(text, "# TYPE delay_bridge_route_max_held_messages gauge\n"));
    v = value(&e, "delay_bridge_held_limit_paused", "route", "orders");
    CHECK(v && !strcmp(v, "0"));

    free(text);
    free(e.s);

    /* a route paused at its max_held, the bound in all set */
    fill(&s);
    s.held_limit.max_held = 10000000;
    s.routes[0].max_held = 200;
    s.routes[0].held_limit_paused = 1;
    s.routes[0].held_limit_pauses = 2;
    render(&s, &e, &text);
    v = value(&e, "delay_bridge_max_held_messages", NULL, NULL);
    CHECK(v && !strcmp(v, "10000000"));
    v = value(&e, "delay_bridge_route_max_held_messages", "route", "orders");
    CHECK(v && !strcmp(v, "200"));
    CHECK(count_samples(&e, "delay_bridge_route_max_held_messages") == 1);
    v = value(&e, "delay_bridge_held_limit_paused", "route", "orders");
    CHECK(v && !strcmp(v, "1"));
    v = value(&e, "delay_bridge_held_limit_pauses_total", "route", "orders");
    CHECK(v && !strcmp(v, "2"));
    free(text);
    free(e.s);

    /* overdue -> 0; RSS known; down consumer -> not ready */
    fill(&s);
    s.next_due_ms = s.now_ms - 10000; /* due already: 0, never negative */
    s.rss_bytes = 777;
    s.consumer = DB_CONN_DOWN;
    render(&s, &e, &text);
    v = value(&e, "delay_bridge_next_due_seconds", NULL, NULL);
    CHECK(v && !strcmp(v, "0"));
    v = value(&e, "delay_bridge_process_resident_memory_bytes", NULL, NULL);
    CHECK(v && !strcmp(v, "777"));
    v = value(&e, "delay_bridge_broker_connected", "connection", "consumer");
    CHECK(v && !strcmp(v, "0"));
    v = value(&e, "delay_bridge_ready", NULL, NULL);
    CHECK(v && !strcmp(v, "0"));
    free(text);
    free(e.s);
}

static void test_escaping(void)
{
    struct db_stats s;
    struct expo e;
    char *text;
    fill(&s);
    render(&s, &e, &text);

    /* On the wire: backslash, quote and newline escaped... */
    CHECK(strstr(text, "delay_bridge_published_total{route=\"we\\\\ird\\\"ro\\nute\"} 7\n"));
    /* ...and read back to the exact route name (parse() rejects raw newlines). */
    const char *v = value(&e, "delay_bridge_published_total", "route", EVIL);
    CHECK(v && !strcmp(v, "7"));
    /* Every per-route counter family has a sample for both routes. */
    CHECK(count_samples(&e, "delay_bridge_cancel_missed_total") == 2);
    free(text);
    free(e.s);
}

/* Buckets of hist name{route=r} (r NULL: unlabelled) cumulative, +Inf == _count. */
static void check_hist(struct expo *e, const char *base, const char *r, uint64_t want_count,
                       double want_sum)
{
    char bname[160], cname[160], sname[160];
    snprintf(bname, sizeof bname, "%s_bucket", base);
    snprintf(cname, sizeof cname, "%s_count", base);
    snprintf(sname, sizeof sname, "%s_sum", base);
    uint64_t prev = 0;
    int nb = 0;
    double prev_le = -1;
    const char *inf = NULL;
    for (int i = 0; i < e->ns; i++) {
        struct sample *s = &e->s[i];
        if (strcmp(s->name, bname))
            continue;
        if (r && (!label(s, "route") || strcmp(label(s, "route"), r)))
            continue;
        const char *le = label(s, "le");
        CHECK(le != NULL);
        if (!le)
            continue;
        double lev = !strcmp(le, "+Inf") ? INFINITY : strtod(le, NULL);
        CHECK(lev > prev_le); /* bounds ascending */
        prev_le = lev;
        uint64_t c = strtoull(s->value, NULL, 10);
        CHECK(c >= prev); /* cumulative */
        prev = c;
        nb++;
        if (!strcmp(le, "+Inf"))
            inf = s->value;
    }
    CHECK(nb == DB_HIST_BUCKETS);
    CHECK(inf != NULL);
    const char *cnt = r ? value(e, cname, "route", r) : value(e, cname, NULL, NULL);
    const char *sum = r ? value(e, sname, "route", r) : value(e, sname, NULL, NULL);
    CHECK(cnt && inf && !strcmp(cnt, inf));
    CHECK(cnt && strtoull(cnt, NULL, 10) == want_count);
    CHECK(sum && fabs(strtod(sum, NULL) - want_sum) < 1e-9);
}

static void test_histograms(void)
{
    struct db_stats s;
    struct expo e;
    char *text;
    fill(&s);
    render(&s, &e, &text);

    check_hist(&e, "delay_bridge_fire_lateness_seconds", "orders", 4, 0.003 + 0.003 + 0.7 + 100);
    check_hist(&e, "delay_bridge_fire_lateness_seconds", EVIL, 0, 0);
    check_hist(&e, "delay_bridge_wal_fsync_seconds", NULL, 2, 0.0025);

    /* Two observations of 3 ms: the 0.0025 bucket has 0, the 0.005 bucket 2. */
    CHECK(strstr(text, "delay_bridge_fire_lateness_seconds_bucket{route=\"orders\",le=\"0.0025\"} 0\n"));
    CHECK(strstr(text, "delay_bridge_fire_lateness_seconds_bucket{route=\"orders\",le=\"0.005\"} 2\n"));
    CHECK(strstr(text, "delay_bridge_fire_lateness_seconds_bucket{route=\"orders\",le=\"10\"} 3\n"));
    CHECK(strstr(text, "delay_bridge_fire_lateness_seconds_bucket{route=\"orders\",le=\"+Inf\"} 4\n"));
    /* The stages: labels route, stage, le; cumulative; sum and count per (route, stage). */
    CHECK(strstr(text, "delay_bridge_fire_stage_seconds_bucket{route=\"orders\",stage=\"wake\",le=\"0.001\"} 0\n"));
    CHECK(strstr(text, "delay_bridge_fire_stage_seconds_bucket{route=\"orders\",stage=\"wake\",le=\"0.0025\"} 1\n"));
    CHECK(strstr(text, "delay_bridge_fire_stage_seconds_bucket{route=\"orders\",stage=\"confirm\",le=\"0.0005\"} 2\n"));
    CHECK(strstr(text, "delay_bridge_fire_stage_seconds_count{route=\"orders\",stage=\"confirm\"} 2\n"));
    CHECK(strstr(text, "delay_bridge_fire_stage_seconds_count{route=\"orders\",stage=\"read\"} 0\n"));
    CHECK(strstr(text, "delay_bridge_fire_stage_seconds_sum{route=\"orders\",stage=\"confirm\"} 0.0008\n"));
    int nstage = 0;
    for (int i = 0; i < e.ns; i++)
        if (!strcmp(e.s[i].name, "delay_bridge_fire_stage_seconds_count")) {
            nstage++;
            CHECK(label(&e.s[i], "stage") && label(&e.s[i], "route"));
            if (!strcmp(label(&e.s[i], "route"), EVIL) && !strcmp(label(&e.s[i], "stage"), "read"))
                CHECK(!strcmp(e.s[i].value, "1")); /* the hostile name parsed back whole */
        }
    CHECK(nstage == 2 * DB_STAGES);
    free(text);
    free(e.s);
}

static void test_no_routes(void)
{
    struct db_stats s;
    struct expo e;
    char *text;
    fill(&s);
    s.nroutes = 0;
    s.routes = NULL;
    s.version = NULL;
    s.instance = NULL;
    render(&s, &e, &text);
    /* Families still announced, without samples. */
    struct family *f = find_family(&e, "delay_bridge_published_total");
    CHECK(f && f->nsamples == 0);
    CHECK(strstr(text, "delay_bridge_build_info{version=\"\",instance=\"\"} 1\n"));
    free(text);
    free(e.s);
}

/* Retry routes: three labels (route, queue, and reason or le), escaped; buckets cumulative. */
static void test_retry(void)
{
    struct db_stats s;
    struct expo e;
    char *text;
    struct db_retry_stats r[2];

    fill(&s);
    memset(r, 0, sizeof r);
    r[0].route = "orders";
    r[0].queue = "work";
    r[0].retries = 7;
    r[0].parked[0] = 2; /* max_attempts */
    r[0].parked[3] = 1; /* queue_gone */
    r[0].attempts[0] = 5; /* le 1 */
    r[0].attempts[2] = 3; /* le 3 */
    r[0].attempts[DB_RETRY_BUCKETS - 1] = 1; /* +Inf: over 100 */
    r[0].attempts_sum = 5 + 9 + 250;
    r[0].attempts_n = 9;
    r[1].route = EVIL;
    r[1].queue = "q\"x\xff\xc0\xaf\xc3\xa9"; /* invalid UTF-8 (3 bytes), then a valid "e-acute" */
    r[1].retries = 1;
    s.retry = r;
    s.nretry = 2;
    render(&s, &e, &text);

    struct family *f = find_family(&e, "delay_bridge_retries_total");
    CHECK(f && !strcmp(f->type, "counter"));
    f = find_family(&e, "delay_bridge_retry_attempts");
    CHECK(f && !strcmp(f->type, "histogram"));
    CHECK(count_samples(&e, "delay_bridge_retries_total") == 2);
    CHECK(count_samples(&e, "delay_bridge_retry_parked_total") == 2 * RETRY_PARK_REASONS);
    CHECK(count_samples(&e, "delay_bridge_retry_attempts_bucket") == 2 * DB_RETRY_BUCKETS);
    int seen_evil = 0, seen = 0;
    for (int i = 0; i < e.ns; i++) {
        const struct sample *x = &e.s[i];
        const char *rt = label(x, "route"), *q = label(x, "queue"), *le = label(x, "le");
        const char *why = label(x, "reason");
        if (strncmp(x->name, "delay_bridge_retr", 17))
            continue;
        CHECK(rt && q, "%s without route and queue", x->name);
        if (!rt || !q)
            continue;
        if (!strcmp(rt, EVIL)) {
            CHECK(!strcmp(q, "q\"x\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xc3\xa9"),
                  "queue label %s: each invalid byte one U+FFFD, the valid character kept", q);
            seen_evil++;
            continue;
        }
        if (!strcmp(x->name, "delay_bridge_retries_total"))
            { CHECK(!strcmp(x->value, "7")); seen++; }
        if (why && !strcmp(why, "max_attempts"))
            { CHECK(!strcmp(x->value, "2")); seen++; }
        if (why && !strcmp(why, "queue_gone"))
            { CHECK(!strcmp(x->value, "1")); seen++; }
        if (why && !strcmp(why, "reason"))
            { CHECK(!strcmp(x->value, "0")); seen++; }
        if (le && !strcmp(le, "1"))
            { CHECK(!strcmp(x->value, "5")); seen++; }
        if (le && !strcmp(le, "2"))
            { CHECK(!strcmp(x->value, "5"), "cumulative: %s", x->value); seen++; }
        if (le && !strcmp(le, "100"))
            { CHECK(!strcmp(x->value, "8")); seen++; }
        if (le && !strcmp(le, "+Inf"))
            { CHECK(!strcmp(x->value, "9")); seen++; }
        if (!strcmp(x->name, "delay_bridge_retry_attempts_count"))
            { CHECK(!strcmp(x->value, "9")); seen++; }
        if (!strcmp(x->name, "delay_bridge_retry_attempts_sum"))
            { CHECK(!strcmp(x->value, "264")); seen++; }
    }
    CHECK(seen == 10, "%d of the 10 series checked", seen);
    CHECK(seen_evil == 1 + RETRY_PARK_REASONS + DB_RETRY_BUCKETS + 2);
    free(text);
    free(e.s);

    /* no retry route: the families are announced, without samples */
    fill(&s);
    render(&s, &e, &text);
    f = find_family(&e, "delay_bridge_retry_parked_total");
    CHECK(f && f->nsamples == 0);
    free(text);
    free(e.s);
}

/* delayed_exchanges routes: a sample per (route, exchange), labels escaped. */
static void test_exchanges(void)
{
    struct db_stats s;
    struct expo e;
    char *text;
    struct db_exchange_stats x[2] = {{"dx", "orders.delayed", 12},
                                     {"dx", "q\"x\n\xff\xc3\xa9", 3}};

    fill(&s);
    s.exchanges = x;
    s.nexchanges = 2;
    render(&s, &e, &text);
    struct family *f = find_family(&e, "delay_bridge_exchange_published_total");
    CHECK(f && !strcmp(f->type, "counter") && f->nsamples == 2);
    CHECK(strstr(text, "delay_bridge_exchange_published_total{route=\"dx\","
                       "exchange=\"orders.delayed\"} 12\n"));
    /* quote and newline escaped, the invalid byte replaced, the e-acute kept */
    CHECK(strstr(text, "exchange=\"q\\\"x\\n\xef\xbf\xbd\xc3\xa9\"} 3\n"));
    CHECK(find_family(&e, "delay_bridge_refused_total") != NULL);
    free(text);
    free(e.s);
}

static const struct check_case cases[] = {
    { "retry", test_retry },
    { "exchanges", test_exchanges },
    { "hist_observe", test_hist_observe },
    { "families", test_families },
    { "values", test_values },
    { "escaping", test_escaping },
    { "histograms", test_histograms },
    { "no_routes", test_no_routes },
};

int main(int argc, char **argv)
{
    return CHECK_MAIN(argc, argv, cases);
}
