#!/usr/bin/python3
"""A retry route, case by case, against a real broker (README, "Retries with
backoff"). Work queues name the route's ingress exchange as their
x-dead-letter-exchange; a consumer here rejects with requeue=false.

 - back to its queue: a message rejected once comes back to the queue it
   failed in (exchange "", routing key = the queue), never before the
   bridge's receipt of the failure + the backoff (x-retry-history[0] +
   initial_ms, zero tolerance) and within DB_TEST_LATE_S after it; with
   x-retry-attempt 2, its body, properties and headers kept; a second queue
   with its own policy (retry.queues) uses that one; a queue bound to the
   same original exchange does not get it;
 - a poison message: rejected every time, it comes back max_attempts - 1
   times at initial x multiplier^(n-1) apart, then is parked once
   (x-retry-parked-reason max_attempts, x-retry-attempts, a history of
   max_attempts times, x-retry-queue), routed by its queue's name;
 - parks for the other reasons: published straight to the retry exchange
   (no x-death: no_queue), expired in its queue (reason: "expired" is not
   retried by default), and a queue deleted while its retry waits
   (queue_gone, after the broker returned the send back);
 - x-delay-key: a newer failure of the same key replaces the waiting
   retry; GET /pending?queue= lists a waiting retry; DELETE
   /pending/R/KEY cancels it, and it never comes back; POST /purge?queue=
   removes the retries of one queue;
 - kill -9 while a retry waits: it is durable (acked only after the
   commit), comes back once after the restart, not before its due time;
 - a drain hands a waiting retry to the next bridge, which sends it back
   when what remained of its delay has passed, still as attempt 2;
 - the metrics count each of these per (route, queue);
 - --check-config warns about a retry route with a quorum ingress queue
   (README: dead-lettering into it is dropped while it has no leader).

Named cases (harness.Cases: each runs and is reported even when one before
it failed): quorum_ingress_warns, back_once_on_time, queue_policy,
poison_parked, park_no_queue, park_expired, park_queue_gone,
key_replace_cancel, purge_by_queue, metrics, kill9_durable, drain_handback.
"""

import json
import os
import time

import harness as h
from harness import check

INITIAL_MS = 400
MAX_ATTEMPTS = 3


def test(ctx):
    ingress = ctx.n("retry")
    parking = ctx.n("parked")
    origin = ctx.declare_exchange(ctx.n("orders"), "direct")
    work, fast, other, gone, ttlq = (ctx.n(x) for x in ("work", "fast", "other", "gone", "ttl"))
    ch = ctx.admin()
    for q in (work, fast, other, gone, ttlq):
        ch.queue_declare(q, durable=True, arguments={"x-dead-letter-exchange": ingress})
        ctx.queues.add(q)
    ch.queue_bind(work, origin, routing_key="order.created")
    ch.queue_bind(other, origin, routing_key="order.created")
    route = {
        "name": "retries", "ingress_exchange": ingress, "ingress_queue": ctx.n("retry.q"),
        "retry": {"initial_ms": INITIAL_MS, "multiplier": 2, "max_attempts": MAX_ATTEMPTS,
                  "parking_exchange": parking, "parking_queue": parking,
                  "queue_pattern": h.queue_pattern(work, other, gone, ttlq),
                  "queues": {fast: {"initial_ms": 150, "max_attempts": 2},
                             ctx.n("slow"): {"initial_ms": 60000}}},
    }
    ctx.exchanges.update([ingress, parking])
    ctx.queues.update([route["ingress_queue"], parking])

    # a quorum ingress is allowed, with the warning that says why classic is better
    def case_quorum_ingress_warns():
        qpath = os.path.join(ctx.tmp, "quorum.json")
        with open(qpath, "w") as f:
            json.dump(ctx.config([dict(route, queue_type="quorum")]), f)
        _, _, err = h.bridge_cli("-c", qpath, "--check-config", expect=0)
        check("a retry route with a quorum ingress queue" in err and "routes[0].queue_type" in err,
              "no warning about a quorum ingress: %r" % err[-400:])

    cases = h.Cases()
    cases.run("quorum_ingress_warns", case_quorum_ingress_warns)

    port = h.free_port()
    b = ctx.bridge([route], http={"listen": str(port)})
    conn = h.connect(retry_s=10)
    c = conn.channel()

    def get(queue, timeout, what):
        """Poll one message off queue: (method, props, body, receive time)."""
        end = time.time() + timeout
        while time.time() < end:
            m, p, body = c.basic_get(queue)
            if m:
                return m, p, body, time.time()
            time.sleep(0.005)
        h.fail("%s: nothing in %s after %.1fs" % (what, queue, timeout))

    def history(p):
        v = h.header(p, "x-retry-history")
        return [x.plain() if hasattr(x, "plain") else x for x in (v.plain() if v else [])]

    def late():
        return h.late_tolerance()

    # --- back to its queue, once, on time, as it was ----------------------------------
    def case_back_once_on_time():
        props = dict(message_id="m1", content_type="application/json", correlation_id="c1",
                     delivery_mode=2, headers={"app": h.lstr("kept")})
        c.basic_publish(origin, "order.created", b'{"n": 1}', h.pika.BasicProperties(**props))
        m, p, body, _ = get(other, 5, "the bystander queue")
        c.basic_ack(m.delivery_tag)
        m, p, body, _ = get(work, 5, "first delivery")
        c.basic_reject(m.delivery_tag, requeue=False)
        m, p, body, t = get(work, INITIAL_MS / 1000.0 + late() + 5, "the retry")
        hist = history(p)
        check(len(hist) == 1, "x-retry-history %r: one failure" % hist)
        early = hist[0] + INITIAL_MS - t * 1000.0
        check(early <= 0, "the retry came %.1f ms before receipt + initial_ms" % early)
        check(-early <= late() * 1000, "the retry came %.0f ms after its due time" % -early)
        h.log("retry 1 came %.1f ms after receipt + %d ms" % (-early, INITIAL_MS))
        check(h.header_int(p, "x-retry-attempt") == 2, "x-retry-attempt %r" % h.header(p, "x-retry-attempt"))
        check(m.exchange == "" and m.routing_key == work,
              "sent back through %r with key %r, expected the default exchange and %s"
              % (m.exchange, m.routing_key, work))
        check(body == b'{"n": 1}' and p.message_id == "m1" and p.content_type == "application/json"
              and p.correlation_id == "c1" and h.header_str(p, "app") == "kept",
              "body or properties changed: %r %r" % (body, p))
        death = h.header(p, "x-death")
        check(death is not None, "the broker's x-death was not kept")
        c.basic_ack(m.delivery_tag)
        time.sleep(0.5)
        check(c.basic_get(other)[0] is None, "the bystander queue got the retry too")

    # --- a queue's own policy: 150 ms, and parked after its 2nd attempt -------------------
    def case_queue_policy():
        c.basic_publish("", fast, b"f", h.pika.BasicProperties(message_id="f1"))
        m, p, body, _ = get(fast, 5, "fast: first delivery")
        c.basic_reject(m.delivery_tag, requeue=False)
        m, p, body, t = get(fast, 0.15 + late() + 5, "fast: the retry")
        early = history(p)[0] + 150 - t * 1000.0
        check(early <= 0 and -early < 350, "fast: retry %.1f ms from due: not its queue's 150 ms"
              % -early)
        c.basic_reject(m.delivery_tag, requeue=False)
        m, p, body, _ = get(parking, 5, "fast: parked after attempt 2")
        check(h.header_str(p, "x-retry-parked-reason") == "max_attempts" and
              h.header_int(p, "x-retry-attempts") == 2, "fast: parked as %r" % p.headers)
        c.basic_ack(m.delivery_tag)

    # --- a poison message: max_attempts deliveries, backoff doubling, parked once ------
    def case_poison_parked():
        c.basic_publish("", work, b"poison", h.pika.BasicProperties(message_id="poison"))
        times = []
        for n in range(1, MAX_ATTEMPTS + 1):
            m, p, body, t = get(work, INITIAL_MS * 2 ** n / 1000.0 + late() + 5, "poison %d" % n)
            times.append(t)
            check((h.header_int(p, "x-retry-attempt") or 1) == n, "poison: attempt %d said %r" %
                  (n, h.header(p, "x-retry-attempt")))
            if n > 1:
                due = history(p)[-1] + INITIAL_MS * 2 ** (n - 2)
                check(t * 1000.0 >= due, "poison attempt %d early by %.1f ms" % (n, due - t * 1000.0))
            c.basic_reject(m.delivery_tag, requeue=False)
        m, p, body, _ = get(parking, 5, "poison: parked")
        check(body == b"poison" and m.routing_key == work, "parked %r with key %r" % (body, m.routing_key))
        check(h.header_str(p, "x-retry-parked-reason") == "max_attempts", "reason %r" % p.headers)
        check(h.header_int(p, "x-retry-attempts") == MAX_ATTEMPTS, "attempts %r" % p.headers)
        check(h.header_str(p, "x-retry-queue") == work, "x-retry-queue %r" % p.headers)
        check(len(history(p)) == MAX_ATTEMPTS, "history %r" % history(p))
        check("max_attempts" in (h.header_str(p, "x-delay-error") or ""), "x-delay-error %r" % p.headers)
        c.basic_ack(m.delivery_tag)
        time.sleep(INITIAL_MS * 4 / 1000.0)
        check(c.basic_get(work)[0] is None, "the poison message came back after it was parked")
        h.log("poison: %d deliveries %s s apart, then parked" %
              (MAX_ATTEMPTS, ["%.2f" % (b_ - a_) for a_, b_ in zip(times, times[1:])]))

    # --- parks for the other reasons --------------------------------------------------
    def case_park_no_queue():
        c.basic_publish(ingress, "straight", b"nq", h.pika.BasicProperties(message_id="nq"))
        m, p, body, _ = get(parking, 5, "no_queue")
        check(h.header_str(p, "x-retry-parked-reason") == "no_queue" and m.routing_key == "straight"
              and h.header(p, "x-retry-queue") is None, "no_queue parked as %r key %r" %
              (p.headers, m.routing_key))
        c.basic_ack(m.delivery_tag)

    def case_park_expired():
        c.basic_publish("", ttlq, b"ttl", h.pika.BasicProperties(message_id="ttl", expiration="50"))
        m, p, body, _ = get(parking, 5, "expired")
        check(h.header_str(p, "x-retry-parked-reason") == "reason" and
              h.header_str(p, "x-retry-queue") == ttlq, "expired parked as %r" % p.headers)
        c.basic_ack(m.delivery_tag)

    def case_park_queue_gone():
        c.basic_publish("", gone, b"g", h.pika.BasicProperties(message_id="gone"))
        m, p, body, _ = get(gone, 5, "gone: first delivery")
        c.basic_reject(m.delivery_tag, requeue=False)
        time.sleep(0.05)
        c.queue_delete(gone)
        m, p, body, _ = get(parking, INITIAL_MS / 1000.0 + 5, "queue_gone")
        check(h.header_str(p, "x-retry-parked-reason") == "queue_gone" and
              h.header_str(p, "x-retry-queue") == gone, "queue_gone parked as %r" % p.headers)
        c.basic_ack(m.delivery_tag)

    # --- x-delay-key: listed per queue, cancelled, never back --------------------------
    slow = ctx.n("slow")

    def case_key_replace_cancel():
        c.queue_declare(slow, durable=True, arguments={"x-dead-letter-exchange": ingress})
        ctx.queues.add(slow)
        # two failures of one key: the newer replaces the waiting retry
        for mid in ("k-old", "k-new"):
            c.basic_publish("", slow, b"k", h.pika.BasicProperties(message_id=mid,
                                                                    headers={"x-delay-key": "order-7"}))
            m, p, body, _ = get(slow, 5, "keyed: first delivery of " + mid)
            c.basic_reject(m.delivery_tag, requeue=False)
            h.wait_for("the keyed retry %s in /pending?queue=" % mid, lambda: [
                x for x in h.http_req(port, "GET", "/pending?route=retries&queue=" +
                                      h.url_arg(slow))[1]["messages"] if x.get("message_id") == mid], 10)
        listed = h.http_req(port, "GET", "/pending?route=retries&queue=" + h.url_arg(slow))[1]["messages"]
        check(len(listed) == 1 and listed[0]["key"] == "order-7" and listed[0]["routing_key"] == slow
              and listed[0].get("message_id") == "k-new", "/pending?queue= after the replace: %r" % listed)
        st, j = h.http_req(port, "GET", "/pending?route=retries&queue=" + h.url_arg(work))
        check(st == 200 and j["count"] == 0, "/pending for another queue: %r" % j)
        st, j = h.http_req(port, "DELETE", "/pending/retries/order-7")
        check(st == 200 and j.get("cancelled"), "DELETE /pending/retries/order-7: %d %r" % (st, j))

    # purge by queue: the two retries of slow go, the one of fast (a second queue) stays
    def case_purge_by_queue():
        for body in (b"s1", b"s2"):
            c.basic_publish("", slow, body)
            m, p, _, _ = get(slow, 5, "purge: first delivery")
            c.basic_reject(m.delivery_tag, requeue=False)
        h.wait_for("two retries of slow in /pending", lambda: len(h.http_req(
            port, "GET", "/pending?route=retries&queue=" + h.url_arg(slow))[1]["messages"]) == 2, 10)
        st, j = h.http_req(port, "POST", "/purge?route=retries&queue=" + h.url_arg(slow))
        check(st in (200, 202), "POST /purge?queue=: %d %r" % (st, j))
        h.wait_for("the purge done", lambda: h.stats(port)["purge"]["done"], 10)
        pj = h.stats(port)["purge"]
        check(pj["removed"] == 2 and pj["queue"] == slow, "purge by queue: %r" % pj)

    # --- the metrics, before the restart (counters restart with the process) -------------
    def case_metrics():
        text = h.metrics(port)
        lab = lambda q, extra="": 'route="retries",queue="%s"%s' % (q, extra)
        want = {
            ("delay_bridge_retries_total", lab(work)): 1 + (MAX_ATTEMPTS - 1),
            ("delay_bridge_retry_parked_total", lab(work, ',reason="max_attempts"')): 1,
            ("delay_bridge_retry_parked_total", lab(fast, ',reason="max_attempts"')): 1,
            ("delay_bridge_retry_parked_total", lab(ttlq, ',reason="reason"')): 1,
            ("delay_bridge_retry_parked_total", lab(gone, ',reason="queue_gone"')): 1,
            ("delay_bridge_retry_parked_total", lab("", ',reason="no_queue"')): 1,
            ("delay_bridge_retry_attempts_bucket", lab(work, ',le="1"')): 2,
            ("delay_bridge_retry_attempts_bucket", lab(work, ',le="+Inf"')): 1 + MAX_ATTEMPTS,
            ("delay_bridge_retry_attempts_sum", lab(work)): 1 + sum(range(1, MAX_ATTEMPTS + 1)),
        }
        for (name, labels), v in want.items():
            got = h.metric_value(text, name, labels)
            check(got == v, "%s{%s} = %r, expected %d" % (name, labels, got, v))
        h.log("metrics: retries, parks by reason and attempts per queue as expected")

    # --- kill -9 while a retry waits ------------------------------------------------------
    def case_kill9_durable():
        c.basic_publish("", work, b"durable", h.pika.BasicProperties(message_id="durable"))
        m, p, body, _ = get(work, 5, "durable: first delivery")
        c.basic_reject(m.delivery_tag, requeue=False)
        h.wait_for("the retry durable in /pending", lambda: h.http_req(
            port, "GET", "/pending?route=retries&queue=" + h.url_arg(work))[1]["messages"], 10)
        b.kill9()
        b.start()
        m, p, body, t = get(work, INITIAL_MS / 1000.0 + late() + 10, "durable: after kill -9")
        check(body == b"durable" and t * 1000.0 >= history(p)[0] + INITIAL_MS,
              "after kill -9: %r, %.1f ms before due" % (body, history(p)[0] + INITIAL_MS - t * 1000))
        c.basic_ack(m.delivery_tag)
        time.sleep(1.0)
        check(c.basic_get(work)[0] is None, "the retry came twice after kill -9")
        check(c.basic_get(slow)[0] is None, "the cancelled retry came back")

    # --- a drain hands a waiting retry to another bridge: its remaining delay, its count --
    def case_drain_handback():
        c.basic_publish("", work, b"handed", h.pika.BasicProperties(message_id="handed"))
        m, p, body, _ = get(work, 5, "handback: first delivery")
        c.basic_reject(m.delivery_tag, requeue=False)
        h.wait_for("the retry durable in /pending", lambda: h.http_req(
            port, "GET", "/pending?route=retries&queue=" + h.url_arg(work))[1]["messages"], 10)
        st, j = h.http_req(port, "POST", "/drain")
        check(st == 202, "POST /drain: %d %r" % (st, j))
        check(b.wait_exit(20, "the drained bridge did not exit") == 0, "the drain did not exit 0")
        port2 = h.free_port()
        b2 = ctx.bridge([route], name="second", http={"listen": str(port2)})
        m, p, body, t = get(work, INITIAL_MS / 1000.0 + late() + 10, "handback: the retry")
        hist = history(p)
        check(body == b"handed" and len(hist) == 1 and h.header_int(p, "x-retry-attempt") == 2,
              "handed back: %r attempt %r history %r" % (body, h.header(p, "x-retry-attempt"), hist))
        check(t * 1000.0 >= hist[0] + INITIAL_MS, "handed back early by %.1f ms" %
              (hist[0] + INITIAL_MS - t * 1000.0))
        check(h.header(p, "x-delay-bridge-handback") is None, "the hand-back mark reached the consumer")
        c.basic_ack(m.delivery_tag)
        h.log("a drain handed a waiting retry over: back at %.0f ms after its failure, still attempt 2"
              % (t * 1000.0 - hist[0]))
        b2.stop()

    cases.run("back_once_on_time", case_back_once_on_time)
    cases.run("queue_policy", case_queue_policy)
    cases.run("poison_parked", case_poison_parked)
    cases.run("park_no_queue", case_park_no_queue)
    cases.run("park_expired", case_park_expired)
    cases.run("park_queue_gone", case_park_queue_gone)
    cases.run("key_replace_cancel", case_key_replace_cancel)
    cases.run("purge_by_queue", case_purge_by_queue, needs="key_replace_cancel")
    cases.run("metrics", case_metrics)
    cases.run("kill9_durable", case_kill9_durable)
    cases.run("drain_handback", case_drain_handback)
    conn.close()
    cases.done()

if __name__ == "__main__":
    h.run(test, budget_s=120)
