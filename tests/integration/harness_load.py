"""harness_load.py -- load for delay-bridge's integration tests: publishers
that keep the broker busy (harness.py has the rest; the Publisher these
build on and the crash tests' publish_killing and publish_burst are there).

    import harness_load as hl
    hl.publish_pipelined(ingress, [(rk, body, props), ...])
    feeder = hl.Feeder(ingress, message, seed, pause_s)
"""

import random
import threading
import time

import harness as h

import pika
import pika.spec


def publish_pipelined(exchange, items, timeout=60):
    """Publish [(routing_key, body, BasicProperties)] (or [(exchange,
    routing_key, body, BasicProperties)]: that exchange, not `exchange`) on
    one channel in confirm mode without waiting for each confirm (pika's
    asynchronous connection): returns once the broker confirmed them all;
    fails on a nack, an error, or after timeout seconds."""
    state = {"acked": 0, "nacked": 0, "lo": 1, "error": None}
    n = len(items)
    outstanding = set(range(1, n + 1))

    def on_confirm(frame):
        # confirms for different queues may come out of order: count tags, not frames
        m = frame.method
        nack = isinstance(m, pika.spec.Basic.Nack)
        tags = range(state["lo"], m.delivery_tag + 1) if m.multiple else [m.delivery_tag]
        for t in tags:
            if t in outstanding:
                outstanding.discard(t)
                state["nacked" if nack else "acked"] += 1
        if m.multiple:
            state["lo"] = max(state["lo"], m.delivery_tag + 1)
        if not outstanding:
            conn.close()

    def on_channel(ch):
        ch.confirm_delivery(on_confirm)
        for it in items:
            if len(it) == 3:
                it = (exchange,) + tuple(it)
            ch.basic_publish(*it)

    def on_fail(c, err):
        state["error"] = err
        c.ioloop.stop()

    conn = pika.SelectConnection(pika.URLParameters(h.broker_uri()),
                                 on_open_callback=lambda c: c.channel(on_open_callback=on_channel),
                                 on_open_error_callback=on_fail,
                                 on_close_callback=lambda c, r: c.ioloop.stop())
    conn.ioloop.call_later(timeout, lambda: (state.update(error="timeout"), conn.close()))
    conn.ioloop.start()
    h.check(state["error"] is None, "pipelined publish failed: %r" % (state["error"],))
    h.check(state["acked"] == n and state["nacked"] == 0,
            "pipelined publish: %d acked, %d nacked of %d" % (state["acked"], state["nacked"], n))


class Feeder(threading.Thread):
    """Publishes with confirms in the background (routing key "rk") until
    stop_flag is set or, with limit, limit messages went out, pause_s
    between publishes. message(i, rng) -> (message_id, body, delay ms) of
    the i-th, rng a random.Random(seed). sent: message_id -> (time just
    before the publish, delay ms), recorded once the broker confirmed it;
    error: what ended the thread early (for the test thread to report)."""

    def __init__(self, exchange, message, seed, pause_s, limit=None, name="feeder"):
        threading.Thread.__init__(self, name=name, daemon=True)
        self.exchange, self.message, self.pause_s, self.limit = exchange, message, pause_s, limit
        self.rng = random.Random(seed)
        self.sent = {}
        self.lock = threading.Lock()
        self.stop_flag = threading.Event()
        self.error = None

    def run(self):
        p = None
        try:
            p = h.Publisher(retry_s=10)
            i = 0
            while not self.stop_flag.is_set() and (self.limit is None or i < self.limit):
                mid, body, ms = self.message(i, self.rng)
                t = p.publish(self.exchange, "rk", body, headers={"x-delay": h.i32(ms)},
                              message_id=mid, delivery_mode=2)
                with self.lock:
                    self.sent[mid] = (t, ms)
                i += 1
                time.sleep(self.pause_s)
        except BaseException as e:  # reported by the test thread
            self.error = e
        finally:
            if p is not None:
                p.close()

    def snapshot(self):
        with self.lock:
            return dict(self.sent)
