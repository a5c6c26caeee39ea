#!/usr/bin/python3
"""Plugin compatibility, checked against the plugin itself.

    test_plugin_compat.py [bridge]   the checks against delay-bridge on the suite's broker
    test_plugin_compat.py plugin     the same checks against the delayed-message plugin
                                     4.0.7 on a RabbitMQ 4.0.5 node of this test's own

What a publisher moving from the plugin sees: one message per check through
the same publish (pika, confirms, not mandatory: the plugin's exchange
returns every mandatory message it delays), a 0-9-1 consumer of the target,
and per check an observation: delayed (arrived no earlier than the delay) or
at once, the x-delay the consumer sees, headers and properties kept, the
order of due times and of equal ones, the routing key through a topic
target. For the bridge the target is a route's target exchange; for the
plugin, an exchange of type x-delayed-message (x-delayed-type fanout) named
like the route's ingress, with the target bound to it (exchange to
exchange), so both deliver through the same target and queues.

EXPECTED holds, for every check, what both do, or what each does and why
they differ; README "Plugin compatibility" says the same for users. Each
mode fails when what it saw is not what EXPECTED says of it: a changed
plugin or bridge shows up as a failing check, with both columns printed.

The plugin's source is not in this repository: the reference mode builds it
on first use and skips (77) when its source or the 4.0 root is missing
(tests/integration/plugin_node.py says where it looks and how to put it
there). The plugin runs on 4.0 only (it needs Mnesia, which 4.3 no longer
has), so the reference mode always uses 4.0.5, whatever DB_RABBITMQ says;
the bridge mode runs on the suite's broker (every version of the matrix).
"""

import sys
import time

import pika
from pika.exceptions import AMQPError

import harness as h
import harness_plugin as hp
from harness import check

import plugin_node as pn
from plugin_node import PLUGIN_VSN, RABBITMQ_VSN

D = 1500  # the delay of most checks, ms

# --------------------------------------------------------------------------
# The checks
# --------------------------------------------------------------------------

# One message each: (id, x-delay as sent or None, the delay it means in ms)
DELAYS = [
    ("int8", h.i8(120), 120),
    ("uint8", h.u8(200), 200),
    ("int16", h.i16(D), D),
    ("uint16", h.u16(D), D),
    ("int32", h.i32(D), D),
    ("uint32", h.u32(D), D),
    ("int64", h.i64(D), D),
    ("uint64", h.u64(D), D),
    ("float32", h.f32(D + 0.75), D),
    ("float64", h.f64(D + 0.9), D),
    ("decimal", h.dec(1, D * 10 + 9), D),
    ("string", h.lstr(str(D)), D),
    ("string-float", h.lstr("%d.5" % D), D),
    ("bytes", h.raw_bytes(str(D).encode()), D),
    ("bool", h.boolean(True), D),
    ("string-abc", h.lstr("abc"), D),
    ("missing", None, 0),
    ("zero", h.i32(0), 0),
    ("negative-int32", h.i32(-1000), 0),
    ("negative-int64", h.i64(-2 ** 40), 0),
    ("negative-float", h.f64(-250.5), 0),
    ("negative-string", h.lstr("-250"), 0),
    ("above-2^32-1", h.i64(2 ** 32), 2 ** 32),
]

# Headers of every kind and every basic property, on a message delayed 500 ms.
HEADERS = {
    "nested": h.table({"level": h.i32(1), "list": h.array([h.i8(1), h.lstr("x")])}),
    "array": h.array([h.i32(1), h.lstr("two"), h.f64(3.5), h.boolean(False)]),
    "bytes": h.raw_bytes(bytes(range(16))),
    "when": h.tstamp(1700000000),
    "yes": h.boolean(True),
    "i8": h.i8(-128), "u8": h.u8(255), "i16": h.i16(-32768), "u16": h.u16(65535),
    "i32": h.i32(-2 ** 31), "u32": h.u32(2 ** 32 - 1), "i64": h.i64(-2 ** 63),
    "u64": h.u64(2 ** 64 - 1), "f32": h.f32(1.5), "f64": h.f64(-0.25),
    "utf8": h.lstr("gr\u00fc\u00df \u2603"),
    "void": h.void(),
}
PROPS = dict(content_type="application/octet-stream", content_encoding="x-enc", delivery_mode=2,
             priority=7, correlation_id="corr-42", reply_to="replies.q", expiration="600000",
             timestamp=1700000000, type="order.closed", app_id="dbtest-app")


CRASH = "publish failed: ConnectionClosedByBroker (541, 'INTERNAL_ERROR')"
AS_SENT = "at once, x-delay as sent"


def delayed(ms, kind):
    return "delayed %d ms, x-delay %s %d" % (ms, kind, -ms)


def differ(bridge, plugin, why):
    return {"bridge": bridge, "plugin": plugin, "why": why}


# Why x-delay on delivery differs (every delayed message): README "Plugin
# compatibility", header on delivery.
WHY_KIND = ("x-delay on delivery: the bridge writes -delay as a signed 32-bit 'I' (64-bit 'l' "
            "beyond), as the plugin did up to 3.12; the plugin 4.0.7 writes a signed 64-bit 'l', "
            "which pika (1.2.0) decodes as unsigned: -1500 reads 18446744073709550116")


def expected():
    """What each check shows: a string when both alike, else differ(): the
    bridge's, the plugin's and why (README "Plugin compatibility")."""
    e = {}
    for mid, _, ms in DELAYS:
        if ms and mid not in ("above-2^32-1", "bool"):
            e[mid] = differ(delayed(ms, "I"), delayed(ms, "l"), WHY_KIND)
        else:
            e[mid] = AS_SENT
    e.update({
        "int8": differ(delayed(120, "I"), AS_SENT,
                       "the plugin 4.x reads no signed 8-bit integer (its list of integer kinds "
                       "lost 'byte' with RabbitMQ 4's message containers; 3.12 had it): at once"),
        "decimal": differ(delayed(D, "I"), CRASH,
                          "a decimal x-delay makes RabbitMQ 4.0.5 with the plugin close the "
                          "publisher's connection (541 INTERNAL_ERROR), the message lost; the bridge "
                          "truncates it"),
        "string-float": differ(delayed(D, "I"), CRASH,
                               "decimal text (php-amqplib's floats): the plugin closes the "
                               "connection as for any string that is not an integer; the bridge "
                               "truncates it"),
        "string-abc": differ(AS_SENT, CRASH,
                             "not a number: the plugin closes the publisher's connection (message "
                             "lost); the bridge applies invalid_delay (default publish: at once)"),
        "bytes": differ(AS_SENT, delayed(D, "l"),
                        "a byte array ('x', pika's bytes): the plugin 4.x reads it as text (3.12 "
                        "did not: at once); the bridge reads no byte array as a delay, "
                        "invalid_delay (default publish: at once)"),
        "headers": differ("delayed 500 ms; headers and properties kept; x-delay-bridge-id added",
                          "delayed 500 ms; headers and properties kept; x-delay-bridge-id absent",
                          "the bridge adds x-delay-bridge-id (deduplication)"),
        "due-order": "due-1000 due-2000 due-3000; delayed 1000 ms, delayed 2000 ms, delayed 3000 ms",
        "equal-due-order": "fifo-0 fifo-1 fifo-2 fifo-3 fifo-4",
        "topic": "delayed 1500 ms, routing key 'order.eu' to the #.eu queue",
    })
    return e


def fmt(field):
    return "absent" if field is None else "%s %r" % (field.kind, field.value)


# --------------------------------------------------------------------------
# Running the checks against one implementation
# --------------------------------------------------------------------------

class Sender(object):
    """Publishes with confirms, not mandatory, a connection at a time: a
    message that makes the broker close the connection (the plugin and a
    decimal x-delay) is recorded as such, and the next check reconnects."""

    def __init__(self):
        self.conn = None
        self.ch = None

    def publish(self, exchange, rk, body, headers, **props):
        """(time just before the publish, None) or (None, what went wrong)."""
        if self.conn is None or not self.conn.is_open or not self.ch.is_open:
            self.close()
            self.conn = h.connect(retry_s=10)
            self.ch = self.conn.channel()
            self.ch.confirm_delivery()
        t = time.monotonic()
        try:
            self.ch.basic_publish(exchange, rk, body, pika.BasicProperties(headers=headers, **props))
            return t, None
        except AMQPError as e:
            self.close()
            return None, "publish failed: %s" % (e.__class__.__name__ +
                                                 (" %s" % (e.args,) if e.args else ""))

    def close(self):
        try:
            if self.conn is not None and self.conn.is_open:
                self.conn.close()
        except Exception:
            pass
        self.conn = self.ch = None


def run_checks(ingress, topic_ingress, c, queues):
    """Every check through ingress (the topic one through topic_ingress);
    returns {check: observation}."""
    s = Sender()
    obs, sent = {}, {}
    # 1. x-delay of every kind, missing, invalid, too big
    for mid, xd, ms in DELAYS:
        headers = {"x-delay": xd} if xd is not None else {}
        t, err = s.publish(ingress, "rk", mid.encode(), headers, message_id=mid)
        if err:
            obs[mid] = err
        else:
            sent[mid] = (t, ms, xd)
    # 2. headers and properties, delayed 500 ms
    hd = dict(HEADERS, **{"x-delay": h.i32(500)})
    t, err = s.publish(ingress, "rk", b"props", hd, message_id="headers", **PROPS)
    if err:
        obs["headers"] = err
    else:
        sent["headers"] = (t, 500, h.i32(500))
    # 3. due order: 3000, 1000, 2000 published in that order; 5 equal due times back to back
    for ms in (3000, 1000, 2000):
        mid = "due-%d" % ms
        t, err = s.publish(ingress, "order", mid.encode(), {"x-delay": h.i32(ms)}, message_id=mid)
        if not err:
            sent[mid] = (t, ms, h.i32(ms))
    for i in range(5):
        mid = "fifo-%d" % i
        t, err = s.publish(ingress, "fifo", mid.encode(), {"x-delay": h.i32(2500)}, message_id=mid)
        if not err:
            sent[mid] = (t, 2500, h.i32(2500))
    # 4. a topic target: the routing key kept
    t, err = s.publish(topic_ingress, "order.eu", b"topic", {"x-delay": h.i32(D)}, message_id="topic")
    if err:
        obs["topic"] = err
    else:
        sent["topic"] = (t, D, h.i32(D))
    s.close()

    longest = max([ms for _, ms, _ in sent.values() if ms < 60000] + [0])
    deadline = time.monotonic() + longest / 1000.0 + h.late_tolerance() + 5
    want = set(sent)
    while time.monotonic() < deadline:
        if want.issubset({m.message_id for m in c.snapshot()}):
            break
        time.sleep(0.1)
    msgs = c.quiet(1.0)
    by_id = {}
    for m in msgs:
        by_id.setdefault(m.message_id, []).append(m)

    def arrival(mid):
        t, ms, xd = sent[mid]
        ms_ = by_id.get(mid)
        if not ms_:
            return None, "not delivered (within %.0f s)" % (longest / 1000.0 + h.late_tolerance() + 5)
        m = ms_[0]
        extra = ", delivered %d times" % len(ms_) if len(ms_) > 1 else ""
        took = (m.t - t) * 1000.0
        if ms > 0 and took >= ms - h.early_tolerance() * 1000:
            if took > ms + h.late_tolerance() * 1000:
                return m, "delayed but LATE (%.0f ms for %d)%s" % (took, ms, extra)
            return m, "delayed %d ms%s" % (ms, extra)
        if took > 1000:
            return m, "neither at once nor delayed %d ms (%.0f ms)%s" % (ms, took, extra)
        return m, "at once%s" % extra

    for mid, xd, ms in DELAYS:
        if mid in obs:
            continue
        m, what = arrival(mid)
        if m is not None:
            g = h.header(m.props, "x-delay")
            what += ", x-delay %s" % (fmt(g) if g != (h.as_delivered(xd) if xd else None) else "as sent")
        obs[mid] = what
    if "headers" not in obs:
        m, what = arrival("headers")
        if m is not None:
            got = dict(m.props.headers or {})
            got.pop("x-delay", None)
            bid = got.pop("x-delay-bridge-id", None)
            diffs = []
            for k, v in sorted(HEADERS.items()):
                g = got.pop(k, None)
                if g != h.as_delivered(v):
                    diffs.append("%s sent %s, got %s" % (k, fmt(v), fmt(g)))
            diffs += ["%s added: %s" % (k, fmt(v)) for k, v in sorted(got.items())]
            for name, v in sorted(PROPS.items()):
                if getattr(m.props, name) != v:
                    diffs.append("property %s sent %r, got %r" % (name, v, getattr(m.props, name)))
            if m.body != b"props" or m.routing_key != "rk":
                diffs.append("body %r, routing key %r" % (m.body, m.routing_key))
            what += "; headers and properties %s" % ("kept" if not diffs else "CHANGED: " + "; ".join(diffs))
            what += "; x-delay-bridge-id %s" % ("added" if bid is not None else "absent")
        obs["headers"] = what
    order = [m.message_id for m in msgs if m.message_id and m.message_id.startswith("due-")]
    late = [arrival(mid)[1] for mid in ("due-1000", "due-2000", "due-3000") if mid in sent]
    obs["due-order"] = "%s; %s" % (" ".join(order) or "none", ", ".join(sorted(set(late))))
    fifo = [m.message_id for m in msgs if m.message_id and m.message_id.startswith("fifo-")]
    obs["equal-due-order"] = " ".join(fifo) or "none"
    if "topic" not in obs:
        m, what = arrival("topic")
        if m is not None:
            what += ", routing key %r to %s" % (m.routing_key, "the #.eu queue" if m.queue == queues["#.eu"]
                                                else m.queue)
        obs["topic"] = what
    return obs


# --------------------------------------------------------------------------
# The two implementations
# --------------------------------------------------------------------------

def targets(ctx):
    """The target exchanges and queues both use: a direct one for most
    checks (keys rk, order, fifo), a topic one for the routing-key check."""
    ex, qs = ctx.target("target", "direct", ["rk", "order", "fifo"])
    tex, tqs = ctx.target("topic", "topic", ["#.eu"])
    qs.update(tqs)
    return ex, tex, qs


def with_bridge(ctx):
    ex, tex, qs = targets(ctx)
    c = ctx.consumer(list(qs.values()))
    routes = [ctx.route("compat", ex), ctx.route("compat-topic", tex, target_type="topic")]
    ctx.bridge(routes)
    return routes[0]["ingress_exchange"], routes[1]["ingress_exchange"], c, qs


def with_plugin(ctx):
    ex, tex, qs = targets(ctx)
    c = ctx.consumer(list(qs.values()))
    ingresses = []
    for name, target in (("compat", ex), ("compat-topic", tex)):
        ing = ctx.n(name + ".delayed")
        ctx.admin().exchange_declare(ing, exchange_type="x-delayed-message", durable=True,
                                     arguments={"x-delayed-type": "fanout"})
        ctx.exchanges.add(ing)
        ctx.admin().exchange_bind(target, ing, routing_key="")
        ingresses.append(ing)
    return ingresses[0], ingresses[1], c, qs


# --------------------------------------------------------------------------

def test(ctx, mode):
    exp = expected()
    if mode == "plugin":
        node = hp.PluginNode(ctx, "4.0", [pn.plugin_dir()], [pn.PLUGIN_APP])
        try:
            with hp.OnNode(ctx, node):
                h.log("reference: the delayed-message plugin %s on RabbitMQ %s at %s" % (
                    PLUGIN_VSN, h.broker_version(node.uri), h.mask_uri(node.uri)))
                check(h.broker_version(node.uri) == RABBITMQ_VSN, "the reference node is not "
                      "RabbitMQ %s" % RABBITMQ_VSN)
                ingress, topic_ingress, c, qs = with_plugin(ctx)
                obs = run_checks(ingress, topic_ingress, c, qs)
        finally:
            node.stop()
    else:
        ingress, topic_ingress, c, qs = with_bridge(ctx)
        obs = run_checks(ingress, topic_ingress, c, qs)
    other = "bridge" if mode == "plugin" else "plugin"
    failures, rows, told = [], [], set()
    for name in sorted(obs):
        e = exp.get(name)
        want = e if isinstance(e, str) or e is None else e[mode]
        ok = want is not None and obs[name] == want
        rows.append("%-3s %-16s %s%s" % ("ok" if ok else "!!", name, obs[name],
                                          "" if isinstance(e, str) or e is None else
                                          "\n%21s%s: %s\n%21swhy: %s" % (
                                              "", other, e[other], "",
                                              "as above" if e["why"] in told else e["why"])))
        if not isinstance(e, (str, type(None))):
            told.add(e["why"])
        if not ok:
            failures.append("%s: saw %r, expected %r" % (name, obs[name], want))
    h.log("%s: %d checks\n  %s" % (mode, len(obs), "\n  ".join(rows)))
    if failures:
        h.fail("%d check(s) not as EXPECTED says of the %s:\n  %s" % (len(failures), mode,
                                                                     "\n  ".join(failures)))


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "bridge"
    if mode not in ("bridge", "plugin"):
        sys.stderr.write("usage: test_plugin_compat.py [bridge|plugin]\n")
        sys.exit(2)
    if mode == "plugin":
        sys.argv[0] = "test_plugin_compat_reference"
    h.run(lambda ctx: test(ctx, mode), budget_s=240)
