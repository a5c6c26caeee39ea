/*
 * config_retry.c -- routes[].retry: a retry route's policy, parking and
 * per-queue overrides.
 *
 * A route with a "retry" object is a retry route (README, "Retries with
 * backoff"): consumers' queues dead-letter into its ingress exchange, and
 * the bridge sends each message back to the queue it failed in after the
 * policy's delay, or parks it. Keys of an ordinary route that make no
 * sense then are refused by name rather than ignored (the schema's
 * NO_RETRY rows, which GET /routes leaves out too): target_exchange
 * (the message goes back through the default exchange), invalid_delay and
 * dead_letter_exchange (a hopeless message is parked), and
 * unroutable_exchange (a queue that is gone parks it too). The parser fills
 * those three from the parking exchange, so the rest of the bridge -- the
 * dead-letter and unroutable paths it already has -- carries a parked
 * message there without knowing about retries.
 *
 *   "retry": {
 *     "initial_ms": 1000, "multiplier": 2.0, "max_ms": 3600000,
 *     "jitter": "none", "max_attempts": 5,          -- the policy
 *     "parking_exchange": "orders.parked",          -- required
 *     "parking_queue": "orders.parked",             -- optional, declared
 *     "reasons": ["rejected", "delivery_limit"],    -- x-death reasons retried
 *     "queues": {"orders.email": {"max_attempts": 10}}, -- per-queue policy
 *     "queue_pattern": "orders\\.work\\.[a-z]+"       -- and/or queues admitted
 *   }
 *
 * Where a message may go back. x-death is a header: a publisher that may
 * write the route's ingress can write one naming any queue, and the bridge
 * would deliver into it with its own permissions. Nothing the broker
 * validates tells a dead-letter from such a forgery (RabbitMQ keeps a
 * client's x-death as it came), and the broker cannot be asked which queue
 * dead-letters where (a policy or an argument, visible only to the
 * management API). So the route names its queues: the keys of "queues",
 * and "queue_pattern", matched against the whole name. One of the two is
 * required; a claim outside them is parked (retry_admits, retry.h).
 *
 * A per-queue entry starts from the route's policy (whatever order the
 * keys come in), so it names only what differs. Every range is checked
 * against the route's max_delay_ms, which route_limits() has read before.
 */
#include "config_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

/* A number lo..hi (an integer or a fraction). Absent: *out untouched. */
static int get_double(struct ctx *x, json_object *o, const char *pre, const char *key,
                      double lo, double hi, double *out)
{
    json_object *v;
    char path[320], got[96];

    if (!json_object_object_get_ex(o, key, &v))
        return 0;
    cfg_join(path, sizeof path, pre, key);
    if (json_object_get_type(v) == json_type_int || json_object_get_type(v) == json_type_double) {
        double d = json_object_get_double(v);
        if (isfinite(d) && d >= lo && d <= hi) {
            *out = d;
            return 0;
        }
    }
    return cfg_fail(x, path, "expected a number %g..%g, got %s", lo, hi,
                    cfg_show(v, got, sizeof got));
}

/* The policy keys of o over *p (already holding the defaults or the route's). */
static int parse_policy(struct ctx *x, json_object *o, const char *pre, uint64_t max_delay_ms,
                        struct config_retry_policy *p)
{
    static const char *const jitters[] = { "none", "full", "equal", NULL };
    char path[320];
    int choice = -1;

    if (cfg_get_int(x, o, pre, "initial_ms", 1, (int64_t)max_delay_ms, &p->initial_ms) < 0 ||
        get_double(x, o, pre, "multiplier", 1.0, 100.0, &p->multiplier) < 0 ||
        cfg_get_int(x, o, pre, "max_ms", 1, (int64_t)max_delay_ms, &p->max_ms) < 0 ||
        cfg_get_u32(x, o, pre, "max_attempts", 1, &p->max_attempts) < 0 ||
        cfg_get_choice(x, o, pre, "jitter", jitters, "\"none\", \"full\" or \"equal\"",
                       &choice) < 0)
        return -1;
    if (choice >= 0)
        p->jitter = (enum retry_jitter)choice;
    if (p->max_attempts > CONFIG_RETRY_MAX_ATTEMPTS) {
        cfg_join(path, sizeof path, pre, "max_attempts");
        return cfg_fail(x, path, "expected an integer 1..%d, got %u", CONFIG_RETRY_MAX_ATTEMPTS,
                        p->max_attempts);
    }
    if (p->max_ms < p->initial_ms) {
        cfg_join(path, sizeof path, pre, "max_ms");
        return cfg_fail(x, path, "%llu is below initial_ms %llu; expected the longest one delay",
                        (unsigned long long)p->max_ms, (unsigned long long)p->initial_ms);
    }
    return 0;
}

/* "reasons": a non-empty array of distinct reason names. */
static int parse_reasons(struct ctx *x, json_object *o, const char *pre, unsigned *bits)
{
    static const char *const names[] = { "rejected", "delivery_limit", "expired", "maxlen", NULL };
    json_object *a;
    char path[320], got[96];

    if (!json_object_object_get_ex(o, "reasons", &a))
        return 0;
    cfg_join(path, sizeof path, pre, "reasons");
    if (json_object_get_type(a) != json_type_array || json_object_array_length(a) == 0)
        return cfg_fail(x, path, "expected a non-empty array of \"rejected\", \"delivery_limit\", "
                        "\"expired\", \"maxlen\", got %s", cfg_show(a, got, sizeof got));
    *bits = 0;
    for (size_t i = 0; i < json_object_array_length(a); i++) {
        json_object *v = json_object_array_get_idx(a, i);
        const char *s = json_object_get_type(v) == json_type_string ? json_object_get_string(v)
                                                                     : NULL;
        int k = -1;
        for (int j = 0; s && names[j]; j++)
            if (strcmp(s, names[j]) == 0)
                k = j;
        snprintf(path, sizeof path, "%.200s.reasons[%zu]", pre, i);
        if (k < 0)
            return cfg_fail(x, path, "expected \"rejected\", \"delivery_limit\", \"expired\" or "
                            "\"maxlen\", got %s", cfg_show(v, got, sizeof got));
        if (*bits & (1u << k))
            return cfg_fail(x, path, "\"%s\" is listed twice", names[k]);
        *bits |= 1u << k;
    }
    return 0;
}

/* "queues": {"NAME": {policy keys}, ...}, each over the route's policy. */
static int parse_queues(struct ctx *x, json_object *o, const char *pre, uint64_t max_delay_ms,
                        struct config_retry *rt)
{
    json_object *q;
    char path[600], got[96];

    if (!json_object_object_get_ex(o, "queues", &q))
        return 0;
    cfg_join(path, sizeof path, pre, "queues");
    if (json_object_get_type(q) != json_type_object)
        return cfg_fail(x, path, "expected an object of queue name: policy, got %s",
                        cfg_show(q, got, sizeof got));
    int n = json_object_object_length(q);
    if (n > CONFIG_RETRY_MAX_QUEUES)
        return cfg_fail(x, path, "%d entries; at most %d", n, CONFIG_RETRY_MAX_QUEUES);
    rt->queues = xmalloc((size_t)(n ? n : 1) * sizeof *rt->queues);
    json_object_object_foreach(q, name, v) {
        struct config_retry_queue *e = &rt->queues[rt->nqueues];
        snprintf(path, sizeof path, "%.200s.queues.%.255s", pre, name);
        if (name[0] == '\0' || strlen(name) > CONFIG_NAME_MAX)
            return cfg_fail(x, path, "expected a queue name of 1..%d bytes", CONFIG_NAME_MAX);
        if (json_object_get_type(v) != json_type_object)
            return cfg_fail(x, path, "expected an object of policy keys, got %s",
                            cfg_show(v, got, sizeof got));
        if (cfg_check_sect(x, v, path, CONFIG_SECT_POLICY) < 0)
            return -1;
        memcpy(e->queue, name, strlen(name) + 1);
        e->policy = rt->policy;
        if (parse_policy(x, v, path, max_delay_ms, &e->policy) < 0)
            return -1;
        rt->nqueues++;
    }
    return 0;
}

/*
 * "queue_pattern": a POSIX extended regular expression, compiled anchored
 * at both ends (a pattern "orders\\..*" admits "orders.x", not
 * "payments.orders.x").
 */
static int parse_pattern(struct ctx *x, json_object *o, const char *pre, struct config_retry *rt)
{
    char path[320], anchored[CONFIG_PATTERN_MAX + 8], err[160];
    int rc;

    if ((rc = cfg_get_str(x, o, pre, "queue_pattern", OPTIONAL | NONEMPTY, rt->queue_pattern,
                          CONFIG_PATTERN_MAX)) <= 0)
        return rc;
    cfg_join(path, sizeof path, pre, "queue_pattern");
    snprintf(anchored, sizeof anchored, "^(%s)$", rt->queue_pattern);
    rt->queue_re = xmalloc(sizeof *rt->queue_re);
    if ((rc = regcomp(rt->queue_re, anchored, REG_EXTENDED | REG_NOSUB)) != 0) {
        regerror(rc, rt->queue_re, err, sizeof err);
        free(rt->queue_re);
        rt->queue_re = NULL;
        return cfg_fail(x, path, "not a POSIX extended regular expression: %s", err);
    }
    return 0;
}

/*
 * The keys a retry route may not have, the schema's NO_RETRY rows: each
 * named with what replaces it (a row without a reason here gets a plain one).
 */
static int refuse_route_keys(struct ctx *x, json_object *o, const char *pre)
{
    static const struct cfg_refusal no[] = {
        {"target_exchange", "a retry route sends each message back to the queue it failed in, "
                            "through the default exchange; leave target_exchange out"},
        {"declare_target", "a retry route has no target exchange to declare"},
        {"target_type", "a retry route has no target exchange"},
        {"invalid_delay", "a retry route parks what it cannot retry in retry.parking_exchange"},
        {"dead_letter_exchange", "a retry route parks in retry.parking_exchange"},
        {"unroutable_exchange", "a retry route parks a message whose queue is gone in "
                                "retry.parking_exchange"},
        {"delay_from", "a retry route's delays come from retry's policy, counted from the "
                       "bridge's receipt"},
    };
    return cfg_refuse_flagged(x, o, pre, CONFIG_KEY_NO_RETRY, "retry", no, sizeof no / sizeof no[0],
                              "a retry route has no such key");
}

int cfg_route_is_retry(json_object *o)
{
    return json_object_object_get_ex(o, "retry", NULL);
}

int cfg_parse_route_retry(struct ctx *x, struct config_route *r, json_object *o, const char *pre)
{
    json_object *v;
    char path[320], got[96];
    struct config_retry *rt;

    if (!json_object_object_get_ex(o, "retry", &v))
        return 0;
    if (refuse_route_keys(x, o, pre) < 0)
        return -1;
    cfg_join(path, sizeof path, pre, "retry");
    if (json_object_get_type(v) != json_type_object)
        return cfg_fail(x, path, "expected an object, got %s", cfg_show(v, got, sizeof got));
    if (r->queue_type == QUEUE_STREAM)
        return cfg_fail(x, path, "a retry route's ingress cannot be a stream: dead-lettering "
                        "publishes into it, and a stream is read, never emptied; use classic "
                        "or quorum");
    if (cfg_check_sect(x, v, path, CONFIG_SECT_RETRY) < 0)
        return -1;
    rt = r->retry = xmalloc(sizeof *rt);
    memset(rt, 0, sizeof *rt);
    rt->policy = (struct config_retry_policy){1000, 2.0, 3600000, RETRY_JITTER_NONE, 5};
    if (rt->policy.max_ms > r->max_delay_ms)
        rt->policy.max_ms = r->max_delay_ms;
    if (rt->policy.initial_ms > rt->policy.max_ms)
        rt->policy.initial_ms = rt->policy.max_ms;
    rt->reasons = RETRY_REASON_REJECTED | RETRY_REASON_DELIVERY_LIMIT;
    if (parse_policy(x, v, path, r->max_delay_ms, &rt->policy) < 0 ||
        parse_reasons(x, v, path, &rt->reasons) < 0 ||
        cfg_get_str(x, v, path, "parking_exchange", REQUIRED | NONEMPTY, rt->parking_exchange,
                    CONFIG_NAME_MAX) < 0 ||
        cfg_get_str(x, v, path, "parking_queue", OPTIONAL, rt->parking_queue,
                    CONFIG_NAME_MAX) < 0 ||
        parse_queues(x, v, path, r->max_delay_ms, rt) < 0 ||
        parse_pattern(x, v, path, rt) < 0)
        return -1;
    if (rt->nqueues == 0 && !rt->queue_re)
        return cfg_fail(x, path, "expected \"queues\" or \"queue_pattern\": a retry route "
                        "sends a message back only to a queue it names (x-death is a header a "
                        "publisher can write); README, \"Retries with backoff\"");

    snprintf(path, sizeof path, "%.200s.retry.parking_exchange", pre);
    if (strcmp(rt->parking_exchange, r->ingress_exchange) == 0)
        return cfg_fail(x, path, "same as ingress_exchange: a parked message would be retried "
                        "again; expected an exchange of its own");
    if (cfg_reserved(rt->parking_exchange) && rt->parking_queue[0])
        return cfg_fail(x, path, "RabbitMQ refuses to declare \"amq.\" exchanges; leave "
                        "parking_queue out or rename parking_exchange");
    snprintf(path, sizeof path, "%.200s.retry.parking_queue", pre);
    if (rt->parking_queue[0] && (cfg_reserved(rt->parking_queue) ||
                                 strcmp(rt->parking_queue, r->ingress_queue) == 0))
        return cfg_fail(x, path, "expected a queue of its own, not \"amq.\" and not the "
                        "ingress_queue");

    /* What the dead-letter and unroutable paths read: both park. */
    r->target_exchange[0] = '\0';
    r->invalid_delay = INVALID_DELAY_DEAD_LETTER;
    memcpy(r->dead_letter_exchange, rt->parking_exchange, sizeof r->dead_letter_exchange);
    memcpy(r->unroutable_exchange, rt->parking_exchange, sizeof r->unroutable_exchange);
    return 0;
}

void cfg_free_route_retry(struct config_route *r)
{
    if (!r->retry)
        return;
    free(r->retry->queues);
    if (r->retry->queue_re) {
        regfree(r->retry->queue_re);
        free(r->retry->queue_re);
    }
    free(r->retry);
    r->retry = NULL;
}
