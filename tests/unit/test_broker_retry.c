/*
 * test_broker_retry.c -- retry routes without a broker: the configuration
 * (routes[].retry), the policy and backoff formula (retry.c), and the
 * headers in and out (broker_retry.c) over hand-built tables shaped like the
 * ones RabbitMQ 3.10.8, 4.0.5 and 4.3.6 send (the x-death layout checked
 * on the brokers).
 */
#include "broker/broker_retry.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "delay-bridge/config.h"
#include "delay-bridge/retry.h"

#include "check.h"
#include "testkit.h"

#define HEAD "{\"broker\":{\"uri\":\"amqp://g:g@127.0.0.1:5672/v\"},\"wal\":{\"dir\":\"/tmp/x\"},"
#define RROUTE(extra, retry)                                                               \
    HEAD "\"routes\":[{\"name\":\"r\",\"ingress_exchange\":\"app.retry\","                 \
         "\"ingress_queue\":\"app.retry.q\"" extra ",\"retry\":" retry "}]}"
#define PARK "\"parking_exchange\":\"app.parked\",\"queue_pattern\":\"work\\\\..+\""

static int parse(const char *json, struct config *c, char *err, size_t n)
{
    return config_parse(c, json, "t.json", err, n);
}

static void expect_err(int line, const char *json, const char *needle)
{
    struct config c;
    char err[512] = "";

    if (parse(json, &c, err, sizeof err) == 0) {
        check_failed(__FILE__, line, "config_parse() == -1", "accepted: %s", json);
        config_free(&c);
    } else if (!strstr(err, needle)) {
        check_failed(__FILE__, line, "error names the key", "err=\"%s\" want \"%s\"", err, needle);
    }
}
#define ERR(json, needle) expect_err(__LINE__, json, needle)

static void test_config(void)
{
    struct config c;
    char err[512] = "";

    CHECK(parse(RROUTE("", "{" PARK "}"), &c, err, sizeof err) == 0, "%s", err);
    const struct config_route *r = &c.routes[0];
    CHECK(r->retry != NULL);
    CHECK(r->retry->policy.initial_ms == 1000 && r->retry->policy.max_ms == 3600000);
    CHECK(r->retry->policy.multiplier == 2.0 && r->retry->policy.max_attempts == 5);
    CHECK(r->retry->policy.jitter == RETRY_JITTER_NONE);
    CHECK(r->retry->reasons == (RETRY_REASON_REJECTED | RETRY_REASON_DELIVERY_LIMIT));
    CHECK(strcmp(r->target_exchange, "") == 0);
    CHECK(r->invalid_delay == INVALID_DELAY_DEAD_LETTER);
    CHECK(strcmp(r->dead_letter_exchange, "app.parked") == 0);
    CHECK(strcmp(r->unroutable_exchange, "app.parked") == 0);
    config_free(&c);

    /* a per-queue entry starts from the route's policy, whatever the key order */
    CHECK(parse(RROUTE(",\"queue_type\":\"quorum\"",
                       "{\"queues\":{\"q1\":{\"max_attempts\":9}},\"initial_ms\":50,"
                       "\"jitter\":\"equal\",\"multiplier\":1.5,\"max_ms\":1000," PARK
                       ",\"parking_queue\":\"app.parked.q\",\"reasons\":[\"expired\"]}"),
                &c, err, sizeof err) == 0, "%s", err);
    r = &c.routes[0];
    CHECK(r->retry->nqueues == 1 && strcmp(r->retry->queues[0].queue, "q1") == 0);
    CHECK(r->retry->queues[0].policy.max_attempts == 9);
    CHECK(r->retry->queues[0].policy.initial_ms == 50);
    CHECK(r->retry->queues[0].policy.jitter == RETRY_JITTER_EQUAL);
    CHECK(r->retry->queues[0].policy.multiplier == 1.5);
    CHECK(r->retry->reasons == RETRY_REASON_EXPIRED);
    CHECK(strcmp(r->retry->parking_queue, "app.parked.q") == 0);
    config_free(&c);

    ERR(RROUTE(",\"target_exchange\":\"x\"", "{" PARK "}"), "routes[0].target_exchange: not allowed with retry");
    ERR(RROUTE(",\"dead_letter_exchange\":\"x\"", "{" PARK "}"), "routes[0].dead_letter_exchange");
    ERR(RROUTE(",\"invalid_delay\":\"publish\"", "{" PARK "}"), "routes[0].invalid_delay");
    ERR(RROUTE(",\"unroutable_exchange\":\"x\"", "{" PARK "}"), "routes[0].unroutable_exchange");
    ERR(RROUTE(",\"queue_type\":\"stream\"", "{" PARK "}"), "cannot be a stream");
    ERR(RROUTE("", "{}"), "routes[0].retry.parking_exchange");
    ERR(RROUTE("", "[]"), "routes[0].retry: expected an object");
    ERR(RROUTE("", "{" PARK ",\"initial\":5}"), "initial");
    ERR(RROUTE("", "{" PARK ",\"multiplier\":0.5}"), "routes[0].retry.multiplier");
    ERR(RROUTE("", "{" PARK ",\"multiplier\":\"2\"}"), "routes[0].retry.multiplier");
    ERR(RROUTE("", "{" PARK ",\"max_attempts\":0}"), "routes[0].retry.max_attempts");
    ERR(RROUTE("", "{" PARK ",\"max_attempts\":10001}"), "routes[0].retry.max_attempts");
    ERR(RROUTE("", "{" PARK ",\"initial_ms\":5000,\"max_ms\":100}"), "routes[0].retry.max_ms");
    ERR(RROUTE(",\"max_delay_ms\":1000", "{" PARK ",\"max_ms\":5000}"), "routes[0].retry.max_ms");
    ERR(RROUTE("", "{" PARK ",\"jitter\":\"some\"}"), "routes[0].retry.jitter");
    ERR(RROUTE("", "{" PARK ",\"reasons\":[]}"), "routes[0].retry.reasons");
    ERR(RROUTE("", "{" PARK ",\"reasons\":[\"nope\"]}"), "routes[0].retry.reasons[0]");
    ERR(RROUTE("", "{" PARK ",\"reasons\":[\"expired\",\"expired\"]}"), "listed twice");
    ERR(RROUTE("", "{" PARK ",\"queues\":{\"q\":{\"parking_exchange\":\"x\"}}}"),
        "routes[0].retry.queues.q");
    ERR(RROUTE("", "{" PARK ",\"queues\":{\"q\":{\"max_attempts\":-1}}}"),
        "routes[0].retry.queues.q.max_attempts");
    ERR(RROUTE("", "{\"parking_exchange\":\"app.retry\",\"queues\":{\"q\":{}}}"),
        "same as ingress_exchange");
    /* where a message may go back is the configuration's to say */
    ERR(RROUTE("", "{\"parking_exchange\":\"app.parked\"}"),
        "routes[0].retry: expected \"queues\" or \"queue_pattern\"");
    ERR(RROUTE("", "{\"parking_exchange\":\"app.parked\",\"queue_pattern\":\"\"}"),
        "routes[0].retry.queue_pattern");
    ERR(RROUTE("", "{\"parking_exchange\":\"app.parked\",\"queue_pattern\":\"a(\"}"),
        "routes[0].retry.queue_pattern: not a POSIX extended regular expression");
    ERR(RROUTE("", "{\"parking_exchange\":\"app.parked\",\"queue_pattern\":7}"),
        "routes[0].retry.queue_pattern");
    ERR(RROUTE("", "{" PARK ",\"parking_queue\":\"app.retry.q\"}"), "routes[0].retry.parking_queue");
    /* a delayed route still needs its target */
    ERR(HEAD "\"routes\":[{\"name\":\"r\",\"ingress_exchange\":\"a\",\"ingress_queue\":\"b\"}]}",
        "routes[0].target_exchange");
}

static void test_backoff(void)
{
    struct config_retry_policy p = {100, 2.0, 1000, RETRY_JITTER_NONE, 5};

    CHECK(retry_backoff_ms(&p, 0, 0) == 100);
    CHECK(retry_backoff_ms(&p, 1, 0) == 100);
    CHECK(retry_backoff_ms(&p, 2, 0) == 200);
    CHECK(retry_backoff_ms(&p, 3, 0) == 400);
    CHECK(retry_backoff_ms(&p, 4, 0) == 800);
    CHECK(retry_backoff_ms(&p, 5, 0) == 1000, "capped at max_ms");
    CHECK(retry_backoff_ms(&p, 4000000000u, 0) == 1000, "saturates, no overflow");
    p.multiplier = 100.0;
    p.max_ms = UINT32_MAX * 1000ull;
    CHECK(retry_backoff_ms(&p, 10000, 0) == p.max_ms);
    p.multiplier = 1.0;
    CHECK(retry_backoff_ms(&p, 10000, 0) == 100, "multiplier 1: a constant delay");

    /* jitter: every draw inside its range, and both ends reached */
    struct config_retry_policy f = {100, 2.0, 1000, RETRY_JITTER_FULL, 5};
    struct config_retry_policy e = {100, 2.0, 1000, RETRY_JITTER_EQUAL, 5};
    uint64_t fmin = UINT64_MAX, fmax = 0, emin = UINT64_MAX, emax = 0, x = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 20000; i++) {
        uint64_t r = tk_rand(&x);
        uint64_t a = retry_backoff_ms(&f, 3, r), b = retry_backoff_ms(&e, 3, r);
        fmin = a < fmin ? a : fmin, fmax = a > fmax ? a : fmax;
        emin = b < emin ? b : emin, emax = b > emax ? b : emax;
    }
    CHECK(fmin == 0 && fmax == 400, "full: [0, d]: got [%" PRIu64 ", %" PRIu64 "]", fmin, fmax);
    CHECK(emin == 200 && emax == 400, "equal: [d/2, d]: got [%" PRIu64 ", %" PRIu64 "]", emin,
          emax);
    e.initial_ms = 3; /* odd: ceil(3/2) + [0, 1] */
    CHECK(retry_backoff_ms(&e, 1, 0) == 2 && retry_backoff_ms(&e, 1, 1) == 3);
}

static void test_judge(void)
{
    struct config_retry_queue q = {"slow", {5000, 3.0, 60000, RETRY_JITTER_NONE, 2}};
    struct config_retry rt = {{100, 2.0, 1000, RETRY_JITTER_NONE, 3}, "park", "",
                              RETRY_REASON_REJECTED | RETRY_REASON_DELIVERY_LIMIT, &q, 1, "", NULL};
    struct retry_in in = {"work", 4, "rejected", 8, 0, 0, 1};
    uint32_t n;
    uint64_t d;

    CHECK(retry_judge(&rt, &in, 0, &n, &d) == XDELAY_OK && n == 1 && d == 100);
    in.admitted = 0;
    CHECK(retry_judge(&rt, &in, 0, &n, &d) == XDELAY_RETRY_NOTADMITTED && d == 0,
          "a queue the route does not admit parks, whatever else the headers say");
    in.admitted = 1;
    in.attempt = 2;
    CHECK(retry_judge(&rt, &in, 0, &n, &d) == XDELAY_OK && n == 2 && d == 200);
    in.attempt = 3;
    CHECK(retry_judge(&rt, &in, 0, &n, &d) == XDELAY_RETRY_LAST && n == 3 && d == 0);
    in.attempt = 1000000;
    CHECK(retry_judge(&rt, &in, 0, &n, &d) == XDELAY_RETRY_LAST, "a raised count parks");
    in.attempt = -4;
    CHECK(retry_judge(&rt, &in, 0, &n, &d) == XDELAY_OK && n == 1, "nonsense counts as 1");
    in.attempt = 0;
    in.reason = "delivery_limit", in.reason_len = 14;
    CHECK(retry_judge(&rt, &in, 0, &n, &d) == XDELAY_OK);
    in.reason = "expired", in.reason_len = 7;
    CHECK(retry_judge(&rt, &in, 0, &n, &d) == XDELAY_RETRY_REASON);
    in.reason = NULL, in.reason_len = 0;
    CHECK(retry_judge(&rt, &in, 0, &n, &d) == XDELAY_RETRY_REASON);
    in.reason = "rejected", in.reason_len = 8;
    in.queue = NULL, in.queue_len = 0;
    CHECK(retry_judge(&rt, &in, 0, &n, &d) == XDELAY_RETRY_NOQUEUE);
    /* the queue's own policy */
    in.queue = "slow", in.queue_len = 4;
    CHECK(retry_judge(&rt, &in, 0, &n, &d) == XDELAY_OK && d == 5000);
    in.attempt = 2;
    CHECK(retry_judge(&rt, &in, 0, &n, &d) == XDELAY_RETRY_LAST, "the queue's max_attempts");
    in.queue = "slo", in.queue_len = 3, in.attempt = 0; /* a prefix is another queue */
    CHECK(retry_judge(&rt, &in, 0, &n, &d) == XDELAY_OK && d == 100);
    /* full jitter may draw 0: published at once, still a retry */
    rt.policy.jitter = RETRY_JITTER_FULL;
    CHECK(retry_judge(&rt, &in, 101, &n, &d) == XDELAY_NOW && d == 0);

    CHECK(strcmp(retry_park_reason(XDELAY_RETRY_LAST, 0), "max_attempts") == 0);
    CHECK(strcmp(retry_park_reason(XDELAY_RETRY_REASON, 0), "reason") == 0);
    CHECK(strcmp(retry_park_reason(XDELAY_RETRY_NOQUEUE, 0), "no_queue") == 0);
    CHECK(strcmp(retry_park_reason(0, 1), "queue_gone") == 0);
    CHECK(strcmp(retry_park_reason(XDELAY_EKEY, 0), "invalid") == 0);
    CHECK(strcmp(retry_park_reason(XDELAY_RETRY_NOTADMITTED, 0), "not_admitted") == 0);
    CHECK(retry_park_index("queue_gone") == 3 && retry_park_index("x") == -1);
    CHECK(retry_park_index("not_admitted") == 5);
    CHECK(xdelay_invalid(XDELAY_RETRY_LAST) && xdelay_invalid(XDELAY_RETRY_NOQUEUE));
}

/* ---- headers ---- */

static amqp_field_value_t s_(const char *s)
{
    amqp_field_value_t v;
    memset(&v, 0, sizeof v);
    v.kind = AMQP_FIELD_KIND_UTF8;
    v.value.bytes = amqp_cstring_bytes(s);
    return v;
}

static amqp_field_value_t l_(int64_t i)
{
    amqp_field_value_t v;
    memset(&v, 0, sizeof v);
    v.kind = AMQP_FIELD_KIND_I64;
    v.value.i64 = i;
    return v;
}

static amqp_table_entry_t e_(const char *k, amqp_field_value_t v)
{
    amqp_table_entry_t e;
    e.key = amqp_cstring_bytes(k);
    e.value = v;
    return e;
}

static const amqp_field_value_t *get(const amqp_basic_properties_t *p, const char *k)
{
    for (int i = 0; i < p->headers.num_entries; i++)
        if (p->headers.entries[i].key.len == strlen(k) &&
            memcmp(p->headers.entries[i].key.bytes, k, strlen(k)) == 0)
            return &p->headers.entries[i].value;
    return NULL;
}

static int str_is(const amqp_field_value_t *v, const char *s)
{
    return v && v->kind == AMQP_FIELD_KIND_UTF8 && v->value.bytes.len == strlen(s) &&
           memcmp(v->value.bytes.bytes, s, strlen(s)) == 0;
}

/* Which queues a route may send back to (retry_admits): the list, the whole-name pattern,
   never the bridge's own queues, "amq.", a NUL or invalid UTF-8. */
/* Read as the consumer reads: the table once, then the struct. */
static void t_retry_in(const amqp_table_t *t, struct retry_in *in)
{
    struct broker_headers h;
    broker_msg_read(t, 0, 0, NULL, &h);
    broker_retry_in(&h, in);
}

static void t_judge(const struct config *c, const struct config_route *rc,
                    const amqp_basic_properties_t *p, const char *user, uint64_t now,
                    uint64_t rnd, struct retry_verdict *v)
{
    struct broker_headers h;
    broker_msg_read(p->_flags & AMQP_BASIC_HEADERS_FLAG ? &p->headers : NULL, 0, 0, NULL, &h);
    broker_retry_judge(c, rc, &h, broker_msg_from_user(p, user), now, rnd, v);
}

static void test_admits(void)
{
    static const char json[] =
        "{\"broker\":{\"uri\":\"amqp://g:g@127.0.0.1:5672/v\"},"
        "\"wal\":{\"dir\":\"/tmp/x\",\"replicate\":{}},"
        "\"routes\":[{\"name\":\"r\",\"ingress_exchange\":\"app.retry\","
        "\"ingress_queue\":\"work.retry.q\",\"retry\":{\"parking_exchange\":\"app.parked\","
        "\"parking_queue\":\"work.parked\",\"queue_pattern\":\"work\\\\.[a-z.]+\","
        "\"queues\":{\"billing\":{}}}},"
        "{\"name\":\"d\",\"ingress_exchange\":\"x.delayed\",\"ingress_queue\":\"work.delayed.q\","
        "\"target_exchange\":\"x\"},"
        "{\"name\":\"o\",\"ingress_exchange\":\"o.retry\",\"ingress_queue\":\"o.retry.q\","
        "\"retry\":{\"parking_exchange\":\"o.parked\",\"queues\":{\"only\":{}}}}]}";
    struct config c;
    char err[512] = "";

    if (parse(json, &c, err, sizeof err) != 0) {
        CHECK(0, "%s", err);
        return;
    }
    const struct config_route *r = &c.routes[0], *o = &c.routes[2];
#define ADM(route, q) retry_admits(&c, route, q, sizeof(q) - 1)
    CHECK(ADM(r, "work.email") && ADM(r, "work.a.b") && ADM(r, "billing"));
    CHECK(!ADM(r, "payments.secret"), "a name neither listed nor matched");
    CHECK(!ADM(r, "xwork.email") && !ADM(r, "work.email2") && !ADM(r, "work.Email"),
          "the pattern matches the whole name");
    CHECK(!ADM(r, "work.retry.q") && !ADM(r, "work.delayed.q"), "ingress queues");
    CHECK(!ADM(r, "work.retry.q.keys.b1"), "key event queues");
    CHECK(!ADM(r, "work.parked"), "the parking queue");
    CHECK(!ADM(r, "o.retry.q"), "another route's ingress");
    CHECK(strcmp(c.repl.stream, "delay-bridge.wal") == 0);
    CHECK(!ADM(r, "delay-bridge.wal") && !ADM(r, "delay-bridge.wal.lease"));
    CHECK(!ADM(r, "amq.gen-abc") && !ADM(r, "amq.direct"));
    CHECK(!retry_admits(&c, r, "work.a\0b", 8), "a NUL");
    CHECK(!ADM(r, "work.\xff\xfe") && !ADM(r, "billing\xc0\xaf"), "invalid UTF-8");
    CHECK(!retry_admits(&c, r, NULL, 0) && !retry_admits(&c, r, "work.x", 0));
    CHECK(ADM(o, "only") && !ADM(o, "work.email"), "each route its own list");
    CHECK(!ADM(&c.routes[1], "work.email"), "a delayed route sends nothing back");
#undef ADM

    /* the whole judgement: forged x-death, forged hand-back, a bridge's hand-back */
    amqp_pool_t pool;
    init_amqp_pool(&pool, 4096);
    amqp_table_entry_t d0[] = {e_("queue", s_("payments.secret")), e_("reason", s_("rejected"))};
    amqp_field_value_t death;
    memset(&death, 0, sizeof death);
    death.kind = AMQP_FIELD_KIND_TABLE;
    death.value.table = (amqp_table_t){2, d0};
    amqp_field_value_t arr;
    memset(&arr, 0, sizeof arr);
    arr.kind = AMQP_FIELD_KIND_ARRAY;
    arr.value.array = (amqp_array_t){1, &death};
    amqp_table_entry_t h[] = {e_("x-death", arr), e_("x-delay-bridge-handback", l_(1)),
                              e_("x-delay", l_(5000))};
    amqp_basic_properties_t p;
    memset(&p, 0, sizeof p);
    p._flags = AMQP_BASIC_HEADERS_FLAG;
    p.headers = (amqp_table_t){1, h};
    struct retry_verdict v;

    t_judge(&c, r, &p, "bridge", 1000, 0, &v);
    CHECK(v.st == XDELAY_RETRY_NOTADMITTED && !v.admitted && !v.handback, "forged x-death");
    p.headers.num_entries = 3; /* + a hand-back mark, no user-id: not a bridge's */
    t_judge(&c, r, &p, "bridge", 1000, 0, &v);
    CHECK(v.st == XDELAY_RETRY_NOTADMITTED && !v.handback, "forged hand-back");
    d0[0] = e_("queue", s_("work.email"));
    t_judge(&c, r, &p, "bridge", 1000, 0, &v);
    CHECK(v.st == XDELAY_OK && !v.handback && v.delay_ms == 1000,
          "an unproven hand-back is judged as a failure: the policy's delay, not its x-delay");
    p._flags |= AMQP_BASIC_USER_ID_FLAG;
    p.user_id = amqp_cstring_bytes("publisher");
    t_judge(&c, r, &p, "bridge", 1000, 0, &v);
    CHECK(!v.handback, "another user's user-id proves nothing");
    p.user_id = amqp_cstring_bytes("bridge");
    t_judge(&c, r, &p, "bridge", 1000, 0, &v);
    CHECK(v.st == XDELAY_OK && v.handback && v.delay_ms == 5000, "a bridge's hand-back");
    t_judge(&c, r, &p, "", 1000, 0, &v);
    CHECK(!v.handback, "no broker user: nothing vouches");
    d0[0] = e_("queue", s_("payments.secret"));
    t_judge(&c, r, &p, "bridge", 1000, 0, &v);
    CHECK(v.st == XDELAY_RETRY_NOTADMITTED && !v.handback,
          "even a bridge's hand-back goes only where the route admits");
    empty_amqp_pool(&pool);
    config_free(&c);
}

static void test_in(void)
{
    /* x-death as 4.3.6 writes it after a second rejection: two entries, newest first */
    amqp_table_entry_t d0[] = {e_("count", l_(1)), e_("reason", s_("rejected")),
                               e_("queue", s_("work.b")), e_("exchange", s_(""))};
    amqp_table_entry_t d1[] = {e_("count", l_(3)), e_("reason", s_("expired")),
                               e_("queue", s_("work.a"))};
    amqp_field_value_t deaths[2];
    memset(deaths, 0, sizeof deaths);
    deaths[0].kind = deaths[1].kind = AMQP_FIELD_KIND_TABLE;
    deaths[0].value.table = (amqp_table_t){4, d0};
    deaths[1].value.table = (amqp_table_t){3, d1};
    amqp_field_value_t arr;
    memset(&arr, 0, sizeof arr);
    arr.kind = AMQP_FIELD_KIND_ARRAY;
    arr.value.array = (amqp_array_t){2, deaths};
    amqp_table_entry_t h[] = {e_("x-first-death-queue", s_("work.a")), e_("x-death", arr),
                              e_("x-retry-attempt", l_(4))};
    amqp_table_t t = {3, h};
    struct retry_in in;

    t_retry_in(&t, &in);
    CHECK(in.queue && in.queue_len == 6 && memcmp(in.queue, "work.b", 6) == 0,
          "the newest entry, not the first death");
    CHECK(in.reason && in.reason_len == 8 && memcmp(in.reason, "rejected", 8) == 0);
    CHECK(in.attempt == 4 && !in.handback);

    /* no x-death: 4.x's x-last-death-queue, then x-first-death-queue */
    amqp_table_entry_t h2[] = {e_("x-first-death-queue", s_("first")),
                               e_("x-last-death-queue", s_("last")),
                               e_("x-last-death-reason", s_("delivery_limit")),
                               e_("x-retry-attempt", s_("7")), e_("x-delay-bridge-handback", l_(1))};
    t = (amqp_table_t){5, h2};
    t_retry_in(&t, &in);
    CHECK(in.queue_len == 4 && memcmp(in.queue, "last", 4) == 0);
    CHECK(in.reason_len == 14 && memcmp(in.reason, "delivery_limit", 14) == 0);
    CHECK(in.attempt == 0, "a text attempt is not the bridge's: counts as none");
    CHECK(in.handback);
    t.num_entries = 1;
    t_retry_in(&t, &in);
    CHECK(in.queue_len == 5 && memcmp(in.queue, "first", 5) == 0 && !in.reason);
    t_retry_in(NULL, &in);
    CHECK(!in.queue && !in.reason && in.attempt == 0);
    /* a malformed x-death (not an array of tables) falls back too */
    amqp_table_entry_t h3[] = {e_("x-death", s_("nonsense")), e_("x-first-death-queue", s_("f"))};
    t = (amqp_table_t){2, h3};
    t_retry_in(&t, &in);
    CHECK(in.queue_len == 1 && in.queue[0] == 'f');
}

static void test_out(void)
{
    amqp_pool_t pool;
    amqp_basic_properties_t p;
    amqp_table_entry_t h[] = {e_("app", s_("kept")), e_("x-delay-bridge-handback", l_(1))};
    const amqp_field_value_t *v;

    init_amqp_pool(&pool, 4096);
    memset(&p, 0, sizeof p);
    /* the first failure: sent back as attempt 2, one time in the history */
    broker_retry_out(&p, &pool, BROKER_RETRY_BACK, 1000, "work", NULL);
    CHECK((v = get(&p, "x-retry-attempt")) && v->kind == AMQP_FIELD_KIND_I64 && v->value.i64 == 2);
    CHECK((v = get(&p, "x-retry-history")) && v->kind == AMQP_FIELD_KIND_ARRAY &&
          v->value.array.num_entries == 1 && v->value.array.entries[0].value.i64 == 1000);
    CHECK(!get(&p, "x-retry-parked-reason"));

    /* 40 more failures: the count goes on, the history keeps the newest 32 */
    for (int i = 1; i <= 40; i++)
        broker_retry_out(&p, &pool, BROKER_RETRY_BACK, 1000 + (uint64_t)i, "work", NULL);
    CHECK((v = get(&p, "x-retry-attempt")) && v->value.i64 == 42);
    CHECK((v = get(&p, "x-retry-history")) && v->value.array.num_entries == RETRY_HISTORY_MAX &&
          v->value.array.entries[0].value.i64 == 1009 &&
          v->value.array.entries[RETRY_HISTORY_MAX - 1].value.i64 == 1040);

    /* parked: attempts made, reason, queue; the attempt header stays as it came */
    broker_retry_out(&p, &pool, BROKER_RETRY_PARK, 2000, "work", "max_attempts");
    CHECK((v = get(&p, "x-retry-attempts")) && v->value.i64 == 42);
    CHECK(str_is(get(&p, "x-retry-parked-reason"), "max_attempts"));
    CHECK(str_is(get(&p, "x-retry-queue"), "work"));
    CHECK((v = get(&p, "x-retry-history")) &&
          v->value.array.entries[RETRY_HISTORY_MAX - 1].value.i64 == 2000);

    /* a hand-back is marked and counts nothing; the mark never reaches a consumer */
    memset(&p, 0, sizeof p);
    p._flags = AMQP_BASIC_HEADERS_FLAG;
    p.headers = (amqp_table_t){1, h};
    p.headers = (amqp_table_t){1, h};
    broker_retry_out(&p, &pool, BROKER_RETRY_HANDBACK, 77, NULL, NULL);
    CHECK(get(&p, "x-delay-bridge-handback") && !get(&p, "x-retry-attempt"));
    CHECK((v = get(&p, "x-retry-history")) && v->value.array.num_entries == 1 &&
          v->value.array.entries[0].value.i64 == 77, "the failure's time goes with the hand-back");
    /* the next bridge sends it back: no second entry for its receipt of the hand-back */
    broker_retry_out(&p, &pool, BROKER_RETRY_BACK, 99, "q", NULL);
    CHECK(!get(&p, "x-delay-bridge-handback") && str_is(get(&p, "app"), "kept"));
    CHECK((v = get(&p, "x-retry-history")) && v->value.array.num_entries == 1 &&
          v->value.array.entries[0].value.i64 == 77);
    CHECK((v = get(&p, "x-retry-attempt")) && v->value.i64 == 2);
    p.headers = (amqp_table_t){2, h};
    broker_retry_out(&p, &pool, BROKER_RETRY_BACK, 5, "q", NULL);
    CHECK(!get(&p, "x-delay-bridge-handback") && str_is(get(&p, "app"), "kept"));
    CHECK(h[1].key.len == strlen("x-delay-bridge-handback"), "the stored table is not written");
    /* no queue known (no_queue): no x-retry-queue */
    memset(&p, 0, sizeof p);
    broker_retry_out(&p, &pool, BROKER_RETRY_PARK, 5, NULL, "no_queue");
    CHECK(!get(&p, "x-retry-queue") && str_is(get(&p, "x-retry-parked-reason"), "no_queue"));
    empty_amqp_pool(&pool);
}


/* Rules of the read pinned before it moved to one pass (issue 42): first entries only. */
static void test_in_first(void)
{
    amqp_table_entry_t d0[] = {e_("queue", s_("work.b"))}; /* no reason */
    amqp_field_value_t death;
    memset(&death, 0, sizeof death);
    death.kind = AMQP_FIELD_KIND_TABLE;
    death.value.table = (amqp_table_t){1, d0};
    amqp_field_value_t arr;
    memset(&arr, 0, sizeof arr);
    arr.kind = AMQP_FIELD_KIND_ARRAY;
    arr.value.array = (amqp_array_t){1, &death};
    struct retry_in in;

    /* a malformed first x-death: the fallbacks, never a second x-death */
    amqp_table_entry_t h[] = {e_("x-death", s_("nonsense")), e_("x-death", arr),
                              e_("x-first-death-reason", s_("expired")),
                              e_("x-first-death-queue", s_("f1")),
                              e_("x-first-death-queue", s_("f2"))};
    amqp_table_t t = {5, h};
    t_retry_in(&t, &in);
    CHECK(in.queue_len == 2 && memcmp(in.queue, "f1", 2) == 0);
    CHECK(in.reason_len == 7 && memcmp(in.reason, "expired", 7) == 0);
    /* x-death's queue without its reason: the reason from the fallbacks */
    h[0] = e_("x-death", arr);
    t_retry_in(&t, &in);
    CHECK(in.queue_len == 6 && memcmp(in.queue, "work.b", 6) == 0);
    CHECK(in.reason_len == 7 && memcmp(in.reason, "expired", 7) == 0);
    /* an empty queue name is none: the fallback; a long one (> 255) is none at all */
    d0[0] = e_("queue", s_(""));
    t_retry_in(&t, &in);
    CHECK(in.queue_len == 2 && memcmp(in.queue, "f1", 2) == 0);
    static char longq[300];
    memset(longq, 'q', 299);
    d0[0] = e_("queue", s_(longq));
    t_retry_in(&t, &in);
    CHECK(!in.queue && in.queue_len == 0);
    /* a last-death queue that is not a string: the first-death one */
    amqp_table_entry_t h2[] = {e_("x-last-death-queue", l_(5)),
                               e_("x-first-death-queue", s_("f1")),
                               e_("x-last-death-reason", l_(5)),
                               e_("x-retry-attempt", l_(0)), e_("x-retry-attempt", l_(6)),
                               e_("x-delay-bridge-handback", s_(""))};
    t = (amqp_table_t){6, h2};
    t_retry_in(&t, &in);
    CHECK(in.queue_len == 2 && memcmp(in.queue, "f1", 2) == 0 && !in.reason);
    CHECK(in.attempt == 0, "the first x-retry-attempt, below 1: none");
    CHECK(in.handback, "the mark counts by its presence, any kind");
    /* attempt kinds: any integer; a U64 above INT64_MAX saturates */
    amqp_field_value_t u;
    memset(&u, 0, sizeof u);
    u.kind = AMQP_FIELD_KIND_U64;
    u.value.u64 = UINT64_MAX;
    h2[3] = e_("x-retry-attempt", u);
    t_retry_in(&t, &in);
    CHECK(in.attempt == INT64_MAX);
    u.kind = AMQP_FIELD_KIND_I8;
    u.value.i8 = 3;
    h2[3] = e_("x-retry-attempt", u);
    t_retry_in(&t, &in);
    CHECK(in.attempt == 3);
    u.kind = AMQP_FIELD_KIND_TIMESTAMP;
    u.value.u64 = 3;
    h2[3] = e_("x-retry-attempt", u);
    t_retry_in(&t, &in);
    CHECK(in.attempt == 0, "a timestamp is not an attempt");
}

static const struct check_case cases[] = {
    {"in_first", test_in_first},
    {"config", test_config}, {"backoff", test_backoff}, {"judge", test_judge},
    {"in", test_in},         {"out", test_out},       {"admits", test_admits},
};

int main(int argc, char **argv)
{
    return CHECK_MAIN(argc, argv, cases);
}
