#!/usr/bin/python3
"""The shim (deploy/plugin, app rabbitmq_delay_bridge_exchange) on the suite's
broker line (DB_RABBITMQ: 3.10, 4.0 or 4.3), as an application written for
the delayed-message plugin meets it. No bridge runs here: what is checked is
where the shim routes each message (the bridge's side, consuming
delay-bridge.delayed, is another test's).

It builds the shim for the line (deploy/plugin/build.sh, cached under
/var/cache/delay-bridge/shim-<version>/), runs its unit cases of the delay
rules under that broker's own Erlang, and starts a node of its own with the
shim's .ez enabled (harness_plugin.PluginNode, the mechanism
test_plugin_compat.py's reference mode uses for the real plugin). Then:

  declarations  x-delayed-message exchanges of x-delayed-type direct, topic,
                fanout and headers: declared, redeclared, passively
                redeclared; a missing x-delayed-type, x-delayed-message
                itself refused with the plugin's 406, another x-delayed-type
                on a redeclare accepted as the plugin does (it checks no
                argument but alternate-exchange), the exchange unchanged; the
                queue delay-bridge.delayed exists once an exchange does,
                durable, classic, with the arguments the bridge declares it
                with (the bridge's declare is accepted)
  routing       per type, every x-delay of test_plugin_compat's DELAYS table:
                what the plugin delayed lands in delay-bridge.delayed with
                the delivery's exchange = the delayed exchange and its
                routing key, headers as sent; what the plugin routed at once
                is routed by the type at once, to the bound queue only
                (SHIM_DIFFERS: where the shim follows the bridge's reading
                instead, and why); then x-delay-bridge-id (no loop),
                x-delay-until (past, future, RFC 3339, timestamp, past beside
                a positive x-delay), x-opt-delivery-time, x-opt-delivery-delay
                as headers; on 4.x the AMQP 1.0 annotations from a 1.0 client
  vhosts        an exchange in another vhost gets that vhost's queue
  restart       durable exchanges, the queue and its persistent messages
                survive a broker restart and route the same after it; the
                queue deleted, then a restart: the boot step declares it
  enabled       disabled and enabled again on the running node (rabbitmq-
                plugins): the queue, deleted meanwhile, is declared at once
                and the exchanges route as before
  queue deleted a delayed mandatory publish after someone deleted the queue:
                the shim declares it again and the message is in it (not
                returned, not dropped); when it cannot (the vhost's
                max-queues limit 0), the mandatory publish is returned
"""

import datetime
import os
import shutil
import tempfile
import time

import pika

import harness as h
import harness_plugin as hp
import test_plugin_compat as compat
from harness import check

APP = "rabbitmq_delay_bridge_exchange"
QUEUE = "delay-bridge.delayed"
TOP = os.path.dirname(os.path.dirname(h.HERE))
BUILD_SH = os.path.join(TOP, "deploy", "plugin", "build.sh")

# per x-delayed-type: (routing key published with, binding of the main queue, of a decoy
# queue that must get nothing, extra headers published)
TYPES = {
    "direct": ("rk", ("rk", None), ("other", None), {}),
    "topic": ("order.eu", ("#.eu", None), ("#.us", None), {}),
    "fanout": ("anything", ("", None), None, {}),
    "headers": ("rk", ("", {"x-match": "all", "kind": "a"}), ("", {"x-match": "all", "kind": "b"}),
                {"kind": "a"}),
}


def shim_differs(line):
    """Where the shim does not do what the plugin 4.0.7 did (its column of
    test_plugin_compat.expected()): check -> (what the shim does, why)."""
    d = {
        "int8": ("delayed", "a signed 8-bit x-delay: the plugin 4.x reads none (3.12 did), the "
                            "bridge does, and the shim sends what the bridge reads as a delay"),
        "string-float": ("delayed", "decimal text: the plugin closes the publisher's connection, "
                                    "the bridge truncates it (1500.5 -> 1500 ms)"),
        "string-abc": ("at once", "not a number: the plugin closes the publisher's connection, "
                                  "the shim routes it at once"),
        "bytes": ("at once", "a byte array: the plugin 4.x reads it as text, the bridge reads no "
                             "byte array as a delay, so the shim routes it at once"),
    }
    if line.startswith("3."):
        d["decimal"] = ("delayed", "a decimal x-delay: the plugin 4.x closes the publisher's "
                                   "connection; RabbitMQ 3.10 hands it to the shim, truncated")
    else:
        d["decimal"] = ("at once", "a decimal x-delay: RabbitMQ 4.x cannot convert it (mc); with "
                                   "the plugin the publisher's connection closes, the shim routes "
                                   "it at once")
    return d


def plugin_column(mid):
    e = compat.expected()[mid]
    return e if isinstance(e, str) else e["plugin"]


def delay_cases(line):
    """[(check, x-delay field or None, "delayed" | "at once")], from
    test_plugin_compat.DELAYS and the plugin's column of its EXPECTED."""
    differs = shim_differs(line)
    out = []
    for mid, xd, _ms in compat.DELAYS:
        p = plugin_column(mid)
        if mid in differs:
            want = differs[mid][0]
        elif p.startswith("delayed"):
            want = "delayed"
        elif p == compat.AS_SENT:
            want = "at once"
        else:
            h.fail("check %s: the plugin's column says %r and SHIM_DIFFERS nothing" % (mid, p))
        out.append((mid, xd, want))
    return out


def header_cases(now_ms):
    """Beyond x-delay: (check, headers, want)."""
    rfc = datetime.datetime.fromtimestamp(now_ms / 1000.0 + 3600, datetime.timezone.utc)
    return [
        ("bridge-id", {"x-delay": h.i32(5000), "x-delay-bridge-id": h.lstr("shim-test:1")}, "at once"),
        ("until-past", {"x-delay-until": h.i64(now_ms - 60000)}, "at once"),
        ("until-past-beside-x-delay", {"x-delay-until": h.i64(now_ms - 60000),
                                       "x-delay": h.i32(5000)}, "at once"),
        ("until-future", {"x-delay-until": h.i64(now_ms + 3600000)}, "delayed"),
        ("until-rfc3339", {"x-delay-until": h.lstr(rfc.strftime("%Y-%m-%dT%H:%M:%S.000Z"))}, "delayed"),
        ("until-timestamp", {"x-delay-until": h.tstamp(now_ms // 1000 + 3600)}, "delayed"),
        ("until-garbage", {"x-delay-until": h.lstr("soon"), "x-delay": h.i32(5000)}, "at once"),
        ("delivery-time", {"x-opt-delivery-time": h.i64(now_ms + 3600000)}, "delayed"),
        ("delivery-time-past", {"x-opt-delivery-time": h.i64(now_ms - 1000)}, "at once"),
        ("delivery-delay", {"x-opt-delivery-delay": h.i64(5000)}, "delayed"),
        ("delivery-delay-zero", {"x-opt-delivery-delay": h.i64(0)}, "at once"),
    ]


# --------------------------------------------------------------------------

def build(line):
    r = hp.run_cmd(["bash", BUILD_SH, line], timeout=600)
    if r.returncode == 77:
        raise h.Skip("cannot build the shim for RabbitMQ %s here: %s" % (line, r.stdout.strip()))
    check(r.returncode == 0, "build.sh %s failed (%d):\n%s" % (line, r.returncode, r.stdout))
    ez = r.stdout.strip().splitlines()[-1]
    check(ez.endswith(".ez") and os.path.exists(ez), "build.sh printed no .ez: %r" % r.stdout)
    return ez


def unit_cases(line, ez):
    """The shim's unit cases (deploy/plugin/test) under the broker's Erlang."""
    out = os.path.dirname(ez)
    ebin = [d for d in os.listdir(out) if d.startswith(APP + "-") and not d.endswith(".ez")][0]
    root = hp.root_of(hp.broker_bin_dir(line))
    work = tempfile.mkdtemp(prefix="dbt-shim-unit.", dir=(root + "/tmp") if root else None)
    try:
        shutil.copytree(os.path.join(out, "test"), os.path.join(work, "test"))
        shutil.copytree(os.path.join(out, ebin), os.path.join(work, "ebin"))
        sh = ("cd %s && HOME=/tmp erl -noshell -pa test -pa ebin/ebin "
              "-s rabbit_exchange_type_delay_bridge_tests run" % work[len(root):])
        cmd = ["chroot", root, "/bin/sh", "-c", sh] if root else ["/bin/sh", "-c", sh]
        r = hp.run_cmd(cmd, timeout=120)
        h.log("unit cases of the delay rules:\n" + r.stdout.rstrip())
        check(r.returncode == 0, "the shim's unit cases failed (%d)" % r.returncode)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def channel(node):
    conn = h.connect(retry_s=30, uri=node.uri)
    ch = conn.channel()
    ch.confirm_delivery()
    return conn, ch


def refused(node, fn):
    """Run fn(channel); returns the channel.close (connection.close) reply as "CODE text", or None."""
    conn = h.connect(retry_s=10, uri=node.uri)
    try:
        fn(conn.channel())
        return None
    except (pika.exceptions.ChannelClosedByBroker, pika.exceptions.ConnectionClosedByBroker) as e:
        return "%d %s" % (e.reply_code, e.reply_text)  # 3.10: an unknown type closes the connection
    finally:
        if conn.is_open:
            conn.close()


def publish(ch, ex, rk, mid, headers, persistent=False):
    """Mandatory, with confirms: "ok" or "returned"."""
    try:
        ch.basic_publish(ex, rk, mid.encode(), pika.BasicProperties(
            message_id=mid, headers=headers, delivery_mode=2 if persistent else None), mandatory=True)
        return "ok"
    except pika.exceptions.UnroutableError:
        return "returned"


def drain(node, queue, vhost_uri=None):
    """Every message in queue (taken): {message_id: (exchange, routing key, props)}."""
    conn = h.connect(retry_s=10, uri=vhost_uri or node.uri)
    try:
        ch = conn.channel()
        got = {}
        while True:
            method, props, _body = ch.basic_get(queue, auto_ack=True)
            if method is None:
                return got
            got[props.message_id] = (method.exchange, method.routing_key, props)
    finally:
        conn.close()


def queue_depth(node, queue):
    conn = h.connect(retry_s=10, uri=node.uri)
    try:
        return conn.channel().queue_declare(queue, passive=True).method.message_count
    finally:
        conn.close()


class Topology(object):
    """Per type an x-delayed-message exchange, its main queue and a decoy."""

    def __init__(self, ctx, ch):
        self.ex, self.main, self.decoy = {}, {}, {}
        for t, (_rk, (mkey, margs), decoy, _extra) in sorted(TYPES.items()):
            x = ctx.n("x." + t)
            ch.exchange_declare(x, "x-delayed-message", durable=True,
                                arguments={"x-delayed-type": t})
            self.ex[t] = x
            self.main[t] = ctx.n("q." + t)
            ch.queue_declare(self.main[t], durable=True)
            ch.queue_bind(self.main[t], x, routing_key=mkey, arguments=margs)
            if decoy:
                self.decoy[t] = ctx.n("decoy." + t)
                ch.queue_declare(self.decoy[t], durable=True)
                ch.queue_bind(self.decoy[t], x, routing_key=decoy[0], arguments=decoy[1])

    def queues(self):
        return list(self.main.values()) + list(self.decoy.values())


def send_all(ch, topo, cases, tag, persistent=False):
    """Publish every case to every type; returns {message_id: (type, want)}."""
    sent = {}
    for t, (rk, _m, _d, extra) in sorted(TYPES.items()):
        for mid, headers, want in cases:
            hd = dict(extra)
            hd.update(headers)
            m = "%s/%s/%s" % (tag, t, mid)
            r = publish(ch, topo.ex[t], rk, m, hd, persistent)
            check(r == "ok", "%s: the publish was %s" % (m, r))
            sent[m] = (t, want)
    return sent


def verify(node, topo, c, sent):
    """Every message where it must be: "delayed" ones in delay-bridge.delayed
    with the exchange and routing key they were published with, "at once"
    ones in their type's main queue (only there). Returns the rows."""
    at_once = {m for m, (_t, w) in sent.items() if w == "at once"}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not at_once <= {x.message_id for x in c.snapshot()}:
        time.sleep(0.1)
    msgs = c.quiet(1.0)
    held = drain(node, QUEUE)
    problems, rows = [], []
    for m, (t, want) in sorted(sent.items()):
        rk = TYPES[t][0]
        arrived = [x for x in msgs if x.message_id == m]
        where = []
        if m in held:
            ex, key, _p = held.pop(m)
            where.append("delay-bridge.delayed" + ("" if (ex, key) == (topo.ex[t], rk) else
                                                   " (exchange %r, routing key %r)" % (ex, key)))
        for x in arrived:
            ok = x.queue == topo.main[t] and x.exchange == topo.ex[t] and x.routing_key == rk
            where.append("its queue" if ok else "%s (exchange %r, key %r)" % (x.queue, x.exchange,
                                                                             x.routing_key))
        saw = "delayed" if where == ["delay-bridge.delayed"] else \
            "at once" if where == ["its queue"] else ", ".join(where) or "nowhere"
        rows.append("%-3s %-40s %s" % ("ok" if saw == want else "!!", m, saw))
        if saw != want:
            problems.append("%s: %s, expected %s" % (m, saw, want))
    for m in sorted(held):
        problems.append("%s in delay-bridge.delayed, not sent by this step" % m)
    h.log("\n  ".join(["routing (%d messages):" % len(sent)] + rows))
    check(not problems, "%d message(s) not where they belong:\n  %s" % (len(problems),
                                                                      "\n  ".join(problems)))
    with c.lock:
        del c.msgs[:]


def amqp10_cases(node, topo, now_ms):
    """On 4.x: the delay as AMQP 1.0 message annotations, from a 1.0 client."""
    try:
        import proton
        from proton import Message, symbol, timestamp
        from proton.utils import BlockingConnection
    except ImportError:
        h.log("AMQP 1.0: python3-qpid-proton not installed, not checked")
        return {}
    cases = [
        ("a10-delivery-delay", {"x-opt-delivery-delay": 5000}, "delayed"),
        ("a10-delivery-delay-0", {"x-opt-delivery-delay": 0}, "at once"),
        ("a10-delivery-time", {"x-opt-delivery-time": now_ms + 3600000}, "delayed"),
        ("a10-delivery-time-ts", {"x-opt-delivery-time": timestamp(now_ms + 3600000)}, "delayed"),
        ("a10-delivery-time-past", {"x-opt-delivery-time": now_ms - 60000}, "at once"),
        ("a10-x-delay", {"x-delay": 5000}, "delayed"),
        ("a10-none", {}, "at once"),
    ]
    h.log("AMQP 1.0: qpid-proton %s" % ".".join(str(x) for x in proton.VERSION))
    conn = BlockingConnection("amqp://127.0.0.1:%d" % node.port, timeout=30, user="guest",
                              password="guest", allowed_mechs="PLAIN", allow_insecure_mechs=True)
    sent = {}
    try:
        snd = conn.create_sender("/exchanges/%s/rk" % topo.ex["direct"])
        for mid, ann, want in cases:
            m = "a10/direct/" + mid
            snd.send(Message(body=mid.encode(), inferred=True, id=m, durable=True,
                             annotations={symbol(k): v for k, v in ann.items()}), timeout=30)
            sent[m] = ("direct", want)
    finally:
        conn.close()
    return sent


def check_declarations(node, ctx, topo):
    ch_conn, ch = channel(node)
    try:
        for t, x in sorted(topo.ex.items()):
            ch.exchange_declare(x, "x-delayed-message", durable=True, arguments={"x-delayed-type": t})
            ch.exchange_declare(x, passive=True)
    finally:
        ch_conn.close()
    x = topo.ex["direct"]
    seen = {
        "inequivalent x-delayed-type": refused(node, lambda c: c.exchange_declare(
            x, "x-delayed-message", durable=True, arguments={"x-delayed-type": "topic"})),
        "no x-delayed-type": refused(node, lambda c: c.exchange_declare(
            ctx.n("x.none"), "x-delayed-message", durable=True)),
        "x-delayed-type x-delayed-message": refused(node, lambda c: c.exchange_declare(
            ctx.n("x.self"), "x-delayed-message", durable=True,
            arguments={"x-delayed-type": "x-delayed-message"})),
        "unknown x-delayed-type": refused(node, lambda c: c.exchange_declare(
            ctx.n("x.nope"), "x-delayed-message", durable=True, arguments={"x-delayed-type": "nope"})),
    }
    h.log("\n  ".join(["declarations refused:"] + ["%-34s %s" % kv for kv in sorted(seen.items())]))
    # The plugin checks no argument on a redeclare but alternate-exchange (it
    # hands assert_args_equivalence to the type's module): the redeclare is
    # accepted and the exchange keeps its type (the routing checks below
    # run on it as a direct exchange).
    check(seen["inequivalent x-delayed-type"] is None,
          "a redeclare with another x-delayed-type was refused (the plugin accepts it): %r" % seen)
    check(seen["no x-delayed-type"] == "406 PRECONDITION_FAILED - Invalid argument, 'x-delayed-type' "
          "must be an existing exchange type", "a missing x-delayed-type: %r" % seen)
    check(seen["x-delayed-type x-delayed-message"] == "406 PRECONDITION_FAILED - Invalid argument, "
          "'x-delayed-message' can't be used for 'x-delayed-type'", "x-delayed-message: %r" % seen)
    check(seen["unknown x-delayed-type"] is not None, "an unknown x-delayed-type was accepted")
    # the queue: there, durable, classic, and the bridge's own declare accepted
    q = node.ctl("list_queues", "name", "durable", "arguments")
    row = [line for line in q.splitlines() if line.startswith(QUEUE + "\t")]
    h.log("the shim's queue: %s" % row)
    check(row and "\ttrue\t" in row[0] and "x-queue-type" in row[0] and "classic" in row[0],
          "%s is not a durable classic queue with x-queue-type classic: %r" % (QUEUE, q))
    r = refused(node, lambda c: c.queue_declare(QUEUE, durable=True,
                                                arguments={"x-queue-type": "classic"}))
    check(r is None, "the bridge's declare of %s was refused: %s" % (QUEUE, r))


def check_vhost(node, ctx):
    vh = ctx.n("vh")
    node.ctl("add_vhost", vh)
    node.ctl("set_permissions", "-p", vh, "guest", ".*", ".*", ".*")
    uri = "amqp://guest:guest@127.0.0.1:%d/%s" % (node.port, vh.replace("/", "%2f"))
    try:
        conn = h.connect(retry_s=10, uri=uri)
        ch = conn.channel()
        ch.confirm_delivery()
        ch.exchange_declare("orders", "x-delayed-message", durable=True,
                            arguments={"x-delayed-type": "direct"})
        r = publish(ch, "orders", "rk", "vhost/held", {"x-delay": h.i32(5000)})
        conn.close()
        check(r == "ok", "a delayed publish in vhost %s was %s" % (vh, r))
        got = drain(node, QUEUE, uri)
        check(list(got) == ["vhost/held"] and got["vhost/held"][:2] == ("orders", "rk"),
              "vhost %s: its delay-bridge.delayed holds %r" % (vh, got))
        check(queue_depth(node, QUEUE) == 0, "the message of vhost %s reached / too" % vh)
        h.log("vhost %s: the delayed message in that vhost's delay-bridge.delayed" % vh)
    finally:
        node.ctl("delete_vhost", vh)


def test(ctx):
    line = hp.suite_line()
    ez = build(line)
    h.log("shim: %s" % ez)
    unit_cases(line, ez)
    node = hp.PluginNode(ctx, line, [ez], [APP])
    try:
        with hp.OnNode(ctx, node):
            run(ctx, node, line)
    finally:
        node.stop()


def run(ctx, node, line):
    store = node.ctl("eval", "case erlang:function_exported(rabbit_khepri, is_enabled, 0) orelse "
                     "code:ensure_loaded(rabbit_khepri) =:= {module, rabbit_khepri} of true -> "
                     "case rabbit_khepri:is_enabled() of true -> khepri; false -> mnesia end; "
                     "false -> mnesia end.").strip()
    h.log("shim node: RabbitMQ %s at %s, metadata store %s" % (h.broker_version(node.uri),
                                                               h.mask_uri(node.uri), store))
    for mid, (what, why) in sorted(shim_differs(line).items()):
        h.log("differs from the plugin: %-13s %s: plugin %r; %s" % (mid, what, plugin_column(mid), why))
    conn, ch = channel(node)
    topo = Topology(ctx, ch)
    check_declarations(node, ctx, topo)
    c = ctx.consumer(topo.queues(), uri=node.uri)

    # 1. the plugin's x-delay table, then the other headers
    cases = [(mid, {"x-delay": xd} if xd is not None else {}, want)
             for mid, xd, want in delay_cases(line)]
    now = int(time.time() * 1000)
    sent = send_all(ch, topo, cases + header_cases(now), "x")
    if not line.startswith("3."):
        sent.update(amqp10_cases(node, topo, now))
    else:
        h.log("AMQP 1.0: not on RabbitMQ 3.10 (no 1.0 exchange addresses), not checked")
    verify(node, topo, c, sent)

    check_vhost(node, ctx)

    # 2. a broker restart: exchanges, bindings, the queue and its persistent messages
    restart_cases = [("held", {"x-delay": h.i32(60000)}, "delayed")]
    before = send_all(ch, topo, restart_cases, "before-restart", persistent=True)
    conn.close()
    c.close()
    node.restart()
    for t, x in sorted(topo.ex.items()):
        r = refused(node, lambda ch_: ch_.exchange_declare(x, passive=True))
        check(r is None, "exchange %s (%s) is gone after the restart: %s" % (x, t, r))
    c = ctx.consumer(topo.queues(), uri=node.uri)
    conn, ch = channel(node)
    after = send_all(ch, topo, [("now", {}, "at once"), ("held", {"x-delay": h.i32(60000)}, "delayed")],
                     "after-restart")
    after.update(before)
    verify(node, topo, c, after)
    h.log("restart: exchanges, bindings, the queue and its persistent messages kept")

    # 3. the queue deleted by someone: the next delayed message declares it again
    ch.queue_delete(QUEUE)
    r = publish(ch, topo.ex["direct"], "rk", "deleted/direct/held", {"x-delay": h.i32(5000)})
    got = drain(node, QUEUE)
    h.log("queue deleted, then a delayed mandatory publish: %s, delay-bridge.delayed holds %s"
          % (r, sorted(got)))
    check(r == "ok" and list(got) == ["deleted/direct/held"],
          "after the queue was deleted the delayed message was %s, the queue holds %r" % (r, got))

    # 3b. deleted, and the shim cannot declare it (the vhost allows no new
    # queue): the message is unroutable, so the mandatory publish comes back
    ch.queue_delete(QUEUE)
    node.ctl("set_vhost_limits", "-p", "/", '{"max-queues": 0}')
    try:
        r = publish(ch, topo.ex["direct"], "rk", "deleted/direct/limited", {"x-delay": h.i32(5000)})
    finally:
        node.ctl("clear_vhost_limits", "-p", "/")
    h.log("queue deleted, max-queues 0, a delayed mandatory publish: %s" % r)
    check(r == "returned", "with %s gone and not declarable the mandatory publish was %s, not "
          "returned" % (QUEUE, r))
    r = publish(ch, topo.ex["direct"], "rk", "deleted/direct/again", {"x-delay": h.i32(5000)})
    got = drain(node, QUEUE)
    check(r == "ok" and list(got) == ["deleted/direct/again"], "once queues may be declared "
          "again the delayed message was %s, the queue holds %r" % (r, got))

    # 4. deleted, then a restart: the boot step declares it before anyone publishes
    ch.queue_delete(QUEUE)
    conn.close()
    c.close()
    node.restart()
    r = refused(node, lambda ch_: ch_.queue_declare(QUEUE, passive=True))
    check(r is None, "%s not declared at boot: %s" % (QUEUE, r))
    h.log("queue deleted, broker restarted: %s declared at boot" % QUEUE)

    # 5. enabled on a running node (how a node moves from the plugin to the
    # shim): disabled, the exchanges' type is unknown; the queue deleted
    # meanwhile; enabled again, the type and the queue are back at once
    node.plugins("disable", APP)
    def confirmed_publish(ch_):
        ch_.confirm_delivery()
        ch_.basic_publish(topo.ex["direct"], "rk", b"x", mandatory=True)
    try:
        r = refused(node, confirmed_publish) or "accepted"
    except pika.exceptions.UnroutableError:
        r = "returned"
    h.log("shim disabled on the running node: a publish to %s: %s" % (topo.ex["direct"], r))
    conn, ch = channel(node)
    ch.queue_delete(QUEUE)
    conn.close()
    node.plugins("enable", APP)
    c = ctx.consumer(topo.queues(), uri=node.uri)
    conn, ch = channel(node)
    r = refused(node, lambda ch_: ch_.queue_declare(QUEUE, passive=True))
    check(r is None, "%s not declared when the shim was enabled on a running node: %s" % (QUEUE, r))
    verify(node, topo, c, send_all(ch, topo, [("now", {}, "at once"), ("held", {"x-delay": h.i32(60000)},
                                                                          "delayed")], "enabled"))
    h.log("shim enabled on a running node: %s declared, routing as before" % QUEUE)
    conn.close()


if __name__ == "__main__":
    h.run(test, budget_s=280)
