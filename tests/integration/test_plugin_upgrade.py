#!/usr/bin/python3
"""README "From the plugin", the whole walk as one script (issue 40).

An application written for the delayed-message plugin -- it declares an
x-delayed-message exchange of type direct, binds its queue, publishes with
x-delay and consumes -- is moved from RabbitMQ 4.0.5 with the plugin 4.0.7
to RabbitMQ 4.3.6 with the shim and the bridge, unchanged, and no message
waits out the plugin:

 1. 4.0.5 + the plugin: the application declares and publishes short
    (seconds) and long (hours to 30 days) delayed messages;
 2. beside it on the same node: the bridge with one route
    {"delayed_exchanges": true}, and the shim enabled (the type goes to the
    one registered last: new delayed messages now reach the bridge);
 3. delay-bridge migrate-plugin moves what the plugin holds into the
    bridge, with each message's own due time; then the plugin is disabled
    and the shim enabled again (the plugin's removal unregisters the type);
 4. the definitions are exported from 4.0.5 and imported into a 4.3.6 node
    with the shim; once the old node's delay-bridge.delayed is empty the
    bridge is pointed at the new node (its WAL needs nothing);
 5. the application reconnects to 4.3.6, redeclares its exchange as it
    always did, publishes more delayed messages, and consumes.

Checked: every short message arrives once at its due time (never early,
late within DB_TEST_LATE_S: those that fall due during a step arrive when
the step's broker is back), through 4.0.5 or 4.3.6; every long one is held
by the bridge at the plugin's due time (GET /pending, not by waiting); the
plugin's table is empty; what was published on 4.3.6 arrives on time.

Needs the 4.0 and 4.3 roots (tests/integration/broker.sh) and the plugin's
source (tests/integration/plugin_node.py says where): skips (77) without
them, as integration.plugin_compat.reference does.
"""

import os
import subprocess
import time

import pika

import harness as h
import harness_load as hl
import harness_plugin as hp
import plugin_node as pn
from harness import check

TOP = os.path.dirname(os.path.dirname(h.HERE))
BUILD_SH = os.path.join(TOP, "deploy", "plugin", "build.sh")
MIGRATE = os.path.join(TOP, "deploy", "plugin", "migrate", "delay-bridge-migrate-plugin")
SHIM = "rabbitmq_delay_bridge_exchange"
EX, Q, RK = "orders.delayed", "orders.close", "order.close"
SHORT, LONG = 120, 300  # messages of each kind, before the switch
DAY_MS = 86400 * 1000


def build_shim(line):
    r = hp.run_cmd(["bash", BUILD_SH, line], timeout=600)
    if r.returncode == 77:
        raise h.Skip("cannot build the shim for RabbitMQ %s here: %s" % (line, r.stdout.strip()))
    check(r.returncode == 0, "build.sh %s failed (%d):\n%s" % (line, r.returncode, r.stdout))
    return r.stdout.strip().splitlines()[-1]


def app_declare(ch):
    """What the application does at start, on every broker: unchanged."""
    ch.exchange_declare(EX, exchange_type="x-delayed-message", durable=True,
                        arguments={"x-delayed-type": "direct"})
    ch.queue_declare(Q, durable=True)
    ch.queue_bind(Q, EX, routing_key=RK)


class Sent(object):
    """message_id -> (earliest due ms, latest due ms) as the publisher saw it."""

    def __init__(self):
        self.due = {}

    def publish(self, uri, items):
        """items: (message_id, delay ms), to node uri; pipelined with confirms."""
        os.environ["DB_TEST_BROKER_URI"] = uri  # publish_pipelined's broker
        t0 = time.time() * 1000.0
        hl.publish_pipelined(EX, [(RK, mid.encode(), pika.BasicProperties(
            message_id=mid, delivery_mode=2, headers={"x-delay": d})) for mid, d in items],
            timeout=300)
        t1 = time.time() * 1000.0
        for mid, d in items:
            self.due[mid] = (t0 + d, t1 + d)


def test(ctx):
    plugin = pn.plugin_dir()  # Skip without the plugin's source
    saved = os.environ.get("DB_TEST_BROKER_URI"), os.environ.get("DB_TEST_BROKER_DIR")
    shim40, shim43 = build_shim("4.0"), build_shim("4.3")
    old = hp.PluginNode(ctx, "4.0", [plugin, shim40], [pn.PLUGIN_APP], name="old")
    new = None
    sent, got = Sent(), {}
    try:
        # 1. the plugin era ------------------------------------------------------------
        conn = pika.BlockingConnection(pika.URLParameters(old.uri))
        app_declare(conn.channel())
        conn.close()
        sent.publish(old.uri, [("s%d" % i, 4000 + 150 * i) for i in range(SHORT)])
        sent.publish(old.uri, [("l%d" % i, 3600 * 1000 + i * (30 * DAY_MS // LONG)) for i in range(LONG)])
        h.log("1. RabbitMQ %s, plugin %s: %d short and %d long delayed messages published"
              % (h.broker_version(old.uri), pn.PLUGIN_VSN, SHORT, LONG))
        consumer = h.Consumer([Q], name="app-old", uri=old.uri)
        ctx.consumers.append(consumer)

        # 2. the bridge and the shim beside the plugin -------------------------------------
        os.environ["DB_TEST_BROKER_URI"] = old.uri
        os.environ.pop("DB_TEST_BROKER_DIR", None)
        port = h.free_port()
        b = ctx.bridge([{"name": "delayed", "delayed_exchanges": True}],
                       http={"listen": "127.0.0.1:%d" % port})
        old.plugins("enable", SHIM)
        sent.publish(old.uri, [("b%d" % i, 3000 + 100 * i) for i in range(20)])  # to the bridge now
        h.log("2. the bridge consumes delay-bridge.delayed; the shim took the type")

        # 3. move what the plugin holds -----------------------------------------------------
        cmd, env = old.ctl_cmd()
        env = dict(env, DELAY_BRIDGE_MIGRATE_PLUGIN=MIGRATE)
        ctl = cmd[0]
        r = subprocess.run([h.bridge_bin(), "migrate-plugin", "-n", old.node, "--rabbitmqctl", ctl],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True, timeout=600)
        h.log("3. migrate-plugin (exit %d):\n%s" % (r.returncode, r.stdout.strip()[-1500:]))
        check(r.returncode == 0, "delay-bridge migrate-plugin failed (%d)" % r.returncode)
        r = subprocess.run([h.bridge_bin(), "migrate-plugin", "--dry-run", "-n", old.node,
                            "--rabbitmqctl", ctl], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, universal_newlines=True, timeout=300)
        check(r.returncode == 0 and " 0 held by the plugin" in r.stdout and " 0 in the journal" in r.stdout,
              "the plugin still holds messages after the move: %s" % r.stdout.strip())
        old.plugins("disable", pn.PLUGIN_APP)
        old.plugins("disable", SHIM)  # the plugin's removal unregistered the type:
        old.plugins("enable", SHIM)   # the shim registers it again (deploy/plugin/README.md)
        ch = pika.BlockingConnection(pika.URLParameters(old.uri)).channel()
        app_declare(ch)  # the application's redeclare still works
        ch.connection.close()

        # 4. the definitions to 4.3.6; the bridge follows once the old queue is empty ---------
        defs = os.path.join(old.dir, "definitions.json")
        old.ctl("export_definitions", defs)
        new = hp.PluginNode(ctx, "4.3", [shim43], [SHIM], name="new")
        new_defs = os.path.join(new.dir, "definitions.json")
        with open(defs) as f, open(new_defs, "w") as g:
            g.write(f.read())
        new.ctl("import_definitions", new_defs)
        h.log("4. definitions moved to RabbitMQ %s" % h.broker_version(new.uri))
        h.wait_for("delay-bridge.delayed on the old node empty", lambda: pika.BlockingConnection(
            pika.URLParameters(old.uri)).channel().queue_declare(
                "delay-bridge.delayed", passive=True).method.message_count == 0, 60)
        time.sleep(2)  # what the bridge published on the old node reaches the application there
        b.stop()
        b.config["broker"]["uri"] = new.uri
        b.rewrite_config()
        b.start()
        consumer.close()

        # 5. the application on 4.3.6, unchanged ---------------------------------------------
        conn = pika.BlockingConnection(pika.URLParameters(new.uri))
        app_declare(conn.channel())
        conn.close()
        consumer = h.Consumer([Q], name="app-new", uri=new.uri)
        ctx.consumers.append(consumer)
        sent.publish(new.uri, [("n%d" % i, 2000 + 100 * i) for i in range(20)])
        h.log("5. the application publishes on 4.3.6")

        # checks ------------------------------------------------------------------------
        short = [m for m in sent.due if not m.startswith("l")]
        wall0 = time.time() - time.monotonic()  # Msg.t is monotonic
        last_due = max(sent.due[m][1] for m in short) / 1000.0

        def delivered():
            got.clear()
            for c in ctx.consumers:
                for m in c.snapshot():
                    got.setdefault(m.message_id, []).append(wall0 + m.t)
            return all(m in got for m in short)

        h.wait_for("every short message delivered", delivered,
                   max(0.0, last_due - time.time()) + h.late_tolerance() + 60)
        early = [m for m in short if min(got[m]) < sent.due[m][0] / 1000.0 - h.early_tolerance()]
        twice = [m for m in short if len(got[m]) > 1]
        check(not early, "delivered before their due time: %r" % early[:10])
        check(not twice, "delivered twice: %r" % twice[:10])
        pend = {x.get("message_id"): x for x in h.pending_all(port, "delayed")}
        longs = [m for m in sent.due if m.startswith("l")]
        missing = [m for m in longs if m not in pend]
        check(not missing, "%d long message(s) not held by the bridge: %r" % (len(missing), missing[:10]))
        off = [m for m in longs if not (sent.due[m][0] - 1000 <= pend[m]["due_ms"] <= sent.due[m][1] + 1000)]
        check(not off, "long messages held at another due time than the plugin's: %r"
              % [(m, pend[m]["due_ms"], sent.due[m]) for m in off[:5]])
        check(all(pend[m].get("exchange") == EX for m in longs), "a long message's exchange is not %s" % EX)
        h.log("checked: %d short messages once and never early across the move and the upgrade, "
              "%d long ones held by the bridge at the plugin's due times" % (len(short), len(longs)))
    finally:
        for c in ctx.consumers:
            c.close()
        ctx.consumers[:] = []
        for b_ in ctx.bridges:
            if b_.alive():
                b_.stop()
        old.stop()
        if new:
            new.stop()
        for k, v in zip(("DB_TEST_BROKER_URI", "DB_TEST_BROKER_DIR"), saved):
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


if __name__ == "__main__":
    h.run(test, budget_s=900)
