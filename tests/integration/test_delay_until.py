#!/usr/bin/python3
"""An absolute due time: x-delay-until (RFC 3339 text, epoch ms as a signed
or unsigned 64-bit integer, an AMQP timestamp in seconds) and
x-opt-delivery-time (epoch ms) are honoured to the ms, take precedence over
x-delay (which takes precedence over x-opt-delivery-delay, the relative
AMQP 1.0 annotation, read like it), mean "at once" in the past, and follow the route's invalid_delay
policy when unreadable or beyond max_delay_ms (dead-lettered with their own
x-delay-error). /pending shows the due time asked for, the same after a
restart, and nothing arrives before it. Also the values clients send for
x-delay: decimal text ("1500.5", " 1.5e3 ") and py-amqp's signed 'L' read
unsigned by rabbitmq-c."""

import datetime
import json
import time

import harness as h
from harness import check

MAX_DELAY_MS = 60000


def rfc3339(epoch_ms, offset_min=0):
    tz = datetime.timezone(datetime.timedelta(minutes=offset_min))
    d = datetime.datetime.fromtimestamp(epoch_ms / 1000.0, tz)
    return d.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def test(ctx):
    target, tq = ctx.target("target", "direct", ["rk"])
    dlx, dq = ctx.target("dlx", "fanout", [""])
    c = ctx.consumer([tq["rk"], dq[""]])
    route = ctx.route("until", target, max_delay_ms=MAX_DELAY_MS, invalid_delay="dead-letter",
                      dead_letter_exchange=dlx)
    port = h.free_port()
    b = ctx.bridge([route], http={"listen": "127.0.0.1:%d" % port})
    ingress = route["ingress_exchange"]
    p = ctx.publisher()

    # epoch ms of the monotonic clock's zero, to compare due times with arrivals
    wall0 = time.time() - time.monotonic()
    now_ms = int(time.time() * 1000)
    base = now_ms + 4000  # due times ~4 s ahead: a restart fits before them
    # message id -> (headers, expected: ("due", epoch ms) | ("now",) | ("dlx", error) | ("delay", ms))
    cases = {
        "rfc3339-z": ({"x-delay-until": h.lstr(rfc3339(base + 10))}, ("due", base + 10)),
        "rfc3339-offset": ({"x-delay-until": h.lstr(rfc3339(base + 20, -330))}, ("due", base + 20)),
        "ms-i64": ({"x-delay-until": h.i64(base + 30)}, ("due", base + 30)),
        "ms-u64": ({"x-delay-until": h.u64(base + 40)}, ("due", base + 40)),
        "ms-text": ({"x-delay-until": h.lstr("%d.25" % (base + 50))}, ("due", base + 51)),
        "timestamp": ({"x-delay-until": h.tstamp(base // 1000 + 1)}, ("due", (base // 1000 + 1) * 1000)),
        "delivery-time": ({"x-opt-delivery-time": h.i64(base + 60)}, ("due", base + 60)),
        # x-delay-until wins over x-delay (and over x-opt-delivery-time)
        "precedence": ({"x-delay": h.i32(100), "x-delay-until": h.i64(base + 70),
                        "x-opt-delivery-time": h.i64(base + 50000)}, ("due", base + 70)),
        "past": ({"x-delay-until": h.lstr(rfc3339(now_ms - 3600 * 1000)), "x-delay": h.i32(50000)},
                 ("now",)),
        "seconds-as-ms": ({"x-delay-until": h.i64(now_ms // 1000 + 5)},
                          ("dlx", "invalid x-delay-until")),
        "unreadable": ({"x-delay-until": h.lstr("tomorrow 8am")}, ("dlx", "invalid x-delay-until")),
        "too-far": ({"x-delay-until": h.i64(now_ms + MAX_DELAY_MS + 600000)},
                    ("dlx", "x-delay-until beyond max_delay_ms")),
        "dt-too-far": ({"x-opt-delivery-time": h.i64(now_ms + MAX_DELAY_MS + 600000)},
                       ("dlx", "x-opt-delivery-time beyond max_delay_ms")),
        # x-opt-delivery-delay (AMQP 1.0, relative ms, a long as RabbitMQ 4 hands it over)
        "delivery-delay": ({"x-opt-delivery-delay": h.i64(1500)}, ("delay", 1500)),
        # x-delay beside it wins (the plugin's header before AMQP 1.0's)
        "dd-precedence": ({"x-opt-delivery-delay": h.i64(50000), "x-delay": h.i32(1200)},
                          ("delay", 1200)),
        "dd-too-big": ({"x-opt-delivery-delay": h.i64(MAX_DELAY_MS + 1)},
                       ("dlx", "x-opt-delivery-delay above max_delay_ms")),
        # x-delay as clients send it
        "decimal-text": ({"x-delay": h.lstr("1500.5")}, ("delay", 1500)),
        "exp-text": ({"x-delay": h.lstr(" 1.5e3 ")}, ("delay", 1500)),
        "pyamqp-negative-L": ({"x-delay": h.u64((1 << 64) - 5000)}, ("now",)),
        "php-inf": ({"x-delay": h.lstr("INF")}, ("dlx", "invalid x-delay")),
    }
    sent = {}
    for mid, (hdrs, _) in cases.items():
        hdrs = dict(hdrs)
        hdrs["app"] = h.lstr("kept")
        sent[mid] = p.publish(ingress, "rk", mid.encode(), headers=hdrs, message_id=mid)

    # /pending shows the due time asked for
    def pending():
        st, body = h.http_get(port, "/pending?route=until&limit=1000")
        check(st == 200, "/pending: HTTP %s" % st)
        return {m["message_id"]: m for m in json.loads(body)["messages"]}

    held = [mid for mid, (_, e) in cases.items() if e[0] == "due"]
    deadline = time.monotonic() + 5
    while True:
        pend = pending()
        if all(mid in pend for mid in held) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    for mid in held:
        check(mid in pend, "%s not in /pending: %s" % (mid, sorted(pend)))
        check(pend[mid]["due_ms"] == cases[mid][1][1],
              "%s: /pending due_ms %s, asked for %s" % (mid, pend[mid]["due_ms"], cases[mid][1][1]))
    h.log("/pending shows the %d due times asked for, e.g. %s" % (len(held), pend["rfc3339-offset"]["due"]))

    inv = h.stats(port)["routes"][0]["invalid_delay"]
    check(inv == 6, "invalid_delay counted %s, want 6" % inv)

    # a restart keeps them (the due time is what the WAL stores)
    b.stop()
    b.start()
    pend = pending()
    for mid in held:
        check(mid in pend and pend[mid]["due_ms"] == cases[mid][1][1],
              "%s after a restart: %r, asked for %s" % (mid, pend.get(mid), cases[mid][1][1]))
    h.log("after a restart: the same due times")

    msgs = c.wait_ids(list(cases), max(base - time.time() * 1000, 0) / 1000.0 + h.late_tolerance() + 8)
    by_id = {m.message_id: m for m in msgs}
    failures = []
    for mid, (_, e) in cases.items():
        m = by_id[mid]
        arrived_ms = (m.t + wall0) * 1000
        err = h.header(m.props, "x-delay-error")
        app = h.header(m.props, "app")
        line = "%-18s -> %s at %+.0f ms of publish, x-delay-error %r" % (
            mid, "dlx" if m.queue == dq[""] else "target", arrived_ms - (sent[mid] + wall0) * 1000,
            err.value if err else None)
        h.log(line)
        if app is None or app.value != b"kept":
            failures.append("%s: header app not kept: %r" % (mid, app))
        if m.routing_key != "rk":
            failures.append("%s: routing key %r" % (mid, m.routing_key))
        if e[0] == "dlx":
            if m.queue != dq[""] or err is None or err.value.decode() != e[1]:
                failures.append("%s: expected the DLX with x-delay-error %r: %s" % (mid, e[1], line))
            continue
        if m.queue != tq["rk"] or err is not None:
            failures.append("%s: expected the target without x-delay-error: %s" % (mid, line))
        problem = h.arrival_problem(m, sent[mid], e, wall0)
        if problem:
            failures.append(problem)
    h.fail_problems(c, len(cases), failures)
    b.stop()


if __name__ == "__main__":
    h.run(test, budget_s=120)
