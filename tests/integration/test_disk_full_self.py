#!/usr/bin/python3
"""The WAL's disk filled by intake alone, and nobody relieves it (issue 26).

Each case mounts a small file system for the WAL (root only: skipped
otherwise), starts one bridge on it, and publishes at once more than the
volume holds. Nothing else is ever deleted from the volume: only the bridge
can give space back, by firing what it holds. Before the fix, the commit
that met ENOSPC kept its batch of ADDs in the write buffer, the DONE records
queued behind it, and a segment was deleted only once those were durable:
the bridge fired what it held and then nothing more, forever (disk_full
true, df 100 %, the rest waiting in the ingress queue).

Checked in every case:
  - intake pauses (/stats wal.intake_paused, /readyz 503, the log line
    "WAL space low: consuming paused") and resumes by itself ("WAL space
    again: consuming resumes", /readyz 200, the reserve whole again);
  - nothing lost: every message published reaches the target queue (for
    cancels and replacements: exactly the expected set), within the bound
    the case states (BOUND_S after its publish; printed with the figure);
  - nothing early: no arrival before its publish time + its delay;
  - none stored twice: each message arrives once with a distinct
    x-delay-bridge-id, and /stats counts each received once;
  - held messages kept firing: lateness after the due time counted from
    the bridge's receipt (read from /stats every 0.1 s) under LATE_BOUND_S.

Cases (argument; none: "tmpfs"):
  tmpfs   the issue's run: tmpfs 8 MiB, segment_mb 1, 6,000 x 2 KiB, x-delay 4 s
  tiny    tmpfs 4 MiB, segment_mb 1: under 5 x segment_mb, refused at start
          (exit 3, naming wal.segment_mb)
  edge    tmpfs 5 MiB, segment_mb 1: the smallest volume the bridge takes
          (the reserve, the two free segments intake resumes at, the one
          being written), 4,000 x 2 KiB in many rounds
  short   the same volume, delays of 0.1-6 s and one in 20 under 0.1 s:
          messages fall due while the disk fills (checked: some fired
          before intake paused) and all through the pause
  held    the same volume, x-delay 15 s: all held when it fills (checked:
          none fired before intake paused), then they fire
  ext4    a 16 MiB ext4 on a loop device, segment_mb 1, 12,000 x 2 KiB, 4 s
  ext4min ext4 of 6620 KiB: df counts 5.0 MiB (5 x segment_mb, the least the
          bridge takes), 4.5 MiB of it available; 4,000 x 2 KiB
  repl    tmpfs 8 MiB with wal.replicate (the log published to a stream)
  keys    tmpfs 8 MiB: 100 keyed messages due in 45 s, 40 of them cancelled
          (x-delay-cancel) and 20 replaced inside the flood that fills the disk
  stream  tmpfs 8 MiB, a stream ingress (routes[].queue_type "stream")
  big     tmpfs 320 MiB, segment_mb 64 (reserve 128 MiB), 5,000 x 64 KiB   [long]
  xfs     xfs 320 MiB on a loop device, segment_mb 64: df counts 256 MiB
          (xfs keeps 64 for its log), under 5 x segment_mb: refused at start
          (at cee05c4 plus a minimum of 4 x segment_mb, it was taken and
          intake stayed paused from the start, for good)
  xfs400  xfs 400 MiB (df 336), segment_mb 64, 6,000 x 64 KiB: just above
          the least the bridge takes                                       [long]

The long ones (label "long") run only with ctest -C long (tests.cmake).
"""

import os
import random
import sys
import time

import harness as h
from harness import check

KIB = 1024
MIB = 1024 * 1024
LATE_BOUND_S = 15.0  # after its due time counted from the bridge's receipt

# README "When the WAL's disk fills up": a volume under 5 x segment_mb (as
# df counts it) is refused at start, naming wal.segment_mb: a configuration
# error, exit 3.
REFUSE_EXIT = 3
PAUSED = "WAL space low: consuming paused"
RESUMED = "WAL space again: consuming resumes"


# keys: KEYED messages k000.. due in KEYED_MS (published first, so they sit
# in the first segment), then the flood; inside it, cancels of k000..k039
# and new versions of k040..k059 (due REPLACE_MS after their receipt). The
# flood is taken in a few pause/resume rounds of ~4 s each, all before the
# keyed due time: every cancel reaches the bridge while its message is held.
KEYED, CANCELLED, REPLACED = 100, 40, 20
KEYED_MS, REPLACE_MS = 45000, 6000


class Case(object):
    def __init__(self, name, fs="tmpfs", size_mb=8, segment_mb=1, n=6000, body=2 * KIB,
                 delay=lambda i, rng: 4000, bound_s=90, stall_s=30, budget_s=150, **kw):
        self.name, self.fs, self.size_mb, self.segment_mb = name, fs, size_mb, segment_mb
        self.n, self.body, self.delay, self.bound_s = n, body, delay, bound_s
        self.stall_s, self.budget_s = stall_s, budget_s
        self.kw = kw


CASES = {c.name: c for c in [
    Case("tmpfs"),
    Case("tiny", size_mb=4, must_refuse=True),
    Case("edge", size_mb=5, n=4000, bound_s=100, budget_s=170),
    Case("short", delay=lambda i, rng: rng.randint(1, 100) if i % 20 == 0 else
         rng.randint(100, 6000), fired_at_fill=True),
    Case("held", delay=lambda i, rng: 15000, bound_s=100, stall_s=40, fired_at_fill=False),
    Case("ext4", fs="ext4", size_mb=16, n=12000),
    # 6620 KiB of ext4 (1 KiB blocks, a journal): df counts 5.0 MiB, just
    # 5 x segment_mb, of which 4.5 are available: the least ext4 the bridge takes.
    Case("ext4min", fs="ext4", size_mb=6620 / 1024.0, n=4000, bound_s=100, budget_s=170),
    Case("repl", repl=True),
    Case("keys", keys=True, bound_s=90, stall_s=KEYED_MS / 1000.0 + 10),
    Case("stream", route={"queue_type": "stream", "stream_max_mb": 512}),
    Case("big", size_mb=320, segment_mb=64, n=5000, body=64 * KIB, bound_s=150, stall_s=40,
         budget_s=280),
    # xfs keeps 64 MiB of a 320 MiB volume for its log: df counts 256 MiB.
    Case("xfs", fs="xfs", size_mb=320, segment_mb=64, n=5000, body=64 * KIB, bound_s=150,
         stall_s=40, budget_s=280, must_refuse=True),
    Case("xfs400", fs="xfs", size_mb=400, segment_mb=64, n=6000, body=64 * KIB, bound_s=150,
         stall_s=40, budget_s=280),
]}


def size_text(mb):
    return "%d MiB" % mb if mb == int(mb) else "%d KiB" % round(mb * 1024)


def files_on(fs):
    """What takes the volume's space: each file under fs, its size and
    what it has allocated (MiB), and the total allocated."""
    out, alloc = [], 0
    for d, _, names in os.walk(fs):
        for n in sorted(names):
            try:
                st = os.stat(os.path.join(d, n))
            except OSError:
                continue
            alloc += st.st_blocks * 512
            out.append("%s %.2f/%.2f" % (os.path.relpath(os.path.join(d, n), fs),
                                         st.st_size / MIB, st.st_blocks * 512.0 / MIB))
    return "%s (size/allocated MiB; %.2f MiB allocated in all)" % (", ".join(out), alloc / MIB)


def bridge_msg_id(m):
    """The message id part of x-delay-bridge-id (<log id>-<message id>):
    the LSN of its ADD, so receipt order on one route."""
    bid = m.bridge_id or ""
    try:
        return int(bid.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return None


def items_for(case, rng):
    """(message_id, body, headers, delay_ms) to publish, and the set of
    message_ids expected to arrive."""
    items, want = [], set()
    if case.kw.get("keys"):
        for k in range(KEYED):
            mid = "k%03d.v1" % k
            items.append((mid, b"k" * case.body, {"x-delay": h.i32(KEYED_MS),
                                                  "x-delay-key": h.lstr("k%03d" % k)}, KEYED_MS))
            if k >= CANCELLED + REPLACED:
                want.add(mid)
    # events spread through the flood: a cancel or a new version every so often
    events = []
    if case.kw.get("keys"):
        events = ["cancel:%03d" % k for k in range(CANCELLED)] + \
                 ["replace:%03d" % k for k in range(CANCELLED, CANCELLED + REPLACED)]
        rng.shuffle(events)
    every = case.n // (len(events) + 1) if case.kw.get("keys") else 0
    for i in range(case.n):
        ms = case.delay(i, rng)
        mid = "m%05d" % i
        items.append((mid, b"%05d" % i + b"f" * (case.body - 5), {"x-delay": h.i32(ms)}, ms))
        want.add(mid)
        if every and (i + 1) % every == 0 and events:
            kind, k = events.pop(0).split(":")
            if kind == "cancel":
                # no message_id of its own: never forwarded, never expected
                items.append(("cancel.k%s" % k, b"", {"x-delay-cancel": h.lstr("k" + k)}, 0))
            else:
                mid = "k%s.v2" % k
                items.append((mid, b"r" * case.body, {"x-delay": h.i32(REPLACE_MS),
                                                      "x-delay-key": h.lstr("k" + k)},
                              REPLACE_MS))
                want.add(mid)
    check(not events, "keys: %d event(s) not placed in the flood" % len(events))
    return items, want


def wal_fig(w):
    def mib(k):
        v = w.get(k)
        return "%.2f" % (v / MIB) if isinstance(v, int) else "?"
    return ("disk_full=%s intake_paused=%s free=%s MiB reserve=%s/%s MiB reserve_spent=%s "
            "segments=%s disk_bytes=%s MiB" % (w.get("disk_full"), w.get("intake_paused"),
                                               mib("free_bytes"), mib("reserve_held"),
                                               mib("reserve_bytes"), w.get("reserve_spent"),
                                               w.get("segments"), mib("disk_bytes")))


def run(ctx, case, fs):
    seg = case.segment_mb * MIB
    rng = random.Random(2026 + case.n)
    if case.kw.get("repl"):
        route, c, wal = ctx.replicated("self", checkpoint_mb=1, max_mb=0)
    else:
        ex, qs = ctx.target("self", "direct", ["rk"])
        c = ctx.consumer([qs["rk"]])
        route, wal = ctx.route("self", ex, **case.kw.get("route", {})), {}
    port = h.free_port()
    wal.update({"dir": os.path.join(fs, "wal"), "segment_mb": case.segment_mb, "fsync": True})
    b = ctx.bridge([route], http={"listen": "127.0.0.1:%d" % port}, wal=wal, start=False)
    b.config["wal"] = wal  # exactly these keys: the harness's default dir is elsewhere
    b.rewrite_config()
    total = h.volume_df(fs)[0]
    b.start(wait_ready=False)
    deadline = time.monotonic() + 60
    while 'msg="ready"' not in b.log_text() and b.alive():
        check(time.monotonic() < deadline, "the bridge was not ready within 60 s")
        time.sleep(0.05)
    check(not (case.kw.get("must_refuse") and b.alive()), "the bridge started on a %.0f MiB "
          "volume, under 5 x segment_mb %d" % (total / MIB, case.segment_mb))
    if not b.alive():
        # A volume too small for segment_mb is refused (exit 3, naming
        # wal.segment_mb); one the bridge takes must never leave it stuck.
        text = b.log_text()
        said = [l for l in text.splitlines() if "wal.segment_mb" in l] or text.splitlines()[-3:]
        check(case.kw.get("must_refuse") and b.proc.returncode == REFUSE_EXIT and
              "wal.segment_mb" in text,
              "the bridge exited with %s at start on a %.0f MiB volume (want %s): %s"
              % (b.proc.returncode, total / MIB, "exit %d naming wal.segment_mb" % REFUSE_EXIT
                 if case.kw.get("must_refuse") else "it to run", " | ".join(said)))
        h.log("RESULT disk_full_self.%s: %s %s (%.2f MiB as df counts it), segment_mb %d: "
              "refused at start (exit %d): %s" % (
                  case.name, case.fs, size_text(case.size_mb), total / MIB, case.segment_mb,
                  REFUSE_EXIT,
                  said[0]))
        return
    w0 = h.stats(port)["wal"]
    h.log("bridge ready: volume %.1f MiB, %.1f MiB free; %s; files: %s"
          % (total / MIB, h.volume_df(fs)[1] / MIB, wal_fig(w0), files_on(fs)))
    if "reserve_bytes" in w0:
        check(w0["reserve_bytes"] == 2 * seg, "the space reserve is %d bytes, not 2 x segment "
              "(%d)" % (w0["reserve_bytes"], 2 * seg))
        check(w0["reserve_held"] == w0["reserve_bytes"], "the reserve is not whole at start: %s"
              % wal_fig(w0))
        check(not w0.get("intake_paused"), "the bridge took a volume of %.0f MiB (df) for "
              "segment_mb %d but starts with intake paused on it, empty: it can never take a "
              "message; %s; files: %s" % (total / MIB, case.segment_mb, wal_fig(w0), files_on(fs)))
    if case.kw.get("repl"):
        check(w0["replication"]["state"] == "owner", "the bridge does not own its replicated "
              "log: %s" % w0["replication"])

    items, want = items_for(case, rng)
    offered = sum(len(it[1]) for it in items)
    watch = h.SpaceWatch(port, fs)
    t_pub = time.monotonic()
    sent = h.publish_burst(ctx, route["ingress_exchange"], items)
    t_pubend = time.monotonic()
    h.log("published %d messages, %.1f MiB of bodies, in %.1f s (volume %.0f MiB, segment_mb %d)"
          % (len(items), offered / MIB, t_pubend - t_pub, total / MIB, case.segment_mb))
    sent_want = {k: v for k, v in sent.items() if k in want}

    def stuck(what):
        s = watch.last() or {}
        try:
            depth = ctx.queue_depth(route["ingress_queue"])
            if route.get("queue_type") == "stream":
                depth = "%s (a stream: all it holds, read or not)" % depth
        except Exception as e:  # the broker busy: say so
            depth = "? (%r)" % e
        _, free = h.volume_df(fs)
        return ("%s; /stats: received %s held %s confirmed %s, wal %s; df: %.0f %% used, "
                "%.2f MiB free; ingress queue %s ready; files: %s" % (
                    what, s.get("received"), s.get("held"), s.get("confirmed"),
                    wal_fig(s.get("wal", {})), 100.0 * (total - free) / total, free / MIB, depth,
                    files_on(fs)))

    # The disk fills: intake pauses.
    deadline = time.monotonic() + 60
    while not watch.pauses():
        check(time.monotonic() < deadline, stuck("intake never paused within 60 s: the volume "
                                                 "did not fill, the case tests nothing"))
        b.check_alive()
        time.sleep(0.05)
    t_fill = watch.pauses()[0][0]
    at = [s for s in watch.snapshot() if s["t"] >= t_fill][0]
    h.log("intake paused %.2f s after the first publish: received %s, held %s, confirmed %s, "
          "df %.2f MiB free; %s; files now: %s" % (
              t_fill - t_pub, at["received"], at["held"], at["confirmed"],
              (at["df_free"] or 0) / MIB, wal_fig(at["wal"]), files_on(fs)))
    fired = case.kw.get("fired_at_fill")
    if fired is True:
        check(at["confirmed"], "nothing had fired when intake paused: no delay was shorter than "
              "the fill, the case tests nothing")
    elif fired is False:
        check(at["confirmed"] == 0, "%s fired before intake paused: the delays were to be longer "
              "than the fill" % at["confirmed"])

    # Nobody relieves the volume: every message must still arrive.
    def arrived():
        return len({m.message_id for m in c.snapshot()} & want)

    h.wait_progress(arrived, len(want), case.stall_s,
                    lambda k: stuck("STUCK: %d of %d arrived" % (k, len(want))),
                    cap_s=case.bound_s + 10)
    t_all = time.monotonic()
    h.log("all %d arrived %.1f s after the first publish" % (len(want), t_all - t_pub))

    # Intake resumes (it may pause again on the way: hysteresis), the reserve whole.
    deadline = time.monotonic() + 30
    while True:
        s = watch.last()
        w = s["wal"]
        if (s["readyz"] == 200 and not h.SpaceWatch.paused(s) and
                w.get("reserve_held", 0) == w.get("reserve_bytes", 0)):
            break
        check(time.monotonic() < deadline, stuck("intake did not resume within 30 s of the last "
                                                 "arrival (readyz %s)" % s["readyz"]))
        time.sleep(0.1)
    msgs = c.quiet(1.5)
    watch.stop()
    st = h.stats(port)
    r0, w = st["routes"][0], st["wal"]
    pauses, not_ready = watch.pauses(), watch.not_ready()
    h.log("pauses: %s; /readyz 503: %s (seconds from the watch's start)"
          % (watch.describe(pauses), watch.describe(not_ready)))
    h.log("final: %s; route: received %d deduplicated %d confirmed %d cancelled %d "
          "cancel_missed %d" % (wal_fig(w), r0["received"], r0["deduplicated"], r0["confirmed"],
                                r0["cancelled"], r0["cancel_missed"]))

    # Nothing lost, nothing early, none stored twice.
    t = h.tally(sent_want.keys(), msgs)
    h.log(h.tally_line(t))
    check(not t["lost"], "%d lost: %s" % (len(t["lost"]), t["lost"][:10]))
    unknown = t["unknown"]
    check(not unknown, "%d unexpected (cancelled or replaced versions?): %s"
          % (len(unknown), unknown[:10]))
    check(t["duplicates"] == 0, "%d duplicate deliveries (case 1: %d, case 2: %d)"
          % (t["duplicates"], t["case1"], t["case2"]))
    bids = [m.bridge_id for m in msgs]
    check(None not in bids and len(set(bids)) == len(bids), "x-delay-bridge-id missing or "
          "repeated among %d deliveries" % len(bids))
    h.check_none_early(sent_want, t, case.name)
    stored = len(items) - (CANCELLED if case.kw.get("keys") else 0)
    check(r0["received"] == stored, "/stats received %d, %d published: a message stored %s"
          % (r0["received"], stored, "twice" if r0["received"] > stored else "never?"))
    check(r0["confirmed"] == len(want), "/stats confirmed %d, %d delivered" % (
        r0["confirmed"], len(want)))
    check(st["held"] == 0, "/stats held %d after everything arrived" % st["held"])
    if case.kw.get("keys"):
        check(r0["cancelled"] == CANCELLED + REPLACED and r0["cancel_missed"] == 0,
              "cancelled %d (want %d), cancel_missed %d (want 0): a cancel reached the bridge "
              "after its message fell due" % (r0["cancelled"], CANCELLED + REPLACED,
                                               r0["cancel_missed"]))
    if route.get("queue_type") == "stream":
        check(r0.get("stream_offset") == len(items), "stream_offset %s, %d published"
              % (r0.get("stream_offset"), len(items)))

    # Within the bound; held messages kept firing on time.
    first = {mid: min(m.t for m in ms) for mid, ms in t["per_id"].items()}
    took = max(first[mid] - sent_want[mid][0] for mid in want)
    check(took <= case.bound_s, "a message took %.1f s from its publish to its arrival, over "
          "the case's bound of %d s" % (took, case.bound_s))
    late = None
    if not case.kw.get("keys"):
        order = sorted(msgs, key=bridge_msg_id)
        late = 0.0
        for rank, m in enumerate(order, 1):
            recv = watch.received_after(rank)
            check(recv is not None, "/stats never counted %d received" % rank)
            late = max(late, m.t - recv - sent_want[m.message_id][1] / 1000.0)
        check(late <= LATE_BOUND_S, "a message arrived %.1f s after its due time counted from "
              "the bridge's receipt (bound %.0f s): held messages did not keep firing"
              % (late, LATE_BOUND_S))

    # The pause was seen and said, and is over.
    lines = b.log_text().splitlines()
    paused = [l for l in lines if PAUSED in l]
    resumed = [l for l in lines if RESUMED in l]
    free_at_resume = [int(l.split("free_bytes=")[1].split()[0]) for l in resumed
                      if "free_bytes=" in l]
    min_free = watch.min_df_free()
    h.log("RESULT disk_full_self.%s: %s %s (df %.2f MiB), segment_mb %d (reserve %d MiB); "
          "%d published (%.1f MiB offered); filled (intake paused) after %.2f s with %s received, "
          "df min %.2f MiB free; %d pause(s): %s; /readyz 503: %s; log: %d pause and %d resume "
          "line(s), free_bytes at each resume %s MiB; %d delivered, all %.1f s after the first "
          "publish (bound %d s); max publish-to-arrival %.1f s; max lateness after the "
          "receipt-counted due time %s; none early, none twice; reserve spent %s time(s)"
          % (case.name, case.fs, size_text(case.size_mb), total / MIB, case.segment_mb,
             2 * case.segment_mb, len(items), offered / MIB, t_fill - t_pub, at["received"],
             (min_free or 0) / MIB,
             len(pauses), watch.describe(pauses), watch.describe(not_ready), len(paused),
             len(resumed), " ".join("%.2f" % (f / MIB) for f in free_at_resume) or "-",
             len(msgs), t_all - t_pub, case.bound_s, took,
             "%.2f s" % late if late is not None else "n/a (keys)", w.get("reserve_spent", "?")))
    check(pauses, "intake never paused")
    check(not_ready, "/readyz never answered 503 while intake was paused")
    check(all(e is not None for _, e in pauses), "intake still paused: %s" % wal_fig(w))
    check(paused, "the log never said %r" % PAUSED)
    check(resumed, "the log never said %r" % RESUMED)
    # The bridge's line shows the latest look at the volume, which may come
    # a little after the one the resume was decided on: an eighth of a
    # segment of slack. A gate without hysteresis resumes a segment lower.
    low = [f for f in free_at_resume if f < 2 * seg - seg // 8]
    check(not low, "intake resumed with %d of its resumes under 2 x segment free (%s MiB): no "
          "hysteresis, it flaps:\n  %s" % (
              len(low), ", ".join("%.2f" % (f / MIB) for f in low),
              "\n  ".join([l for l in lines if PAUSED in l or RESUMED in l][:8])))
    st_r, body = h.http_get(port, "/readyz")
    check(st_r == 200, "/readyz %d after the pause: %s" % (st_r, body.strip()))
    if "reserve_bytes" in w:
        check(w["reserve_held"] == w["reserve_bytes"] and not w["intake_paused"]
              and not w["disk_full"], "not back to normal: %s" % wal_fig(w))
        check(w["intake_pauses"] >= len(pauses), "/stats wal.intake_pauses is %d, but /stats "
              "showed intake_paused %d time(s) and the log said %r %d time(s)"
              % (w["intake_pauses"], len(pauses), PAUSED, len(paused)))
    b.stop()


def main():
    name = sys.argv[1] if len(sys.argv) > 1 else "tmpfs"
    if name not in CASES:
        sys.stderr.write("usage: %s [%s]\n" % (sys.argv[0], "|".join(CASES)))
        sys.exit(2)
    case = CASES[name]
    sys.argv[0] = sys.argv[0].replace("test_disk_full_self", "test_disk_full_self_" + name) \
        if name != "tmpfs" else sys.argv[0]
    h.run(lambda ctx: h.on_volume(ctx, case.fs, case.size_mb, lambda fs: run(ctx, case, fs)),
          budget_s=case.budget_s)


if __name__ == "__main__":
    main()
