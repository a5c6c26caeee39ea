#!/usr/bin/python3
"""check_qq_delay.py -- does RabbitMQ itself delay messages in a quorum
queue? Checked with real clients (pika for AMQP 0-9-1, python3-qpid-proton
for AMQP 1.0) against a running node:

    check_qq_delay.py PORT [CASE ...]

PORT is the node's AMQP port (guest/guest, vhost /; AMQP 1.0 on the same
port, RabbitMQ 4.x). The node's version (its server properties) decides
what each case expects:

  qq-vNext (DB_RABBITMQ=qq-delay: the branch, 4.4 line; its version names it)
      a quorum queue holds a message whose x-opt-delivery-time (epoch ms,
      an integer) lies in the future until that time;
  any other (4.3.6; main of 2026-08-21, DB_RABBITMQ=4.4)
      it does not (publish-time delays are only on that branch): the
      message is delivered at once. QQ_DELAY_EXPECT=1|0 overrides.
  Both have delayed retry (x-delayed-retry-type/-min/-max).

Cases (all by default):

  pub091      0-9-1 header x-opt-delivery-time = now + 3 s (a long)
  pub10       AMQP 1.0 message annotation x-opt-delivery-time = now + 3 s
              (a long), and one as an AMQP 1.0 timestamp
  order       a delayed message then an undelayed one: the second first
  forms       forms that are not a future integer delivery time: in the
              past, a string, the relative x-opt-delivery-delay: none is
              held; a 0-9-1 timestamp ('T', whole seconds) is held until
              the start of its second
  dlx_classic a message with x-opt-delivery-time = now + 3 s expires from a
              classic queue (x-message-ttl 500) into a quorum queue
  dlx_qq      a quorum queue's consumer (AMQP 1.0) settles a message as
              modified, undeliverable-here, with annotation
              x-opt-delivery-time = now + 3 s: it is dead-lettered into a
              second quorum queue, at-most-once (the default) and
              at-least-once
  dlx_ttl     a quorum queue with x-message-ttl 500 and a DLX (either
              strategy), a message with x-opt-delivery-time = now + 3 s: on
              qq-vNext held for the 3 s, then expired into the target; on
              others expired after 500 ms
  restart     a message held for 25 s survives a node restart and is
              still held until its time (only with QQ_DELAY_NODE_DIR set:
              the rabbitmq.sh directory of the node, to restart it, with
              DB_RABBITMQ, default qq-delay or 4.3 by the node's version)
  retry_returned  x-delayed-retry-type returned, min 1000, max 4000:
              each 0-9-1 basic.nack(requeue) comes back after ~1 s (a
              requeue does not count as a failed delivery)
  retry_failed    x-delayed-retry-type all, min 1000, max 2500: each AMQP
              1.0 modified(delivery-failed) comes back after min x count,
              capped: ~1, ~2, ~2.5 s; type failed with a 0-9-1 nack(requeue):
              back at once
  retry_down  x-delayed-retry-type failed, min 1000: a 0-9-1 channel that
              closes with the message unacked is a failed delivery: back
              after ~1 s, x-delivery-count 1
  retry_explicit  a plain quorum queue: an AMQP 1.0 modified outcome with
              annotation x-opt-delivery-time = now + 3 s holds the requeued
              message until then

Each case prints what it measured (ms from publish or settle to delivery)
and ok or FAIL; the exit code is 1 if any case failed."""
import os
import subprocess
import sys
import time
import uuid

import pika

PORT = int(sys.argv[1]) if len(sys.argv) > 1 else 5672
WANT = sys.argv[2:]
DELAY_MS = 3000
EARLY_SLACK_MS = 5      # the broker's and our clocks are the same clock
LATE_SLACK_MS = 1500    # the timer fires, the consumer gets it: well under
FAILED = []


def now_ms():
    return int(time.time() * 1000)


def log(msg):
    print(msg, flush=True)


def verdict(name, ok, what):
    log("%-14s %s  %s" % (name, "ok  " if ok else "FAIL", what))
    if not ok:
        FAILED.append(name)


def conn():
    return pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", PORT, credentials=pika.PlainCredentials("guest", "guest"),
        heartbeat=0, blocked_connection_timeout=30))


def qname(tag):
    return "qqdelay.%s.%s" % (tag, uuid.uuid4().hex[:6])


def declare_qq(ch, name, **args):
    a = {"x-queue-type": "quorum"}
    a.update(args)
    ch.queue_declare(name, durable=True, arguments=a)
    return name


def publish(ch, q, body, headers=None, exchange=""):
    ch.basic_publish(exchange, q, body, pika.BasicProperties(headers=headers, delivery_mode=2),
                     mandatory=True)


def arrivals(c, ch, q, n, timeout_s, ack=True):
    """Consume q until n messages came or timeout_s passed: [(ms, body, headers)]."""
    got = []

    def on_msg(chan, method, props, body):
        got.append((now_ms(), body.decode(errors="replace"), props.headers or {}))
        if ack:
            chan.basic_ack(method.delivery_tag)
    ch.basic_qos(prefetch_count=100)
    tag = ch.basic_consume(q, on_msg)
    end = time.time() + timeout_s
    while len(got) < n and time.time() < end:
        c.process_data_events(time_limit=0.02)
    ch.basic_cancel(tag)
    return got


def held_verdict(name, t0, due, got, expect_held):
    if not got:
        verdict(name, False, "nothing delivered")
        return
    t = got[0][0]
    if expect_held:
        ok = t >= due - EARLY_SLACK_MS and t <= due + LATE_SLACK_MS
        verdict(name, ok, "held: delivered %d ms after publish, %+d ms from its due time" % (t - t0, t - due))
    else:
        ok = t - t0 < 1000
        verdict(name, ok, "not held: delivered %d ms after publish (due %+d ms)" % (t - t0, due - t0))


def broker_version():
    c = conn()
    v = c._impl.server_properties.get("version", b"?")
    c.close()
    return v.decode() if isinstance(v, bytes) else str(v)


VERSION = broker_version()
# qq-vNext's builds name their ref in the version (build_qq_delay.sh);
# QQ_DELAY_EXPECT=1|0 says it for any other broker.
QQ_DELAYS = os.environ.get("QQ_DELAY_EXPECT", "1" if ".qq." in VERSION else "0") == "1"


# -- publish-time delays ------------------------------------------------------

def case_pub091():
    c = conn()
    ch = c.channel()
    ch.confirm_delivery()
    q = declare_qq(ch, qname("pub091"))
    t0 = now_ms()
    due = t0 + DELAY_MS
    publish(ch, q, "m", {"x-opt-delivery-time": due})
    # While held: not ready (queue.declare's count) and basic.get finds nothing.
    if QQ_DELAYS:
        time.sleep(0.5)
        ready = ch.queue_declare(q, passive=True).method.message_count
        empty = ch.basic_get(q, auto_ack=False)[0] is None
    got = arrivals(c, ch, q, 1, 6)
    held_verdict("pub091", t0, due, got, QQ_DELAYS)
    if QQ_DELAYS:
        verdict("pub091.ready", ready == 0 and empty,
                "0.5 s in: message_count %d, basic.get %s" % (ready, "empty" if empty else "got it"))
        if got:
            log("               delivered headers: %s" % got[0][2])
    ch.queue_delete(q)
    c.close()


def amqp10():
    from proton.utils import BlockingConnection
    return BlockingConnection("amqp://127.0.0.1:%d" % PORT, timeout=30, user="guest", password="guest",
                              allowed_mechs="PLAIN", allow_insecure_mechs=True)


def case_pub10():
    from proton import Message, symbol, timestamp
    c = conn()
    ch = c.channel()
    for name, wrap in (("pub10.long", int), ("pub10.timestamp", timestamp)):
        q = declare_qq(ch, qname("pub10"))
        a = amqp10()
        snd = a.create_sender("/queues/%s" % q)
        t0 = now_ms()
        due = t0 + DELAY_MS
        snd.send(Message(body=b"m", inferred=True, durable=True,
                         annotations={symbol("x-opt-delivery-time"): wrap(due)}), timeout=30)
        a.close()
        got = arrivals(c, ch, q, 1, 6)
        held_verdict(name, t0, due, got, QQ_DELAYS)
        ch.queue_delete(q)
    c.close()


def case_order():
    c = conn()
    ch = c.channel()
    ch.confirm_delivery()
    q = declare_qq(ch, qname("order"))
    t0 = now_ms()
    publish(ch, q, "later", {"x-opt-delivery-time": t0 + DELAY_MS})
    publish(ch, q, "now")
    got = arrivals(c, ch, q, 2, 6)
    order = [b for _, b, _ in got]
    want = ["now", "later"] if QQ_DELAYS else ["later", "now"]
    verdict("order", order == want, "delivered in order %s at +%s ms" % (order, [t - t0 for t, _, _ in got]))
    ch.queue_delete(q)
    c.close()


def case_forms():
    c = conn()
    ch = c.channel()
    ch.confirm_delivery()
    import datetime
    t0 = now_ms()
    forms = [
        ("forms.past", lambda t0: {"x-opt-delivery-time": t0 - 60000}),
        ("forms.string", lambda t0: {"x-opt-delivery-time": str(t0 + DELAY_MS)}),
        ("forms.delay", lambda t0: {"x-opt-delivery-delay": DELAY_MS}),
    ]
    for name, h in forms:
        q = declare_qq(ch, qname("forms"))
        t0 = now_ms()
        publish(ch, q, "m", h(t0))
        got = arrivals(c, ch, q, 1, 6)
        held_verdict(name, t0, t0 + DELAY_MS, got, False)
        ch.queue_delete(q)
    # A 0-9-1 timestamp ('T', whole seconds; pika sends a datetime as one):
    # the broker reads it as that second's first ms, so it is held, but
    # until up to 999 ms before the intended time.
    q = declare_qq(ch, qname("forms"))
    t0 = now_ms()
    due = (t0 + DELAY_MS) // 1000 * 1000
    publish(ch, q, "m", {"x-opt-delivery-time": datetime.datetime.fromtimestamp(
        (t0 + DELAY_MS) / 1000.0, datetime.timezone.utc)})
    got = arrivals(c, ch, q, 1, 6)
    held_verdict("forms.T", t0, due, got, QQ_DELAYS)
    if got:
        log("               ('T' %d s: due at %+d ms, the intended time %+d ms)"
            % (due // 1000, due - t0, DELAY_MS))
    ch.queue_delete(q)
    c.close()


# -- dead-lettered messages ---------------------------------------------------

def case_dlx_classic():
    c = conn()
    ch = c.channel()
    ch.confirm_delivery()
    tgt = declare_qq(ch, qname("dlxc.tgt"))
    src = qname("dlxc.src")
    ch.queue_declare(src, durable=True, arguments={"x-queue-type": "classic", "x-message-ttl": 500,
                                                   "x-dead-letter-exchange": "",
                                                   "x-dead-letter-routing-key": tgt})
    t0 = now_ms()
    due = t0 + DELAY_MS
    publish(ch, src, "m", {"x-opt-delivery-time": due})
    got = arrivals(c, ch, tgt, 1, 6)
    # rabbit_dead_letter:publish delivers "stateless": an untracked enqueue,
    # which qq-vNext's rabbit_fifo does not check for a delivery time.
    if got:
        t = got[0][0]
        held = t >= due - EARLY_SLACK_MS
        log("dlx_classic    ----  expired after 500 ms, delivered from the quorum queue %d ms after "
            "publish (%s; due %+d ms)" % (t - t0, "held" if held else "not held", due - t0))
        verdict("dlx_classic", not held and t - t0 >= 450,
                "expected: not held (at-most-once dead-lettering is an untracked enqueue)")
    else:
        verdict("dlx_classic", False, "nothing delivered")
    ch.queue_delete(src)
    ch.queue_delete(tgt)
    c.close()


def case_dlx_ttl():
    """A quorum queue with x-message-ttl 500 and a DLX (both strategies),
    a message with x-opt-delivery-time = now + 3 s: qq-vNext holds it in
    the source for the 3 s (the TTL does not take it out of the delay) and
    it expires into the target when due; 4.3 expires it after 500 ms."""
    c = conn()
    ch = c.channel()
    ch.confirm_delivery()
    for strategy in ("at-most-once", "at-least-once"):
        name = "dlx_ttl." + strategy
        tgt = declare_qq(ch, qname("ttl.tgt"))
        args = {"x-message-ttl": 500, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": tgt,
                "x-dead-letter-strategy": strategy}
        if strategy == "at-least-once":
            args["x-overflow"] = "reject-publish"
        src = declare_qq(ch, qname("ttl.src"), **args)
        t0 = now_ms()
        due = t0 + DELAY_MS
        publish(ch, src, "m", {"x-opt-delivery-time": due})
        got = arrivals(c, ch, tgt, 1, 8)
        if got:
            t = got[0][0]
            reason = got[0][2].get("x-first-death-reason")
            if QQ_DELAYS:
                ok = due - EARLY_SLACK_MS <= t <= due + LATE_SLACK_MS
            else:
                ok = 450 <= t - t0 <= 1500
            verdict(name, ok and reason == "expired",
                    "dead-lettered (%s) %d ms after publish (due %+d ms, ttl 500 ms)" % (reason, t - t0, DELAY_MS))
        else:
            verdict(name, False, "nothing dead-lettered")
        ch.queue_delete(src)
        ch.queue_delete(tgt)
    c.close()


class Settler:
    """An AMQP 1.0 receiver that settles the first message it gets as
    modified(delivery-failed, undeliverable-here, annotations)."""

    def __init__(self, q, annotations, failed=True, undeliverable=True, count=1, prefetch=10):
        from proton.handlers import MessagingHandler
        outer = self

        class H(MessagingHandler):
            def __init__(self):
                # Credit 10: with credit 1, topped up after each delivery
                # (proton's flow controller), a message returned to the
                # delay a second time was not delivered again though ready
                # (4.3.6 and qq-vNext alike; see tests/bench/qq-delay-notes.md).
                super().__init__(auto_accept=False, prefetch=prefetch)
                self.times = []

            def on_start(self, event):
                self.conn = event.container.connect(
                    "amqp://127.0.0.1:%d" % PORT, user="guest", password="guest",
                    allowed_mechs="PLAIN", allow_insecure_mechs=True)
                event.container.create_receiver(self.conn, "/queues/%s" % q)

            def on_message(self, event):
                from proton import Delivery, symbol
                self.times.append(now_ms())
                d = event.delivery
                anns = annotations(len(self.times)) if callable(annotations) else annotations
                if anns:
                    d.local.annotations = {symbol(k): v for k, v in anns.items()}
                d.local.failed = failed
                d.local.undeliverable = undeliverable
                d.update(Delivery.MODIFIED)
                d.settle()
                if len(self.times) >= count:
                    event.receiver.close()
                    event.connection.close()
        self.h = H()
        outer.times = self.h.times

    def run(self, timeout_s=20):
        from proton.reactor import Container
        import threading
        cont = Container(self.h)
        th = threading.Thread(target=cont.run, daemon=True)
        th.start()
        th.join(timeout_s)
        return self.h.times


def case_dlx_qq():
    c = conn()
    ch = c.channel()
    ch.confirm_delivery()
    for strategy in ("at-most-once", "at-least-once"):
        name = "dlx_qq." + strategy
        tgt = declare_qq(ch, qname("dlxq.tgt"))
        args = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": tgt,
                "x-dead-letter-strategy": strategy}
        if strategy == "at-least-once":
            args["x-overflow"] = "reject-publish"
        src = declare_qq(ch, qname("dlxq.src"), **args)
        publish(ch, src, "m")
        due = [None]

        def anns(_n):
            due[0] = now_ms() + DELAY_MS
            return {"x-opt-delivery-time": due[0]}
        times = Settler(src, anns).run(10)
        if not times:
            verdict(name, False, "the AMQP 1.0 receiver got nothing")
            continue
        t0 = times[0]
        got = arrivals(c, ch, tgt, 1, 6)
        if got:
            t = got[0][0]
            held = t >= due[0] - EARLY_SLACK_MS
            log("%-14s ----  settled modified(undeliverable-here, x-opt-delivery-time +%d ms): delivered "
                "from the target %d ms later (%s); headers %s"
                % (name, DELAY_MS, t - t0, "held" if held else "not held",
                   {k: v for k, v in got[0][2].items() if k != "x-death"}))
            # at-least-once: the dlx worker enqueues tracked, so the target holds it;
            # at-most-once: rabbit_dead_letter:publish, untracked, not held.
            want = QQ_DELAYS and strategy == "at-least-once"
            verdict(name, held == want and (not held or t <= due[0] + LATE_SLACK_MS),
                    "expected: %s" % ("held" if want else "not held"))
        else:
            verdict(name, False, "nothing dead-lettered")
        ch.queue_delete(src)
        ch.queue_delete(tgt)
    c.close()


def case_restart():
    d = os.environ.get("QQ_DELAY_NODE_DIR")
    if not d:
        log("restart        skip  (QQ_DELAY_NODE_DIR not set)")
        return
    here = os.path.dirname(os.path.abspath(__file__))
    c = conn()
    ch = c.channel()
    ch.confirm_delivery()
    q = declare_qq(ch, qname("restart"))
    t0 = now_ms()
    due = t0 + 25000
    publish(ch, q, "m", {"x-opt-delivery-time": due})
    c.close()
    env = dict(os.environ)
    env.setdefault("DB_RABBITMQ", "qq-delay" if QQ_DELAYS else "4.3")
    subprocess.run([os.path.join(here, "rabbitmq.sh"), "restart", d], check=True,
                   stdout=subprocess.DEVNULL, env=env)
    up = now_ms()
    c = conn()
    ch = c.channel()
    got = arrivals(c, ch, q, 1, 30)
    log("restart        ----  node restarted %d ms after publish" % (up - t0))
    if not QQ_DELAYS and got:
        verdict("restart", got[0][0] - up <= LATE_SLACK_MS,
                "not held: delivered %d ms after the node was up (due %+d ms)" % (got[0][0] - up, due - t0))
    elif QQ_DELAYS and up > due and got:
        # The node took longer to restart than the delay: due at once when up.
        verdict("restart", got[0][0] - up <= LATE_SLACK_MS,
                "held through the restart: delivered %d ms after publish, %d ms after the node was up "
                "(due %+d ms)" % (got[0][0] - t0, got[0][0] - up, due - t0))
    else:
        held_verdict("restart", t0, due, got, QQ_DELAYS)
    ch.queue_delete(q)
    c.close()


# -- delayed retry (4.3 and later) --------------------------------------------

def case_retry_returned():
    c = conn()
    ch = c.channel()
    ch.confirm_delivery()
    q = declare_qq(ch, qname("retry.ret"), **{"x-delayed-retry-type": "returned",
                                              "x-delayed-retry-min": 1000,
                                              "x-delayed-retry-max": 4000})
    publish(ch, q, "m")
    times, counts = [], []

    def on_msg(chan, method, props, body):
        times.append(now_ms())
        counts.append((props.headers or {}).get("x-delivery-count"))
        if len(times) < 4:
            chan.basic_nack(method.delivery_tag, requeue=True)
        else:
            chan.basic_ack(method.delivery_tag)
    tag = ch.basic_consume(q, on_msg)
    end = time.time() + 15
    while len(times) < 4 and time.time() < end:
        c.process_data_events(time_limit=0.02)
    ch.basic_cancel(tag)
    gaps = [b - a for a, b in zip(times, times[1:])]
    ok = len(gaps) == 3 and all(1000 - EARLY_SLACK_MS <= g <= 1000 + LATE_SLACK_MS for g in gaps)
    verdict("retry_returned", ok, "nack(requeue) x3: back after %s ms; x-delivery-count %s" % (gaps, counts))
    ch.queue_delete(q)
    c.close()


def case_retry_failed():
    c = conn()
    ch = c.channel()
    ch.confirm_delivery()
    q = declare_qq(ch, qname("retry.all"), **{"x-delayed-retry-type": "all",
                                              "x-delayed-retry-min": 1000,
                                              "x-delayed-retry-max": 2500})
    publish(ch, q, "m")
    s = Settler(q, None, failed=True, undeliverable=False, count=4)
    times = s.run(20)
    gaps = [b - a for a, b in zip(times, times[1:])]
    want = [1000, 2000, 2500]
    ok = len(gaps) == 3 and all(w - EARLY_SLACK_MS <= g <= w + LATE_SLACK_MS for g, w in zip(gaps, want))
    verdict("retry_failed", ok, "AMQP 1.0 modified(delivery-failed) x3: back after %s ms (want %s)" % (gaps, want))
    ch.queue_delete(q)

    # type failed: a 0-9-1 requeue is not a failed delivery: back at once.
    q = declare_qq(ch, qname("retry.fail"), **{"x-delayed-retry-type": "failed",
                                               "x-delayed-retry-min": 1000})
    publish(ch, q, "m")
    times = []

    def on_msg(chan, method, props, body):
        times.append(now_ms())
        if len(times) < 3:
            chan.basic_nack(method.delivery_tag, requeue=True)
        else:
            chan.basic_ack(method.delivery_tag)
    tag = ch.basic_consume(q, on_msg)
    end = time.time() + 10
    while len(times) < 3 and time.time() < end:
        c.process_data_events(time_limit=0.02)
    ch.basic_cancel(tag)
    gaps = [b - a for a, b in zip(times, times[1:])]
    verdict("retry_failed.nack", len(gaps) == 2 and all(g < 500 for g in gaps),
            "type failed, 0-9-1 nack(requeue) x2: back after %s ms (at once)" % gaps)
    ch.queue_delete(q)
    c.close()


def case_retry_explicit():
    """A plain quorum queue (no x-delayed-retry-*): an AMQP 1.0 consumer
    settles modified (not undeliverable-here) with annotation
    x-opt-delivery-time = now + 3 s: the requeued message is held until
    then (4.3 already)."""
    c = conn()
    ch = c.channel()
    ch.confirm_delivery()
    q = declare_qq(ch, qname("retry.exp"))
    publish(ch, q, "m")
    due = [None]

    def anns(n):
        if n == 1:
            due[0] = now_ms() + DELAY_MS
            return {"x-opt-delivery-time": due[0]}
        return None
    times = Settler(q, anns, failed=False, undeliverable=False, count=2).run(10)
    if len(times) == 2:
        t = times[1]
        ok = due[0] - EARLY_SLACK_MS <= t <= due[0] + LATE_SLACK_MS
        verdict("retry_explicit", ok, "modified(x-opt-delivery-time +%d ms): back after %d ms (%+d ms from due)"
                % (DELAY_MS, t - times[0], t - due[0]))
    else:
        verdict("retry_explicit", False, "deliveries at %s" % times)
    ch.queue_delete(q)
    c.close()


def case_retry_down():
    """x-delayed-retry-type failed, min 1000: a 0-9-1 consumer whose channel
    closes with the message unacked counts as a failed delivery
    (x-delivery-count 1): the next consumer gets it ~1 s later."""
    c = conn()
    ch = c.channel()
    ch.confirm_delivery()
    q = declare_qq(ch, qname("retry.down"), **{"x-delayed-retry-type": "failed",
                                               "x-delayed-retry-min": 1000})
    publish(ch, q, "m")
    ch2 = c.channel()
    got = arrivals(c, ch2, q, 1, 5, ack=False)
    t0 = now_ms()
    ch2.close()
    got2 = arrivals(c, ch, q, 1, 5)
    if got and got2:
        g = got2[0][0] - t0
        verdict("retry_down", 1000 - EARLY_SLACK_MS <= g <= 1000 + LATE_SLACK_MS,
                "channel closed unacked: back after %d ms, x-delivery-count %s"
                % (g, got2[0][2].get("x-delivery-count")))
    else:
        verdict("retry_down", False, "deliveries %s then %s" % (got, got2))
    ch.queue_delete(q)
    c.close()


CASES = [("pub091", case_pub091), ("pub10", case_pub10), ("order", case_order), ("forms", case_forms),
         ("dlx_classic", case_dlx_classic), ("dlx_qq", case_dlx_qq), ("dlx_ttl", case_dlx_ttl),
         ("restart", case_restart),
         ("retry_returned", case_retry_returned), ("retry_failed", case_retry_failed),
         ("retry_explicit", case_retry_explicit), ("retry_down", case_retry_down)]

log("RabbitMQ %s on port %d: publish-time delays in quorum queues %s"
    % (VERSION, PORT, "expected" if QQ_DELAYS else "not expected"))
for n, f in CASES:
    if WANT and n not in WANT:
        continue
    try:
        f()
    except Exception as e:  # a case that blows up is a failed case, the others still run
        verdict(n, False, "%s: %s" % (type(e).__name__, e))
log("%d failed: %s" % (len(FAILED), " ".join(FAILED)) if FAILED else "all ok")
sys.exit(1 if FAILED else 0)
