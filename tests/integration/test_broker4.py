#!/usr/bin/python3
"""What the README says about RabbitMQ 4.x, checked on the broker under test
(DB_RABBITMQ=3.10|4.0|4.3), on a node of its own: rabbitmq.sh's, started
afresh in $TMPDIR/db-broker4-PORT on the suite's port + 10 (5691 by
default; distribution port + 20000) and stopped at the end, with

    consumer_timeout = 5000                       (every version)
    {rabbit, [{channel_tick_interval, 1000}]}     (advanced.config: the
        channel checks its deliveries' age every second, not every minute)
and on 4.x also
    message_interceptors.incoming.set_header_timestamp.overwrite = true
    deprecated_features.permit.transient_nonexcl_queues = false
    deprecated_features.permit.global_qos = false

Cases (all by default; DB_BROKER4_CASES=a,b picks some), each skipping
with a log line what its version does not have:

lease        an owner with lease_renew_ms 1000 and a standby: for 16 s (three
             consumer_timeouts) the owner keeps the lease (renewals counted),
             the standby stays a standby, every message arrives.
consumer_timeout_arg
             one owner with lease_renew_ms 600000, so its lease consumer asks
             x-consumer-timeout 3600000: 4.3 reads it and the owner keeps the
             lease for 16 s; 3.10 and 4.0 ignore it (the consume is accepted)
             and the broker's 5 s take the lease back: the owner exits 1.
delivery_limit
             two quorum routes, 20 messages each: "new" declared by the bridge,
             "old" declared beforehand without x-delivery-limit (as a bridge
             before this fix did). Two bridges take turns holding all 40
             unacked (SIGSTOP) and are killed (SIGKILL) 23 times in a row, each
             kill handing them back. Then: "new" delivers 20 of 20 everywhere;
             "old" on 4.x loses what the broker dropped after 20 returns (its
             default delivery limit), on 3.10 nothing.
disk_full    (root) full-disk pauses on a quorum ingress declared without
             x-delivery-limit: 8000 x 2 KiB into an 8 MiB tmpfs WAL volume
             (segment_mb 1), x-delay 2-9 s, intake pausing and resuming as
             they fall due, three kill -9 while deliveries wait in memory:
             nothing lost (a pause hands nothing back; a kill, once).
declares     a classic route with share_keys, a quorum one with
             single_active_consumer, a stream one: each delivers. After all
             cases the node's log names no deprecated feature used (every
             queue.declare and basic.qos of every bridge above); then, on
             4.x, a transient non-exclusive queue is refused (541) and global
             QoS logged as not permitted (4.3.6 and 4.0.5 accept the
             basic.qos all the same).
definitions  deploy/rabbitmq/definitions.json imported (rabbitmqctl
             import_definitions, the file copied into the node's directory),
             the bridge as user delay-bridge on vhost orders with
             deploy/examples/order-closing.json's routes, order-service
             publishing: both routes deliver, an invalid x-delay goes to
             orders.delay-errors, no access refused in the bridge's log.
vhosts       the same import, deploy/examples/vhosts.json's routes in vhosts
             orders and billing: order-service and billing-service publish
             in their own vhosts (billing's orders.remind.delayed too, an
             exchange of the same name), each message arrives at its own
             vhost's target, an invalid x-delay at billing.delay-errors;
             the bridge has one consumer and one publisher per vhost,
             billing's named "... vhost=billing"; billing-service cannot
             log in to orders; no access refused.
vhost_quorum a vhost made with --default-queue-type quorum: the classic
             route's ingress queue is classic, the quorum route's quorum,
             and both deliver.
interceptor  (4.x) delay_from "broker" with the broker's own stamp: messages
             published without timestamp_in_ms while the bridge is stopped,
             one with a false stamp (an hour old: overwritten), are due at
             the broker's receipt + x-delay, not the bridge's; unstamped 0.
xdeath       a message through the bridge, rejected by its consumer into a
             dead-letter queue, published again through the bridge with the
             headers it got (a retry) and rejected again: what x-death says.
             3.10 counts 2; 4.x starts again at 1 (a client-published x-death
             is not interpreted).
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import harness as h
from harness import check

HERE = os.path.dirname(os.path.abspath(__file__))
RABBITMQ_SH = os.path.join(HERE, "rabbitmq.sh")
ROOT = os.path.dirname(os.path.dirname(HERE))
VERSION = os.environ.get("DB_RABBITMQ", "3.10")
IS4 = not VERSION.startswith("3.")
HOLD_S = 16.0


def node_conf():
    lines = ["consumer_timeout = 5000"]
    if IS4:
        lines += ["message_interceptors.incoming.set_header_timestamp.overwrite = true",
                  "deprecated_features.permit.transient_nonexcl_queues = false",
                  "deprecated_features.permit.global_qos = false"]
    return "\n".join(lines)


def version():
    return h.broker_version()


def at_least(major, minor):
    try:
        v = [int(x) for x in version().split(".")[:2]]
    except ValueError:
        return False
    return v >= [major, minor]


def skip_case(what):
    h.log("SKIP (RabbitMQ %s): %s" % (version(), what))


def wait_state(port, state, timeout, who):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if h.replication(port)["state"] == state:
                return
        except (OSError, h.TestFailure, KeyError):
            pass
        time.sleep(0.1)
    h.fail("%s did not become %s within %.0fs" % (who, state, timeout))


def listen(port):
    return {"listen": "127.0.0.1:%d" % port}


# --------------------------------------------------------------------------
# 1. consumer_timeout and the lease
# --------------------------------------------------------------------------

def case_lease(ctx):
    route, c, wal = ctx.replicated("lease", lease_renew_ms=1000)
    pa, pb = h.free_port(), h.free_port()
    a = ctx.bridge([route], name="lease-a", instance="a", http=listen(pa), wal=wal,
                   broker={"heartbeat_s": 5})
    wait_state(pa, "owner", 30, "A")
    b = ctx.bridge([route], name="lease-b", instance="b", http=listen(pb), wal=wal,
                   broker={"heartbeat_s": 5}, start=False)
    b.start(wait_ready=False)
    wait_state(pb, "standby", 30, "B")
    r0 = h.replication(pa)["lease_renewals"]
    p = ctx.publisher()
    ids = []
    t0 = time.monotonic()
    i = 0
    while time.monotonic() - t0 < HOLD_S:
        mid = "lease-%03d" % i
        p.publish(route["ingress_exchange"], "rk", mid.encode(), headers={"x-delay": h.i32(500)},
                  message_id=mid)
        ids.append(mid)
        i += 1
        a.check_alive()
        b.check_alive()
        check(h.replication(pa)["state"] == "owner", "A lost the lease after %.1fs with "
              "consumer_timeout 5000: %s" % (time.monotonic() - t0, h.replication(pa)))
        check(h.replication(pb)["state"] == "standby", "B left standby after %.1fs: %s"
              % (time.monotonic() - t0, h.replication(pb)))
        time.sleep(0.5)
    renewals = h.replication(pa)["lease_renewals"] - r0
    check(renewals >= HOLD_S / 2, "A renewed its lease %d times in %.0fs (lease_renew_ms 1000)"
          % (renewals, HOLD_S))
    c.wait_ids(ids, 30)
    for who, br in (("A", a), ("B", b)):
        check("timed out" not in br.log_text(), "%s's log says a broker timer fired" % who)
    h.log("lease: A kept the lease %.0fs on consumer_timeout 5000 (%d renewals), B stood by, "
          "%d of %d delivered" % (HOLD_S, renewals, len(ids), len(ids)))
    b.stop()
    a.stop()


def case_consumer_timeout_arg(ctx):
    route, c, wal = ctx.replicated("cto", lease_renew_ms=600000)
    pa = h.free_port()
    a = ctx.bridge([route], name="cto", instance="a", http=listen(pa), wal=wal,
                   broker={"heartbeat_s": 5})
    wait_state(pa, "owner", 30, "the owner")
    t0 = time.monotonic()
    while time.monotonic() - t0 < HOLD_S and a.alive():
        time.sleep(0.2)
    held = time.monotonic() - t0
    honoured = at_least(4, 3)
    if honoured:
        check(a.alive(), "RabbitMQ %s: the owner (x-consumer-timeout 3600000) lost its lease after "
              "%.1fs on consumer_timeout 5000: %s" % (version(), held, a.log_text()[-600:]))
        h.log("consumer_timeout_arg: x-consumer-timeout honoured, lease kept %.0fs without renewal"
              % held)
        a.stop()
    else:
        check(not a.alive(), "RabbitMQ %s: the owner kept its lease %.0fs without renewal on "
              "consumer_timeout 5000 (x-consumer-timeout was thought ignored before 4.3)"
              % (version(), held))
        check(a.proc.returncode == 1, "the owner exited %s, expected 1" % a.proc.returncode)
        check("delivery acknowledgement" in a.log_text() or "timed out" in a.log_text(),
              "the owner's log does not say the broker timed the lease out: %s"
              % a.log_text()[-600:])
        h.log("consumer_timeout_arg: x-consumer-timeout accepted but not read by %s: the broker "
              "took the lease after %.1fs (as the README says: renewals keep it)"
              % (version(), held))


# --------------------------------------------------------------------------
# 2. the quorum delivery limit through a crash loop
# --------------------------------------------------------------------------

def case_delivery_limit(ctx):
    n, kills = 20, 23
    ex, qs = ctx.target("dl", "direct", ["rk"])
    c = ctx.consumer([qs["rk"]])
    new = ctx.route("dlnew", ex, queue_type="quorum")
    old = ctx.route("dlold", ex, queue_type="quorum")
    # the old route's queue, as a bridge before the fix declared it: no x-delivery-limit
    ctx.declare_exchange(old["ingress_exchange"], "fanout")
    ctx.admin().queue_declare(old["ingress_queue"], durable=True,
                              arguments={"x-queue-type": "quorum"})
    ctx.bind(old["ingress_queue"], old["ingress_exchange"], "")
    ports = [h.free_port(), h.free_port()]
    br = [ctx.bridge([new, old], name="dl-%d" % i, http=listen(ports[i]), start=False)
          for i in range(2)]
    br[0].start()
    if IS4:
        out = h.rabbitmqctl("list_queues", "name", "arguments")
        line = [x for x in out.splitlines() if x.startswith(new["ingress_queue"] + "\t")]
        check(line and "x-delivery-limit" in line[0], "the new quorum ingress was declared "
              "without x-delivery-limit: %s" % line)
        h.log("new quorum ingress: %s" % line[0])
    os.kill(br[0].proc.pid, signal.SIGSTOP)
    p = ctx.publisher()
    ids = {"dlnew": [], "dlold": []}
    for r in (new, old):
        for i in range(n):
            mid = "%s-%02d" % (r["name"], i)
            p.publish(r["ingress_exchange"], "rk", mid.encode(), headers={"x-delay": h.i32(1000)},
                      message_id=mid)
            ids[r["name"]].append(mid)

    def wait_held(what):
        # every message handed to the stopped holder: nothing ready in either queue
        # (queue.declare-ok counts ready messages only, unacked ones not)
        deadline = time.monotonic() + 30
        while True:
            q = [ctx.queue_depth(r["ingress_queue"]) for r in (new, old)]
            if q == [0, 0]:
                return
            check(time.monotonic() < deadline, "%s: %s ready after 30s" % (what, q))
            time.sleep(0.05)

    wait_held("publish")
    holder = 0
    for k in range(kills):
        other = 1 - holder
        br[other].start()
        os.kill(br[other].proc.pid, signal.SIGSTOP)
        br[holder].proc.kill()
        br[holder].proc.wait()
        wait_held("kill %d" % (k + 1))
        holder = other
    h.log("delivery_limit: %d kills, each handing every unacked message back" % kills)
    os.kill(br[holder].proc.pid, signal.SIGCONT)
    got_new = c.wait_ids(ids["dlnew"], 30)
    check(len(got_new) >= n, "the new quorum ingress lost messages")
    c.quiet(3.0)
    got = {m.message_id for m in c.snapshot()}
    lost_old = [m for m in ids["dlold"] if m not in got]
    h.log("delivery_limit on RabbitMQ %s: new queue %d of %d delivered; old queue (no "
          "x-delivery-limit) %d of %d delivered, %d dropped by the broker"
          % (version(), n, n, n - len(lost_old), n, len(lost_old)))
    if IS4:
        check(lost_old, "RabbitMQ %s kept every message of a queue without x-delivery-limit "
              "through %d returns: its default delivery limit of 20 did not show"
              % (version(), kills))
    else:
        check(not lost_old, "RabbitMQ %s dropped %d messages after %d returns"
              % (version(), len(lost_old), kills))
    br[holder].stop()


def case_disk_full(ctx):
    if os.geteuid() != 0:
        skip_case("a tmpfs WAL volume needs root")
        return
    h.on_volume(ctx, "tmpfs", 8, lambda fs: disk_full(ctx, fs))


def disk_full(ctx, fs):
    """Full-disk pauses on a quorum ingress declared without x-delivery-limit
    (the worst case): 8000 x 2 KiB into an 8 MiB WAL volume, x-delay 2-9 s,
    so intake pauses and resumes as messages fall due; three kill -9 while
    deliveries wait in memory. Nothing lost: a pause hands nothing back, a
    kill hands back once."""
    n, kills = 8000, 3
    ex, qs = ctx.target("df", "direct", ["rk"])
    c = ctx.consumer([qs["rk"]])
    r = ctx.route("df", ex, queue_type="quorum")
    ctx.declare_exchange(r["ingress_exchange"], "fanout")
    ctx.admin().queue_declare(r["ingress_queue"], durable=True,
                              arguments={"x-queue-type": "quorum"})
    ctx.bind(r["ingress_queue"], r["ingress_exchange"], "")
    port = h.free_port()
    wal = {"dir": os.path.join(fs, "wal"), "segment_mb": 1, "fsync": True}
    b = ctx.bridge([r], name="df", http=listen(port), start=False)
    b.config["wal"] = wal
    b.rewrite_config()
    b.start()
    items = [("d%05d" % i, bytes([65 + i % 26]) * 2048, {"x-delay": h.i32(2000 + i % 7000)},
              2000 + i % 7000) for i in range(n)]
    sent = h.publish_burst(ctx, r["ingress_exchange"], items)
    pauses, was = 0, False
    done = 0
    deadline = time.monotonic() + 150
    while len({m.message_id for m in c.snapshot()}) < n and time.monotonic() < deadline:
        try:
            w = h.stats(port)["wal"]
        except Exception:
            w = {}
        if w.get("intake_paused") and not was:
            pauses += 1
        was = bool(w.get("intake_paused"))
        if done < kills and w.get("intake_paused") and w.get("intake_waiting", 0) > 0:
            b.kill9()
            b.start()
            done += 1
            was = False
        time.sleep(0.02)
    msgs = c.quiet(1.0)
    t = h.tally(sent.keys(), msgs)
    h.log("disk_full on RabbitMQ %s: %d intake pauses seen, %d kills while deliveries waited: %s"
          % (version(), pauses, done, h.tally_line(t)))
    check(not t["lost"], "lost %d through full-disk pauses, e.g. %s" % (len(t["lost"]),
                                                                          t["lost"][:5]))
    check(t["case2"] == 0, "%d message(s) stored twice from a redelivery" % t["case2"])
    check(pauses >= 2 and done == kills, "the volume did not pause intake enough (%d pauses, "
          "%d kills): the case proves nothing" % (pauses, done))
    b.stop()


# --------------------------------------------------------------------------
# 3. declares, definitions, a vhost of quorum default
# --------------------------------------------------------------------------

def case_declares(ctx):
    ex, qs = ctx.target("decl", "direct", ["rk"])
    c = ctx.consumer([qs["rk"]])
    routes = [ctx.route("dclassic", ex, share_keys=True),
              ctx.route("dquorum", ex, queue_type="quorum", single_active_consumer=True),
              ctx.route("dstream", ex, queue_type="stream")]
    for r in routes[:1]:
        ctx.exchanges.add(r["ingress_exchange"] + ".keys")
        ctx.queues.add(r["ingress_queue"] + ".keys.decl")
    port = h.free_port()
    b = ctx.bridge(routes, name="decl", instance="decl", http=listen(port))
    p = ctx.publisher()
    ids = []
    for r in routes:
        mid = r["name"]
        hdrs = {"x-delay": h.i32(300)}
        if r["name"] == "dclassic":
            hdrs["x-delay-key"] = "k1"
        p.publish(r["ingress_exchange"], "rk", mid.encode(), headers=hdrs, message_id=mid)
        ids.append(mid)
    c.wait_ids(ids, 20)
    check("PRECONDITION_FAILED" not in b.log_text() and "NOT_ALLOWED" not in b.log_text(),
          "the bridge's log shows a refusal")
    h.log("declares: classic+share_keys, quorum+single_active_consumer, stream: all delivered")
    b.stop()


def node_dir():
    return h.broker_dir()


def get_ids(uri, queues, n, timeout):
    """Take n messages from queues on uri (basic.get): {message_id: queue}."""
    conn = h.connect(uri=uri)
    ch = conn.channel()
    got = {}
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        empty = True
        for q in queues:
            m, props, body = ch.basic_get(q, auto_ack=True)
            if m:
                got[props.message_id] = q
                empty = False
        if empty:
            time.sleep(0.1)
    conn.close()
    return got


def import_definitions():
    """deploy/rabbitmq/definitions.json imported (again: importing adds and
    updates), guest allowed everything in its vhosts to read the targets.
    Returns the node's AMQP port."""
    src = os.path.join(ROOT, "deploy", "rabbitmq", "definitions.json")
    dst = os.path.join(node_dir(), "definitions.json")  # inside the node's root, at this path
    shutil.copyfile(src, dst)
    h.rabbitmqctl("import_definitions", os.path.abspath(dst))
    with open(src) as f:
        for v in json.load(f)["vhosts"]:
            h.rabbitmqctl("set_permissions", "-p", v["name"], "guest", ".*", ".*", ".*")
    return h.pika.URLParameters(h.broker_uri()).port


def check_no_refusal(b):
    log = b.log_text()
    # "403" as a reply code (a word of its own), not the digits of a timestamp (…:31.403Z).
    check("ACCESS_REFUSED" not in log and not re.search(r"(?<![.\d])403(?!\d)", log),
          "the least-privilege user was refused something: %s" % log[-800:])


def case_definitions(ctx):
    port_amqp = import_definitions()
    with open(os.path.join(ROOT, "deploy", "examples", "order-closing.json")) as f:
        cfg = json.load(f)
    cfg["broker"]["uri"] = ("amqp://delay-bridge:example-delay-bridge-password@127.0.0.1:%d/orders"
                            % port_amqp)
    cfg["wal"]["dir"] = os.path.join(ctx.tmp, "defs.wal")
    port = h.free_port()
    cfg["http"] = listen(port)
    b = h.Bridge(ctx, cfg, name="defs")
    b.start()
    guest = "amqp://guest:guest@127.0.0.1:%d/orders" % port_amqp
    p = ctx.publisher(uri="amqp://order-service:example-order-service-password@127.0.0.1:%d/orders"
                      % port_amqp)
    p.publish("orders.close.delayed", "close", b"c", headers={"x-delay": h.i32(500)},
              message_id="close-1")
    p.publish("orders.remind.delayed", "remind", b"r", headers={"x-delay": h.i32(500)},
              message_id="remind-1")
    p.publish("orders.close.delayed", "close", b"bad", headers={"x-delay": "soon"},
              message_id="bad-1")
    where = get_ids(guest, ["orders.close", "orders.remind", "orders.delay-errors"], 3, 20)
    check(where == {"close-1": "orders.close", "remind-1": "orders.remind",
                    "bad-1": "orders.delay-errors"}, "arrived in the wrong queues: %s" % where)
    check_no_refusal(b)
    h.log("definitions: imported on RabbitMQ %s; delay-bridge (least privilege) declared, "
          "checked and published; order-service published; no 403" % version())
    b.stop()


def case_vhosts(ctx):
    """deploy/examples/vhosts.json's routes as delay-bridge: two in vhost
    orders (the URI's), two in billing, one of them on the same ingress name
    as an orders route. order-service and billing-service publish, each in
    its own vhost; each message arrives at its own vhost's target."""
    port_amqp = import_definitions()
    with open(os.path.join(ROOT, "deploy", "examples", "vhosts.json")) as f:
        cfg = json.load(f)
    base = "amqp://%s@127.0.0.1:" + str(port_amqp) + "/%s"
    cfg["broker"]["uri"] = base % ("delay-bridge:example-delay-bridge-password", "orders")
    cfg["wal"]["dir"] = os.path.join(ctx.tmp, "vhosts.wal")
    port = h.free_port()
    cfg["http"] = listen(port)
    b = h.Bridge(ctx, cfg, name="vhosts")
    b.start()
    orders = ctx.publisher(uri=base % ("order-service:example-order-service-password", "orders"))
    billing = ctx.publisher(uri=base % ("billing-service:example-billing-service-password",
                                        "billing"))
    for p, ex, key, mid, delay in (
            (orders, "orders.close.delayed", "close", "o-close", h.i32(500)),
            (orders, "orders.remind.delayed", "remind", "o-remind", h.i32(500)),
            (billing, "billing.invoice.delayed", "invoice", "b-invoice", h.i32(500)),
            (billing, "orders.remind.delayed", "remind", "b-remind", h.i32(500)),
            (billing, "billing.invoice.delayed", "invoice", "b-bad", "soon")):
        p.publish(ex, key, mid.encode(), headers={"x-delay": delay}, message_id=mid)
    got_o = get_ids(base % ("guest:guest", "orders"),
                    ["orders.close", "orders.remind", "orders.delay-errors"], 2, 20)
    got_b = get_ids(base % ("guest:guest", "billing"),
                    ["billing.invoice", "billing.remind", "billing.delay-errors"], 3, 20)
    check(got_o == {"o-close": "orders.close", "o-remind": "orders.remind"},
          "vhost orders: arrived in the wrong queues: %s" % got_o)
    check(got_b == {"b-invoice": "billing.invoice", "b-remind": "billing.remind",
                    "b-bad": "billing.delay-errors"},
          "vhost billing: arrived in the wrong queues: %s" % got_b)
    # one pair per vhost; the URI's keeps its plain names
    conns = []
    out = h.rabbitmqctl("list_connections", "user", "vhost", "client_properties", "--formatter", "json")
    for c in json.loads(out or "[]"):
        props = c.get("client_properties") or []
        # the json formatter gives client_properties as [name, type, value] triples
        name = (props.get("connection_name") if isinstance(props, dict) else
                next((e[2] for e in props if isinstance(e, list) and len(e) == 3
                      and e[0] == "connection_name"), None))
        if c.get("user") == "delay-bridge":
            conns.append((c["user"], c["vhost"], name))
    conns.sort()
    check(conns == [("delay-bridge", "billing", "delay-bridge consumer vhost=billing"),
                    ("delay-bridge", "billing", "delay-bridge publisher vhost=billing"),
                    ("delay-bridge", "orders", "delay-bridge consumer"),
                    ("delay-bridge", "orders", "delay-bridge publisher")],
          "the bridge's connections: %s" % conns)
    # each publisher in its own vhost only
    try:
        h.pika.BlockingConnection(h.pika.URLParameters(
            base % ("billing-service:example-billing-service-password", "orders")))
        h.fail("billing-service logged in to vhost orders")
    except h.pika.exceptions.AMQPConnectionError:
        pass
    check_no_refusal(b)
    h.log("vhosts: delay-bridge served orders and billing (%s) on RabbitMQ %s; orders.remind.delayed "
          "in each vhost went to its own target; no 403" % (", ".join(c[2] for c in conns), version()))
    b.stop()


def case_vhost_quorum(ctx):
    vh = ctx.n("qv")
    h.rabbitmqctl("add_vhost", vh, "--default-queue-type", "quorum")
    h.rabbitmqctl("set_permissions", "-p", vh, "guest", ".*", ".*", ".*")
    uri = "amqp://guest:guest@127.0.0.1:%d/%s" % (h.pika.URLParameters(h.broker_uri()).port, vh)
    conn = h.connect(uri=uri)
    ch = conn.channel()
    ex = ctx.n("qvt")
    ch.exchange_declare(ex, "direct", durable=True)
    tq = ctx.n("qvt.q")
    ch.queue_declare(tq, durable=True)
    ch.queue_bind(tq, ex, "rk")
    conn.close()
    rc = ctx.route("qvclassic", ex)
    rq = ctx.route("qvquorum", ex, queue_type="quorum")
    port = h.free_port()
    b = ctx.bridge([rc, rq], name="qv", http=listen(port), broker={"uri": uri})
    types = {}
    for line in h.rabbitmqctl("list_queues", "-p", vh, "name", "type").splitlines():
        parts = line.split()
        if len(parts) == 2:
            types[parts[0]] = parts[1]
    check(types.get(rc["ingress_queue"]) == "classic", "the classic route's ingress queue is %s "
          "in a vhost of quorum default" % types.get(rc["ingress_queue"]))
    check(types.get(rq["ingress_queue"]) == "quorum", "the quorum route's ingress queue is %s"
          % types.get(rq["ingress_queue"]))
    p = ctx.publisher(uri=uri)
    for r in (rc, rq):
        p.publish(r["ingress_exchange"], "rk", b"x", headers={"x-delay": h.i32(300)},
                  message_id=r["name"])
    got = get_ids(uri, [tq], 2, 20)
    check(sorted(got) == ["qvclassic", "qvquorum"], "delivered from the vhost: %s" % got)
    h.log("vhost_quorum: classic route -> %s queue, quorum route -> %s queue, both delivered"
          % (types[rc["ingress_queue"]], types[rq["ingress_queue"]]))
    b.stop()
    h.rabbitmqctl("delete_vhost", vh)


# --------------------------------------------------------------------------
# 4. delay_from "broker" with the broker's own stamp
# --------------------------------------------------------------------------

def case_interceptor(ctx):
    if not at_least(3, 12):
        skip_case("no message interceptors before 3.12 (integration.delay_from has the "
                  "publisher-stamp version)")
        return
    ex, qs = ctx.target("ic", "direct", ["rk"])
    c = ctx.consumer([qs["rk"]])
    r = ctx.route("ic", ex, delay_from="broker")
    port = h.free_port()
    b = ctx.bridge([r], name="ic", http=listen(port))
    b.stop()
    p = ctx.publisher()
    wall0 = time.time() - time.monotonic()
    sent = {}
    now_ms = int(time.time() * 1000)
    for mid, hdrs in (("plain", {"x-delay": h.i32(4000)}),
                      ("false-stamp", {"x-delay": h.i32(4000),
                                       "timestamp_in_ms": h.i64(now_ms - 3600 * 1000)})):
        sent[mid] = p.publish(r["ingress_exchange"], "rk", mid.encode(), headers=hdrs,
                              message_id=mid)
    time.sleep(2.5)  # the broker's receipt and the bridge's differ by this much
    b.start()
    pend = {}
    deadline = time.monotonic() + 10
    while len(pend) < 2 and time.monotonic() < deadline:
        st, body = h.http_get(port, "/pending?route=ic&limit=100")
        pend = {m["message_id"]: m for m in json.loads(body)["messages"]}
        time.sleep(0.05)
    check(len(pend) == 2, "/pending: %s" % sorted(pend))
    for mid, t in sent.items():
        pub_ms = (t + wall0) * 1000
        due = pend[mid]["due_ms"]
        check(pub_ms + 4000 - 50 <= due <= pub_ms + 4000 + 1000, "%s: due_ms %+.0f ms from its "
              "publish + x-delay: not counted from the broker's receipt (the bridge took it "
              "2.5 s later)" % (mid, due - pub_ms - 4000))
        h.log("interceptor: %s due %+.0f ms from publish + 4000 ms" % (mid, due - pub_ms - 4000))
    check(h.stats(port)["routes"][0]["unstamped"] == 0, "unstamped counted")
    msgs = c.wait_ids(list(sent), 15)
    for m in msgs:
        stamp = h.header(m.props, "timestamp_in_ms")
        check(stamp is not None, "%s: delivered without the broker's stamp of the republish"
              % m.message_id)
        check(m.t - sent[m.message_id] < 4.0 + h.late_tolerance(), "%s: arrived %.1fs after its "
              "publish" % (m.message_id, m.t - sent[m.message_id]))
    h.log("interceptor: the broker stamped both (the false one overwritten), the bridge counted "
          "from the stamp, the republish stamped again")
    b.stop()


# --------------------------------------------------------------------------
# 5. x-death after a message passed through the bridge
# --------------------------------------------------------------------------

def xdeath_counts(props):
    xd = h.header(props, "x-death")
    out = []
    for e in (xd.plain() if xd is not None else []):
        out.append((e.get("queue"), e.get("reason"), e.get("count")))
    return out


def case_xdeath(ctx):
    dlx = ctx.declare_exchange(ctx.n("xd.dlx"), "fanout")
    dlq = ctx.declare_queue(ctx.n("xd.dlq"), bind=[(dlx, "")])
    ex = ctx.declare_exchange(ctx.n("xd.t"), "direct")
    tq = ctx.n("xd.q")
    ctx.admin().queue_declare(tq, durable=True, arguments={"x-dead-letter-exchange": dlx})
    ctx.queues.add(tq)
    ctx.bind(tq, ex, "rk")
    r = ctx.route("xd", ex)
    b = ctx.bridge([r], name="xd")
    p = ctx.publisher()
    conn = h.connect()
    ch = conn.channel()

    def get(q):
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            m, props, body = ch.basic_get(q, auto_ack=False)
            if m:
                return m, props, body
            time.sleep(0.05)
        h.fail("nothing arrived in %s" % q)

    headers = {"x-delay": h.i32(200)}
    seen = []
    for attempt in (1, 2):
        p.publish(r["ingress_exchange"], "rk", b"job", headers=headers, message_id="job")
        m, props, body = get(tq)
        ch.basic_reject(m.delivery_tag, requeue=False)
        m, props, body = get(dlq)
        ch.basic_ack(m.delivery_tag)
        seen.append(xdeath_counts(props))
        h.log("xdeath: attempt %d dead-lettered with x-death %s" % (attempt, seen[-1]))
        # a retry: published again with the headers it got, through the bridge
        headers = dict((k, v) for k, v in props.headers.items())
        headers["x-delay"] = h.i32(200)
    conn.close()
    first = [x for x in seen[0] if x[0] == tq]
    second = [x for x in seen[1] if x[0] == tq]
    check(first and first[0][2] == 1, "x-death after the first rejection: %s" % seen[0])
    want = 1 if IS4 else 2
    check(second and second[0][2] == want, "RabbitMQ %s: x-death count after a retry through the "
          "bridge is %s, expected %d" % (version(), second, want))
    h.log("xdeath on RabbitMQ %s: the count after a retry through the bridge is %d (%s)"
          % (version(), want, "restarts: keep a retry count in a header of your own" if IS4
             else "the broker interprets a client-published x-death"))
    b.stop()


LOG_FROM = [0]


def node_log():
    """The node's log since the test began (the file outlives a node's runs)."""
    d = h.broker_dir()
    node = [x.split("=", 1)[1].strip() for x in open(os.path.join(d, "node.env"))
            if x.startswith("NODE=")][0]
    with open(os.path.join(d, "log", node + ".log"), "rb") as f:
        f.seek(LOG_FROM[0])
        return f.read().decode("utf-8", "replace")


def deprecated_used(log):
    return sorted(set(x.split("`")[1] for x in log.splitlines()
                      if "Deprecated features: `" in x))


def check_deprecated(cases):
    """After the cases: the node logged no deprecated feature in use (every
    bridge's declares and QoS). Then, on 4.x, that it would have: a transient
    non-exclusive queue is refused, global QoS logged as not permitted."""
    used = deprecated_used(node_log())
    check(not used, "the node logged deprecated features in use during %s: %s"
          % (",".join(cases), used))
    h.log("deprecated features used during %s: none" % ",".join(cases))
    if not IS4:
        skip_case("no deprecated features to refuse (transient non-exclusive queues, global QoS)")
        return
    q = "dbt.broker4.transient"
    why = h.refused(lambda ch: ch.queue_declare(q, durable=False), confirm=False)
    check(why, "this node accepted a transient non-exclusive queue")
    h.log("this node refuses a transient non-exclusive queue: %s" % why)
    h.refused(lambda ch: ch.basic_qos(prefetch_count=10, global_qos=True), confirm=False)
    deadline = time.monotonic() + 10
    while "global_qos" not in deprecated_used(node_log()):
        check(time.monotonic() < deadline, "global QoS was not logged as a deprecated feature")
        time.sleep(0.1)
    h.log("this node logs global QoS as not permitted (deprecated_features.permit.global_qos = "
          "false; accepted all the same on %s)" % version())


CASES = ["lease", "consumer_timeout_arg", "delivery_limit", "disk_full", "declares", "definitions",
         "vhosts", "vhost_quorum", "interceptor", "xdeath"]


def test(ctx):
    check(version().startswith(VERSION + ".") or VERSION == version(),
          "DB_RABBITMQ=%s but the node is RabbitMQ %s" % (VERSION, version()))
    LOG_FROM[0] = len(node_log().encode("utf-8", "replace"))
    only = [x for x in os.environ.get("DB_BROKER4_CASES", "").split(",") if x]
    for name in only or CASES:
        check(name in CASES, "no case %s: %s" % (name, ", ".join(CASES)))
        h.log("=== case %s on RabbitMQ %s" % (name, version()))
        globals()["case_" + name](ctx)
    check_deprecated(only or CASES)


def main():
    base = h.pika.URLParameters(h.broker_uri()).port
    port = int(os.environ.get("DB_BROKER4_PORT") or base + 10)
    bdir = os.path.join(os.environ.get("TMPDIR", "/tmp"), "db-broker4-%d-%s" % (port, VERSION))
    os.environ["DB_TEST_BROKER_URI"] = "amqp://guest:guest@127.0.0.1:%d/%%2f" % port
    os.environ["DB_TEST_BROKER_DIR"] = bdir
    subprocess.run(["bash", RABBITMQ_SH, "stop", bdir], check=False)
    subprocess.run(["rm", "-rf", os.path.join(bdir, "mnesia")], check=False)
    os.makedirs(bdir, exist_ok=True)
    with open(os.path.join(bdir, "advanced.config"), "w") as f:
        f.write("[{rabbit, [{channel_tick_interval, 1000}]}].\n")
    env = dict(os.environ, DB_RABBITMQ_CONF_EXTRA=node_conf())
    r = subprocess.run(["bash", RABBITMQ_SH, "start", bdir, str(port), str(port + 20000)], env=env)
    if r.returncode == 77:
        sys.exit(77)
    if r.returncode != 0:
        print("test broker4: cannot start its own node (rabbitmq.sh exit %d)" % r.returncode)
        sys.exit(1)
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        h.run(test, budget_s=285)  # exits
    _, status = os.waitpid(pid, 0)
    subprocess.run(["bash", RABBITMQ_SH, "stop", bdir], check=False)
    sys.exit(os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    main()
