#!/usr/bin/python3
"""The shipped least-privilege permissions hold on a real broker
(deploy/rabbitmq/definitions.json, deploy/examples/retry.json, README
"Retries with backoff"; issue 39: a publisher that could write the retry
route's ingress could have the bridge put any message into any queue).

definitions.json's vhost "orders" is applied to a fresh vhost of a random
name: its permissions with rabbitmqctl set_permissions, for users named
like the file's with a random suffix (users are broker-wide: the shared
broker keeps no fixed names), its policies with set_policy, its
exchanges, queues and bindings declared. The retry example's work queue
orders.payment dead-letters to the retry route's ingress by the policy
deploy/rabbitmq/README.md gives. The bridge runs deploy/examples/retry.json's
route and order-closing.json's order-close as the definitions' delay-bridge
user. Then:

  - order-service (write ^orders\\.[A-Za-z0-9_-]+\\.delayed$) is refused
    (403) a publish to the retry ingress orders.retry, to amq.default with
    routing key delay-bridge.wal (the replication stream, declared here as
    a stream) and with routing key orders.payment (the work queue: the
    relay the retry route would otherwise be); it still schedules through
    orders.close.delayed;
  - a genuine reject: user order-worker, which may read orders.payment and
    write nothing (no write on orders.retry), rejects a message with
    requeue=false; the queue dead-letters it into orders.retry all the same
    (dead-lettering is the queue's doing, no user's permission is checked)
    and the bridge sends it back to orders.payment as attempt 2;
  - a declare with the argument x-dead-letter-exchange: orders.retry is
    refused (403) to a user without write on orders.retry: RabbitMQ checks
    the declaring user's write on the dead-letter exchange, so the README
    sets it by policy, never by giving a work queue's user write there;
  - a drain hands a held message back to its ingress exchange as the
    definitions' delay-bridge user (write on the ingress exchanges) and the
    bridge exits 0; nothing in its log is refused.
"""

import json
import os
import re
import secrets
import time

import harness as h
from harness import check

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SRC_VHOST = "orders"  # the definitions' vhost the retry example runs in


def refused(uri, fn):
    return h.refused(fn, uri=uri)


def publish(ex, rk, body=b"x", headers=None, **props):
    def fn(ch):
        ch.basic_publish(ex, rk, body, h.pika.BasicProperties(headers=headers, **props),
                         mandatory=False)
    return fn


def apply_definitions(defs, vh, sfx, pw):
    """definitions.json's SRC_VHOST in vh: {file's user name: our user name}."""
    users = {}
    for p in defs["permissions"]:
        if p["vhost"] != SRC_VHOST:
            continue
        name = "%s.%s" % (p["user"], sfx)
        if p["user"] not in users:
            h.rabbitmqctl("add_user", name, pw)
            users[p["user"]] = name
        h.rabbitmqctl("set_permissions", "-p", vh, name, p["configure"], p["write"], p["read"])
    for pol in defs["policies"]:
        if pol["vhost"] == SRC_VHOST:
            h.rabbitmqctl("set_policy", "-p", vh, "--priority", str(pol["priority"]),
                          "--apply-to", pol["apply-to"], pol["name"], pol["pattern"],
                          json.dumps(pol["definition"]))
    conn = h.connect(uri=h.vhost_uri(vh))
    ch = conn.channel()
    for x in defs["exchanges"]:
        if x["vhost"] == SRC_VHOST:
            ch.exchange_declare(x["name"], exchange_type=x["type"], durable=x["durable"],
                                auto_delete=x["auto_delete"], internal=x["internal"],
                                arguments=x["arguments"])
    for q in defs["queues"]:
        if q["vhost"] == SRC_VHOST:
            ch.queue_declare(q["name"], durable=q["durable"], auto_delete=q["auto_delete"],
                             arguments=q["arguments"])
    for b in defs["bindings"]:
        if b["vhost"] == SRC_VHOST and b["destination_type"] == "queue":
            ch.queue_bind(b["destination"], b["source"], routing_key=b["routing_key"],
                          arguments=b["arguments"])
    conn.close()
    return users


def user_uri(vh, user, pw):
    p = h.pika.URLParameters(h.broker_uri())
    return "amqp://%s:%s@%s:%d/%s" % (user, pw, p.host, p.port, h.url_arg(vh))


def test(ctx):
    h.require_owned_broker("users, a vhost and policies of its own (rabbitmqctl)")
    with open(os.path.join(ROOT, "deploy", "rabbitmq", "definitions.json")) as f:
        defs = json.load(f)
    with open(os.path.join(ROOT, "deploy", "examples", "retry.json")) as f:
        retry_cfg = json.load(f)
    with open(os.path.join(ROOT, "deploy", "examples", "order-closing.json")) as f:
        close_route = json.load(f)["routes"][0]
    sfx = secrets.token_hex(3)
    vh = "dbt-definitions-" + sfx
    pw = "Pw" + secrets.token_hex(8)
    h.rabbitmqctl("add_vhost", vh)
    users = {}
    try:
        h.rabbitmqctl("set_permissions", "-p", vh, h.broker_user(), ".*", ".*", ".*")
        users = apply_definitions(defs, vh, sfx, pw)
        check(set(users) == {"delay-bridge", "order-service"},
              "definitions.json's users in vhost %s: %s" % (SRC_VHOST, sorted(users)))
        worker = "order-worker." + sfx
        h.rabbitmqctl("add_user", worker, pw)
        users["order-worker"] = worker
        run(ctx, vh, users, pw, retry_cfg, close_route)
    finally:
        h.rabbitmqctl("delete_vhost", vh)
        for u in users.values():
            h.rabbitmqctl("delete_user", u)


def run(ctx, vh, users, pw, retry_cfg, close_route):
    route = retry_cfg["routes"][0]
    ingress = route["ingress_exchange"]
    work = "orders.payment"
    stream = "delay-bridge.wal"
    admin_uri = h.vhost_uri(vh)
    pub_uri = user_uri(vh, users["order-service"], pw)
    worker_uri = user_uri(vh, users["order-worker"], pw)

    # the work queue and its retry policy, as deploy/rabbitmq/README.md says
    h.rabbitmqctl("set_policy", "-p", vh, "--apply-to", "queues", "retry",
                  r"^orders\.(email|payment)$", json.dumps({"dead-letter-exchange": ingress}))
    conn = h.connect(uri=admin_uri)
    ch = conn.channel()
    ch.queue_declare(work, durable=True)
    ch.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    conn.close()
    # the work queue's user reads it, writes and configures nothing
    h.rabbitmqctl("set_permissions", "-p", vh, users["order-worker"], "^$", "^$",
                  r"^orders\.(email|payment)$")

    port = h.free_port()
    cfg = ctx.config([close_route, route], wal_dir=os.path.join(ctx.tmp, "defs.wal"),
                     http={"listen": "127.0.0.1:%d" % port})
    cfg["broker"]["uri"] = user_uri(vh, users["delay-bridge"], pw)
    b = h.Bridge(ctx, cfg, name="defs")
    b.start()
    h.log("bridge ready as %s in vhost %s (RabbitMQ %s)" % (users["delay-bridge"], vh,
                                                              h.broker_version()))

    # 1. the publisher cannot reach the retry ingress, amq.default, the stream, the work queue
    forged = {"x-death": [{"queue": work, "reason": "rejected", "count": 1,
                           "exchange": "", "routing-keys": [work]}]}
    for what, fn in [
            ("the retry ingress %s (with a forged x-death naming %s)" % (ingress, work),
             publish(ingress, "", headers=forged)),
            ("amq.default to the stream %s" % stream, publish("", stream)),
            ("amq.default to the work queue %s" % work, publish("", work)),
            ("amq.default to the bridge's ingress queue %s" % route["ingress_queue"],
             publish("", route["ingress_queue"], headers=forged))]:
        why = refused(pub_uri, fn)
        check(why and why.startswith("403"), "order-service published to %s: %s" % (what, why or
                                                                                      "accepted"))
        h.log("order-service -> %s: %s" % (what, why))
    why = refused(pub_uri, publish(close_route["ingress_exchange"], "close", b"later",
                                   headers={"x-delay": h.i32(600000)}, message_id="held-1"))
    check(why is None, "order-service cannot schedule through %s: %s"
          % (close_route["ingress_exchange"], why))
    h.wait_for("the bridge to hold order-service's message", lambda: h.held(port) == 1, 20)

    # 2. a genuine reject by a user with no write on the retry ingress is dead-lettered into it
    why = refused(worker_uri, publish(ingress, ""))
    check(why and why.startswith("403"), "order-worker may write %s: %s" % (ingress, why))
    conn = h.connect(uri=admin_uri)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.basic_publish("", work, b"pay", h.pika.BasicProperties(message_id="pay-1",
                                                              delivery_mode=2))
    conn.close()
    wconn = h.connect(uri=worker_uri)
    wch = wconn.channel()

    def take():
        m, props, body = wch.basic_get(work, auto_ack=False)
        return (m, props) if m else None

    m, props = h.wait_for("the message in %s" % work, take, 20)
    check(props.message_id == "pay-1", "got %r" % props.message_id)
    wch.basic_reject(m.delivery_tag, requeue=False)
    t0 = time.monotonic()
    m, props = h.wait_for("the rejected message back in %s (dead-lettered into %s, sent back by "
                          "the bridge)" % (work, ingress), take, 30)
    took = time.monotonic() - t0
    hdrs = props.headers or {}
    check(props.message_id == "pay-1" and h.header_int(props, "x-retry-attempt") == 2,
          "the message back in %s: message_id %r, x-retry-attempt %r"
          % (work, props.message_id, hdrs.get("x-retry-attempt")))
    wch.basic_ack(m.delivery_tag)
    wconn.close()
    h.log("order-worker (no write on %s) rejected pay-1; dead-lettered and back in %s after "
          "%.2f s as attempt 2" % (ingress, work, took))

    # 3. declaring the dead-letter exchange as an argument needs write on it
    h.rabbitmqctl("set_permissions", "-p", vh, users["order-worker"], r"^orders\.email$", "^$",
                  r"^orders\.(email|payment)$")
    why = refused(worker_uri, lambda c: c.queue_declare(
        "orders.email", durable=True, arguments={"x-dead-letter-exchange": ingress}))
    check(why and why.startswith("403"), "order-worker declared orders.email with "
          "x-dead-letter-exchange %s without write on it: %s" % (ingress, why or "accepted"))
    h.log("order-worker declaring orders.email with x-dead-letter-exchange=%s: %s" % (ingress, why))

    # 4. a drain hands the held message back to its ingress exchange, as delay-bridge
    st, body = h.http_req(port, "POST", "/drain")
    check(st == 202, "POST /drain: %s %s" % (st, body))
    rc = b.wait_exit(60, "the bridge still runs 60 s after POST /drain")
    check(rc == 0, "the drained bridge exited %d" % rc)
    depth = ctx_depth(admin_uri, close_route["ingress_queue"])
    check(depth == 1, "%s holds %d message(s) after the drain, expected the one handed back"
          % (close_route["ingress_queue"], depth))
    text = b.log_text()
    check("ACCESS_REFUSED" not in text and not re.search(r"(?<![.\d])403(?!\d)", text),
          "the definitions' delay-bridge was refused something: %s" % text[-1500:])
    h.log("drain: the held message handed back to %s as %s; no 403 in the bridge's log"
          % (close_route["ingress_exchange"], users["delay-bridge"]))


def ctx_depth(uri, queue):
    conn = h.connect(uri=uri)
    try:
        return conn.channel().queue_declare(queue, passive=True).method.message_count
    finally:
        conn.close()


if __name__ == "__main__":
    h.run(test, budget_s=180)
