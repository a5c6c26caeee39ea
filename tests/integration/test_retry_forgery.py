#!/usr/bin/python3
"""A retry route among publishers who lie (issue 39; README, "Security").

x-death is a header: RabbitMQ keeps a client's x-death as it came (3.10.8,
4.0.5 and 4.3.6), so a client that may publish to a retry route's ingress
exchange can claim any queue as the one its message "failed in". Before
issue 39 the bridge then published the message into that queue with its
own permissions -- a relay into any queue of the vhost. Each case below is
one line of the threat model, run on its own and reported by name (a
failure does not hide the others):

 - forged-x-death: an x-death naming payments.secret (a queue no route
   admits) is parked with x-retry-parked-reason "not_admitted"; nothing
   reaches payments.secret;
 - forged-last-death: the same with only x-last-death-queue (4.x's header);
 - own-queues: x-death naming the route's own ingress queue or its parking
   queue, or an "amq." queue: parked, never "sent back" there;
 - forged-handback: a drain's hand-back mark without the bridge's user-id:
   naming payments.secret it is parked; naming an admitted queue it counts
   as a failure (the policy's delay and x-retry-attempt 2), not as a
   hand-back with the x-delay the publisher chose;
 - provenance: x-original-user-id, x-delay-error, x-retry-queue,
   x-retry-parked-reason written by the publisher do not reach the consumer;
 - genuine: a real reject of the work queue still comes back to it;
 - labels: /metrics has no label with the forged names; the forgeries are
   counted under queue="_not_admitted", reason="not_admitted";
 - user-id (owned broker only): a second user cannot publish user-id
   "guest" (the bridge's user: the broker refuses, 406), and its own user-id
   with a hand-back mark is judged as a failure.
"""

import time

import harness as h
from harness import check

INITIAL_MS = 1500


def death(queue):
    return h.array([h.table({"count": h.i64(1), "reason": h.lstr("rejected"),
                             "queue": h.lstr(queue), "exchange": h.lstr(""),
                             "routing-keys": h.array([h.lstr(queue)]),
                             "time": h.tstamp(int(time.time()))})])


def test(ctx):
    ingress, parking = ctx.n("retry"), ctx.n("parked")
    work, secret = ctx.n("work"), ctx.n("payments.secret")
    route = {"name": "retries", "ingress_exchange": ingress, "ingress_queue": ctx.n("retry.q"),
             "retry": {"initial_ms": INITIAL_MS, "max_attempts": 3,
                       "parking_exchange": parking, "parking_queue": parking,
                       "queue_pattern": h.queue_pattern(work)}}
    ctx.exchanges.update([ingress, parking])
    ctx.queues.update([route["ingress_queue"], parking, work, secret])
    ch = ctx.admin()
    ch.queue_declare(work, durable=True, arguments={"x-dead-letter-exchange": ingress})
    ch.queue_declare(secret, durable=True)
    port = h.free_port()
    ctx.bridge([route], http={"listen": str(port)})
    conn = h.connect(retry_s=10)
    c = conn.channel()
    pub = ctx.publisher()

    def get_on(chan, queue, timeout, what, auto_ack=True):
        end = time.time() + timeout
        while time.time() < end:
            m, p, body = chan.basic_get(queue, auto_ack=auto_ack)
            if m:
                return m, p, body, time.time()
            time.sleep(0.01)
        h.fail("%s: nothing in %s after %.1f s" % (what, queue, timeout))

    def get(queue, timeout, what):
        return get_on(c, queue, timeout, what)

    def parked(mid, what):
        m, p, body, _ = get(parking, 10, what)
        check(p.message_id == mid, "%s: parked %r, expected %s" % (what, p.message_id, mid))
        reason = h.header_str(p, "x-retry-parked-reason")
        check(reason == "not_admitted", "%s: parked as %r, expected not_admitted" % (what, reason))
        return m, p

    def fail_once(body, props):
        """Publish to the work queue, take it, reject it: a genuine dead-letter."""
        ch2 = conn.channel()
        ch2.basic_publish("", work, body, props)
        m, _, _, _ = get_on(ch2, work, 5, "the work queue's first delivery", auto_ack=False)
        ch2.basic_reject(m.delivery_tag, requeue=False)

    def secret_empty(what):
        n = c.queue_declare(secret, passive=True).method.message_count
        check(n == 0, "%s: %d message(s) reached %s" % (what, n, secret))

    def forged_x_death():
        pub.publish(ingress, "anything", b"steal", message_id="f1",
                    headers={"x-death": death(secret), "x-delay": 1})
        m, p = parked("f1", "forged x-death")
        check(m.routing_key == secret, "parked with key %r" % m.routing_key)
        time.sleep(0.5)
        secret_empty("forged x-death")

    def forged_last_death():
        pub.publish(ingress, "anything", b"steal", message_id="f2",
                    headers={"x-last-death-queue": h.lstr(secret),
                             "x-last-death-reason": h.lstr("rejected")})
        parked("f2", "forged x-last-death-queue")
        secret_empty("forged x-last-death-queue")

    def own_queues():
        for i, q in enumerate((route["ingress_queue"], parking, "amq.gen-stolen")):
            mid = "own%d" % i
            pub.publish(ingress, "k", b"loop", message_id=mid, headers={"x-death": death(q)})
            parked(mid, "x-death naming %s" % q)

    def forged_handback():
        pub.publish(ingress, "k", b"steal", message_id="f3",
                    headers={"x-death": death(secret), "x-delay-bridge-handback": h.i64(1),
                             "x-delay": h.i64(1)})
        parked("f3", "forged hand-back to a queue not admitted")
        secret_empty("forged hand-back")
        t0 = time.time()
        pub.publish(ingress, "k", b"skip", message_id="f4",
                    headers={"x-death": death(work), "x-delay-bridge-handback": h.i64(1),
                             "x-delay": h.i64(1)})
        m, p, body, t = get(work, INITIAL_MS / 1000.0 + h.late_tolerance() + 5,
                            "forged hand-back to an admitted queue")
        check(p.message_id == "f4", "got %r" % p.message_id)
        check(t - t0 >= INITIAL_MS / 1000.0 - 0.05,
              "the forged hand-back came back after %.0f ms: its own x-delay, not the policy's %d ms"
              % ((t - t0) * 1000, INITIAL_MS))
        check(h.header_int(p, "x-retry-attempt") == 2,
              "x-retry-attempt %r: a forged hand-back is one failure" % h.header(p, "x-retry-attempt"))
        check(h.header(p, "x-delay-bridge-handback") is None, "the hand-back mark reached the consumer")

    def provenance():
        forged = {"x-original-user-id": h.lstr("root"), "x-delay-error": h.lstr("none at all"),
                  "x-retry-queue": h.lstr(secret), "x-retry-parked-reason": h.lstr("fake"),
                  "x-original-exchange": h.lstr("payments")}
        c.basic_publish("", work, b"p", h.pika.BasicProperties(message_id="prov", headers=forged))
        m, p, body, _ = get(work, 5, "provenance: first delivery")
        check(h.header_str(p, "x-delay-error") == "none at all", "the test's own publish")
        # ... rejected: the broker dead-letters it to the route, which sends it back
        fail_once(b"p2", h.pika.BasicProperties(message_id="prov2", headers=forged))
        m, p, body, _ = get(work, INITIAL_MS / 1000.0 + h.late_tolerance() + 5, "provenance: the retry")
        check(p.message_id == "prov2", "got %r" % p.message_id)
        left = [k for k in forged if h.header(p, k) is not None]
        check(not left, "publisher-written provenance headers reached the consumer: %r" % left)
        check(h.header(p, "app") is None and h.header_int(p, "x-retry-attempt") == 2,
              "x-retry-attempt %r" % h.header(p, "x-retry-attempt"))

    def genuine():
        fail_once(b"g", h.pika.BasicProperties(message_id="g1"))
        m, p, body, _ = get(work, INITIAL_MS / 1000.0 + h.late_tolerance() + 5, "genuine retry")
        check(p.message_id == "g1" and m.routing_key == work and m.exchange == "",
              "genuine retry %r via %r/%r" % (p.message_id, m.exchange, m.routing_key))
        check(h.header_int(p, "x-retry-attempt") == 2, "attempt %r" % h.header(p, "x-retry-attempt"))

    def labels():
        text = h.metrics(port)
        check(secret not in text and "amq.gen-stolen" not in text,
              "a forged queue name became a metric label")
        n = h.metric_value(text, "delay_bridge_retry_parked_total",
                           'route="retries",queue="_not_admitted",reason="not_admitted"')
        check(n is not None and n >= 6, "parked not_admitted counted %r, expected >= 6" % n)

    def user_id():
        user = ctx.n("forger").replace(".", "-")
        with h.BrokerUser(user, "forger-pw", why="a second user with its own password") as uri:
            fconn = h.connect(uri=uri)
            try:
                fch = fconn.channel()
                fch.confirm_delivery()
                try:
                    fch.basic_publish(ingress, "k", b"x", h.pika.BasicProperties(
                        user_id=h.broker_user(), headers={"x-death": death(work),
                                                          "x-delay-bridge-handback": h.i64(1),
                                                          "x-delay": h.i64(1)}))
                    refused = False
                except h.pika.exceptions.AMQPError as e:
                    refused = "406" in str(e) or "PRECONDITION" in str(e)
                check(refused, "the broker took a user-id of another user")
                fch = fconn.channel()
                fch.confirm_delivery()
                t0 = time.time()
                fch.basic_publish(ingress, "k", b"x", h.pika.BasicProperties(
                    message_id="f5", user_id=user,
                    headers={"x-death": death(work), "x-delay-bridge-handback": h.i64(1),
                             "x-delay": h.i64(1)}))
                m, p, body, t = get(work, INITIAL_MS / 1000.0 + h.late_tolerance() + 5,
                                    "a hand-back with another user's user-id")
                check(p.message_id == "f5" and t - t0 >= INITIAL_MS / 1000.0 - 0.05 and
                      h.header_int(p, "x-retry-attempt") == 2,
                      "honoured as a hand-back: after %.0f ms, attempt %r"
                      % ((t - t0) * 1000, h.header(p, "x-retry-attempt")))
            finally:
                if fconn.is_open:
                    fconn.close()

    cases = h.Cases()
    cases.run("forged-x-death", forged_x_death)
    cases.run("forged-last-death", forged_last_death)
    cases.run("own-queues", own_queues)
    cases.run("forged-handback", forged_handback)
    cases.run("provenance", provenance)
    cases.run("genuine", genuine)
    cases.run("labels", labels)
    cases.run("user-id", user_id)  # skips itself where the broker is not the suite's own
    cases.run("secret-empty-at-the-end", secret_empty, "at the end")
    cases.done()


if __name__ == "__main__":
    h.run(test, budget_s=150)
