#!/bin/sh
# Build build-fuzz/ and run every libFuzzer harness for SECONDS each
# (default 600), at nice 10, two at a time at most (FUZZ_JOBS=1 or 2).
#   tests/fuzz/run.sh [SECONDS] [fuzz_name ...]
# Each fuzzer's corpus grows in build-fuzz/fuzz/<name>/corpus (seeded from
# tests/fuzz/corpus/<name>, which is only read); crashes land in
# build-fuzz/fuzz/<name>/artifacts/, the log in build-fuzz/fuzz/<name>.log.
# Exit status 1 if any fuzzer found a crash.
set -eu
cd "$(dirname "$0")/../.."
SECONDS_EACH=${1:-600}
[ $# -gt 0 ] && shift
NAMES=${*:-"fuzz_walrec fuzz_props_roundtrip fuzz_config fuzz_xdelay fuzz_uri fuzz_replrec fuzz_retry fuzz_routes"}
JOBS=${FUZZ_JOBS:-2}
B=build-fuzz

CC=${CC:-clang} cmake -S . -B $B -DDB_FUZZ=ON -DDB_INTEGRATION=OFF >/dev/null
# shellcheck disable=SC2086
nice -n 10 cmake --build $B -j2 --target $NAMES

run_one() {
    n=$1
    w=$B/fuzz/$n
    mkdir -p "$w/corpus" "$w/artifacts"
    dict=
    [ -f "tests/fuzz/$n.dict" ] && dict="-dict=tests/fuzz/$n.dict"
    echo "$n: fuzzing ${SECONDS_EACH}s, log $w.log"
    # shellcheck disable=SC2086
    if nice -n 10 "$B/tests/$n" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 \
            -print_final_stats=1 $dict -artifact_prefix="$w/artifacts/" \
            "$w/corpus" "tests/fuzz/corpus/$n" >"$w.log" 2>&1; then
        echo "$n: ok: $(grep -E '^#[0-9]+.*(DONE|pulse|NEW|REDUCE)' "$w.log" | tail -1)"
    else
        echo "$n: FAILED (crash input in $w/artifacts/, see $w.log)"
        return 1
    fi
}

status=0
# shellcheck disable=SC2086
set -- $NAMES
while [ $# -gt 0 ]; do
    if [ "$JOBS" -ge 2 ] && [ $# -ge 2 ]; then
        run_one "$1" & p1=$!
        run_one "$2" & p2=$!
        wait $p1 || status=1
        wait $p2 || status=1
        shift 2
    else
        run_one "$1" || status=1
        shift
    fi
done
exit $status
