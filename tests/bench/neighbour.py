#!/usr/bin/env python3
"""neighbour.py -- another tenant of the disk: data flushes at a steady rate.

    neighbour.py RATE [DIR]

Overwrites 4 KiB at a random place of a 64 MiB file it wrote once (in DIR,
default /var/tmp) and fdatasyncs it, RATE times a second, until SIGTERM or
SIGINT; then prints one line,

    neighbour rate=R syncs=N sync_p50_ms=.. sync_p99_ms=.. sync_max_ms=..

and removes its file. It overwrites and never appends, so its fdatasyncs
write no metadata of their own (no inode, no journal commit): it only keeps the device's
write cache busy, the way a database beside the bridge and the broker
would, and makes every flush on the volume slower. ontime.sh runs one
for the whole run with BENCH_NEIGHBOUR=RATE (tests/bench/README.md, "On
time when traffic is light, again"). Exit 0, 2 on a usage error.
"""
import os
import random
import signal
import sys
import time


def main():
    if len(sys.argv) not in (2, 3) or not sys.argv[1].isdigit() or int(sys.argv[1]) < 1:
        sys.stderr.write(__doc__)
        return 2
    rate = int(sys.argv[1])
    d = sys.argv[2] if len(sys.argv) == 3 else "/var/tmp"
    path = os.path.join(d, "neighbour.%d" % os.getpid())
    size, block = 64 << 20, 4096
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    chunk = b"\0" * (1 << 20)
    for off in range(0, size, len(chunk)):
        os.pwrite(fd, chunk, off)
    os.fsync(fd)
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    signal.signal(signal.SIGINT, lambda *a: stop.append(1))
    rng = random.Random(os.getpid())
    data = os.urandom(block)
    lat = []
    t0 = time.monotonic()
    n = 0
    while not stop:
        slot = t0 + n / rate
        now = time.monotonic()
        if now < slot:
            time.sleep(slot - now)
        off = rng.randrange(size // block) * block
        os.pwrite(fd, data, off)
        a = time.monotonic()
        os.fdatasync(fd)
        lat.append(time.monotonic() - a)
        n += 1
    os.close(fd)
    os.unlink(path)
    lat.sort()
    p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000 if lat else 0.0
    print("neighbour rate=%d syncs=%d sync_p50_ms=%.2f sync_p99_ms=%.2f sync_max_ms=%.2f"
          % (rate, len(lat), p(0.5), p(0.99), lat[-1] * 1000 if lat else 0.0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
