#!/usr/bin/python3
"""A standby whose disk is full keeps standing by; the regression test of
the first bug chaos_soak.py found.

The bug: a hot standby (wal.replicate, another bridge holds the lease)
copies the stream into wal.dir/import/. When that disk filled up, the copy
failed with ENOSPC and the standby exited 1 ("cannot read the stream
back", then "cannot open the WAL"); restarted by its supervisor it read the
stream again into the same full disk and exited again, in a loop, and the
log had no standby for as long as the disk stayed full. In chaos_soak
(seed 11) a2's disk was filled for 17 s and it exited five times.

Now the standby drops its partial copy (which frees the space it took),
says so, and reads the stream again every few seconds, as after a lost
broker; when space returns it is a standby again.

The test: a broker of its own (own_broker.py: DB_CHAOS_PORT, default
5751). Owner A; standby B
with wal.dir on a 5 MiB tmpfs (the least segment_mb 1 takes) of which a filler leaves almost nothing. A
takes 300 messages of 2 KiB (600 KB of stream, more than B's free space)
with delays of 15..25 s. Checked: B is still running 8 s later and has said
the disk is full; the filler is deleted and B stands by again; A is killed
with SIGKILL and B takes over and delivers all 300: none lost, none early.
Without the fix B exits 1 within seconds of the first records.

Root is needed for the tmpfs (exit 77 otherwise).
"""

import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import harness as h  # noqa: E402
from harness import check  # noqa: E402
from ha_soak import repl_state, wait_state  # noqa: E402
import own_broker  # noqa: E402
N = 300


def test(ctx):
    fs = os.path.join(ctx.tmp, "fs-b")
    os.makedirs(fs)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=5m", "tmpfs", fs],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        raise h.Skip("cannot mount a tmpfs: %s" % r.stdout.decode(errors="replace"))
    try:
        run(ctx, fs)
    finally:
        subprocess.run(["umount", "-l", fs])


def run(ctx, fs):
    route, c, wal = ctx.replicated("sdf", checkpoint_mb=64, max_mb=0, lease_renew_ms=1000)
    pa, pb = h.free_port(), h.free_port()
    a = ctx.bridge([route], name="a", instance="a", wal=wal, start=False,
                   http={"listen": "127.0.0.1:%d" % pa}, broker={"heartbeat_s": 5})
    a.start(wait_ready=False)
    wait_state(pa, "owner", 30, "A")
    walb = dict(wal, dir=os.path.join(fs, "wal"), segment_mb=1)
    b = ctx.bridge([route], name="b", instance="b", wal=walb, start=False,
                   http={"listen": "127.0.0.1:%d" % pb}, broker={"heartbeat_s": 5})
    b.start(wait_ready=False)
    wait_state(pb, "standby", 30, "B")
    filler = os.path.join(fs, "filler")
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (1 << 20, 4096):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError:
                pass
    finally:
        os.close(fd)
    st = os.statvfs(fs)
    h.log("B's disk filled: %d bytes free" % (st.f_bavail * st.f_frsize))

    p = ctx.publisher()
    sent = {}
    for i in range(N):
        mid = "d%04d" % i
        ms = 15000 + (i * 37) % 10000
        sent[mid] = (p.publish(route["ingress_exchange"], "rk", b"x" * 2048,
                               headers={"x-delay": h.i32(ms)}, message_id=mid, delivery_mode=2), ms)
    p.close()
    time.sleep(8.0)
    check(b.alive(), "B exited with code %s while its disk was full (it should stand by and "
          "read again): %s" % (b.proc.returncode, [ln for ln in b.log_text().splitlines()
                                                   if "level=error" in ln][-3:]))
    check("the log's disk is full" in b.log_text(), "B did not say its disk is full")
    os.unlink(filler)
    wait_state(pb, "standby", 30, "B (space back)")
    h.log("space back: B stands by again (state %s)" % repl_state(pb))
    time.sleep(3.0)  # let B's read-ahead catch up (not required: a takeover reads on)
    a.kill9()
    b.wait_log('msg="ready"', 60, "ready after A's kill")
    c.wait_ids(sent.keys(), 60)
    t = h.tally({k: v[0] for k, v in sent.items()}, c.quiet(2.0))
    h.log("RESULT standby disk full: %s" % h.tally_line(t))
    check(not t["lost"], "%d lost: %s" % (len(t["lost"]), t["lost"][:10]))
    check(not t["unknown"], "unexpected: %s" % t["unknown"][:10])
    h.check_none_early(sent, t, "standby disk full")
    b.stop()


if __name__ == "__main__":
    if os.geteuid() != 0:
        h.log("SKIP: the tmpfs mount needs root")
        sys.exit(h.SKIP)
    own_broker.run(test, budget_s=180)
