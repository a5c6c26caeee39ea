#!/bin/bash
# median.sh -- run one of the end-to-end benchmarks N times, one after the
# other, and print the medians of their reports.
#
#   tests/bench/median.sh N SCRIPT [ARGS...]
#
#   N        how many runs (a positive integer; 3 or 5 make a median)
#   SCRIPT   run.sh, ontime.sh, hops.sh or retry.sh (in tests/bench/); ARGS go to it
#
# Each run is `tests/bench/SCRIPT ARGS` and starts a broker of its own, as
# the script always does; the environment (DB_RABBITMQ, BENCH_PORT, ...)
# passes through. Each run's report (stdout) is kept as DIR/run-I.txt and
# its log (stderr, also shown) as DIR/run-I.log, DIR being a new directory
# under ${BENCH_TMP:-/var/tmp} (or BENCH_MEDIAN_DIR), named at the start and
# at the end. Then median.py prints "medians of N runs": the rows of the
# side-by-side table (| RabbitMQ ...) keyed by broker, delays, scenario and
# figure, every number of their value, broker alone and ratio cells the
# median across runs, and a column with each run's first number of the value
# cell; the other tables matched by position; and every run's summary lines.
#
# Never asserts on a time. Exit 0 when every run exited 0; 1 when one did
# not (the medians are still printed, over the runs that wrote a report;
# the failed runs are named); 2 on a usage error; 77 when the first run was
# skipped (no rabbitmq-server).
set -Eeuo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)

say() { printf '[median %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { say "error: $*"; exit 2; }

case "${1:-}" in -h|--help) sed -n '2,/^set -E/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;; esac
[ $# -ge 2 ] || die "usage: tests/bench/median.sh N SCRIPT [ARGS...] (see --help)"
N=$1 SCRIPT=$2
shift 2
[[ "$N" =~ ^[1-9][0-9]*$ ]] || die "N = $N: expected a positive integer"
case "$SCRIPT" in run.sh|ontime.sh|hops.sh|retry.sh) ;; *) die "SCRIPT $SCRIPT: expected run.sh, ontime.sh, hops.sh or retry.sh" ;; esac

DIR=${BENCH_MEDIAN_DIR:-$(mktemp -d "${BENCH_TMP:-/var/tmp}/delay-bridge-median.XXXXXX")}
mkdir -p "$DIR"
say "$N runs of $SCRIPT $*, reports in $DIR"
FAILED=() REPORTS=()
for i in $(seq "$N"); do
    say "run $i of $N: tests/bench/$SCRIPT $*"
    t0=$SECONDS rc=0
    bash "$HERE/$SCRIPT" "$@" >"$DIR/run-$i.txt" 2> >(tee "$DIR/run-$i.log" >&2) || rc=$?
    say "run $i: exit $rc after $((SECONDS - t0)) s"
    if [ "$rc" = 77 ] && [ "$i" = 1 ]; then say "skipped: $SCRIPT exited 77"; exit 77; fi
    [ "$rc" = 0 ] || FAILED+=("run $i (exit $rc, $DIR/run-$i.log)")
    [ ! -s "$DIR/run-$i.txt" ] || REPORTS+=("$DIR/run-$i.txt")
done

[ ${#REPORTS[@]} -gt 0 ] || die "no run wrote a report (logs in $DIR)"
echo
/usr/bin/python3 "$HERE/median.py" --title "tests/bench/$SCRIPT $*" "${REPORTS[@]}" | tee "$DIR/medians.txt"
say "reports and medians in $DIR"
if [ ${#FAILED[@]} -gt 0 ]; then
    say "FAILED: ${FAILED[*]}"
    exit 1
fi
exit 0
