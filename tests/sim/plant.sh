#!/bin/sh
# tests/sim/plant.sh SIM -- the checker can fail: each planted bug must be
# caught within 200 seeds, or this test fails.
#   early-fire  the driver advances the engine 1 s past the clock: a message fires early
#   fsync-lie   fsync/fdatasync succeed and sync nothing: acked messages are lost at a crash
#   stream-hole the import takes a stream with a lost batch for the whole log: acked messages lost
#   reserve-stuck truncating the log's RESERVE gives no space back: a full disk never recovers (liveness)
set -u
sim=$1
status=0
for plant in early-fire fsync-lie stream-hole reserve-stuck; do
    out=$("$sim" --seeds 200 --from 1 --plant "$plant" 2>&1)
    failed=$(printf '%s\n' "$out" | sed -n 's/^[0-9]* passed, \([0-9]*\) failed$/\1/p')
    first=$(printf '%s\n' "$out" | grep -m1 '^FAIL' || true)
    if [ "${failed:-0}" -gt 0 ]; then
        echo "plant $plant: caught in $failed of 200 seeds; first: $first"
    else
        echo "plant $plant: NOT caught in 200 seeds"; status=1
    fi
done
exit $status
