#!/bin/bash
# tests/run.sh -- build delay-bridge and run every test. The one test command.
#
# On a fresh Debian 12 machine (root, or sudo available) it first installs
# what is missing with apt-get. Then it builds, one after another:
#   build/          RelWithDebInfo: the daemon, unit tests, benchmarks, tools;
#   build-asan/     the same with clang + ASan/UBSan;
#   build-fuzz/     clang + libFuzzer: the fuzz harnesses;
# and runs four stages side by side (the tests mostly wait: for due times,
# restarts, takeovers), each line prefixed with its stage's name:
#   [build]   the whole ctest suite in build/, -j 5, one scheduler for
#             every test (tests/CMakeLists.txt says how they share the
#             machine): unit tests, the purity check, deploy/ checks
#             (systemd unit, Kubernetes manifests, example configs,
#             monitoring rules), the integration tests against throwaway
#             RabbitMQ nodes on 127.0.0.1:5681-5682 -- most of them against
#             build-asan/'s daemon (ASan + UBSan), the volume, fault and
#             multi-node ones against build/'s, each test once (see
#             tests/integration/tests.cmake; DB_TEST_BROKER_URI uses your
#             own broker) --, the client matrix (tests/clients), the 2-minute
#             HA soak (tests/soak, its own node on :5697), the benchmark's
#             smokes (run.sh :5695, hops.sh :5696, ontime.sh :5698; one at a
#             time, lock "bench"), and with DB_CONTAINER_TESTS=1 the container
#             tests (root podman; they change host settings, so they are off
#             unless asked for -- .ci/run asks);
#   [asan]    the unit tests under ASan + UBSan;
#   [fuzz]    every fuzzer for 15 s (tests/fuzz/run.sh for the long run);
#   [release] the Release build (-O3) users and packagers make, compiled
#             only (its warnings are not those of -O2).
# A build failure stops at once; a failing stage does not stop the others
# (so one run shows everything); a summary with each stage's time closes
# the run, and the script exits non-zero if any failed. How long each
# takes: tests/README.md ("How long"), the one place the times are written.
#
# With --quick, the loop for an edit (once build/ exists): build build/, the unit tests and the purity check in
# parallel, then a representative handful of integration tests on one
# broker -- a crash test (integration.crash), keys (integration.keys), a
# replicated log (integration.replicate) and the WAL tools
# (integration.cli_wal). No ASan build, no fuzzers, no deploy checks, no
# apt-get. Run the whole script (or .ci/run) before a merge.
#
# The broker: --broker VERSION (3.10, 4.0 or 4.3; or DB_RABBITMQ; default
# 3.10, the host's Debian package) runs every broker test against that
# RabbitMQ (tests/integration/broker.sh prepares 4.0 and 4.3 in a Debian
# root on first use, about a minute each, and reuses it). --matrix (what
# .ci/run runs) is the whole run on 4.3, then the broker-facing tests
# (labels integration and clients) again on 3.10 and on 4.0 with the same
# builds.
#
# Environment: JOBS (parallel build jobs, default: CPU count), DB_TEST_JOBS
# (ctest -j of the [build] stage, default 5), DB_SKIP_INSTALL=1 (never run
# apt-get), DB_SKIP_ASAN=1 (no build-asan/, no [asan]), DB_SKIP_FUZZ=1 (no
# build-fuzz/, no [fuzz]), DB_CONTAINER_TESTS=1 (also the container tests).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}

RUN_START=$(date +%s)
step() { printf '\n==> [%4d s] %s\n' "$(( $(date +%s) - RUN_START ))" "$*"; }

# The quick loop's integration tests: one of each kind the suite has.
QUICK_TESTS="integration\.(crash|keys|replicate|cli_wal)$"

QUICK=0 MATRIX=0
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) QUICK=1 ;;
    --matrix) MATRIX=1 ;;
    --broker)
        [ $# -ge 2 ] || { echo "usage: tests/run.sh [--quick] [--broker 3.10|4.0|4.3] [--matrix]" >&2; exit 2; }
        DB_RABBITMQ=$2
        shift
        ;;
    *) echo "usage: tests/run.sh [--quick] [--broker 3.10|4.0|4.3] [--matrix]" >&2; exit 2 ;;
    esac
    shift
done
[ $MATRIX = 1 ] && DB_RABBITMQ=4.3
export DB_RABBITMQ=${DB_RABBITMQ:-3.10}
case "$DB_RABBITMQ" in 3.10|4.0|4.3) ;; *) echo "tests/run.sh: unknown broker $DB_RABBITMQ (3.10, 4.0 or 4.3)" >&2; exit 2 ;; esac

if [ $QUICK = 1 ]; then
    start=$(date +%s)
    step "Building build/ (RelWithDebInfo)"
    cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDB_WERROR=ON -DDB_IT_SANITIZED_DIR= >/dev/null
    cmake --build build -j "$JOBS"
    step "Unit tests and the purity check (in parallel)"
    rc=0
    ctest --test-dir build -L unit -j "$JOBS" --output-on-failure || rc=1
    step "Integration tests: crash, keys, replicate, cli_wal (one broker: RabbitMQ $DB_RABBITMQ)"
    ctest --test-dir build -R "$QUICK_TESTS" -j 4 --output-on-failure || rc=1
    step "$([ $rc = 0 ] && echo "Quick tests passed" || echo "Quick tests FAILED") in $(( $(date +%s) - start )) s ($ROOT)"
    exit $rc
fi

# The package list lives in one place: deploy/packages.sh.
. deploy/packages.sh
if [ "${DB_CONTAINER_TESTS:-}" = 1 ]; then
    db_install_missing build test clients container
else
    db_install_missing build test clients
fi

CONTAINER=OFF
[ "${DB_CONTAINER_TESTS:-}" = 1 ] && CONTAINER=ON
SANITIZED=$ROOT/build-asan
[ "${DB_SKIP_ASAN:-}" = 1 ] && SANITIZED=

step "Building build/ (RelWithDebInfo)"
# -Werror here, in the project's own run only (the default is off, for users).
# The integration tests but the heavy ones run build-asan/'s daemon (see
# DB_IT_SANITIZED_DIR in tests/integration/tests.cmake): each test runs once.
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDB_WERROR=ON -DDB_CONTAINER_TESTS=$CONTAINER \
    -DDB_IT_SANITIZED_DIR="$SANITIZED"
cmake --build build -j "$JOBS"

if [ "${DB_SKIP_ASAN:-}" != 1 ]; then
    step "Building build-asan/ (clang, ASan + UBSan)"
    # -O1: what the sanitizers' authors recommend (usable speed, exact reports).
    CC=clang cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-g -O1" \
        -DDB_WERROR=ON -DDB_SANITIZE=ON -DDB_INTEGRATION=OFF
    cmake --build build-asan -j "$JOBS"
fi
if [ "${DB_SKIP_FUZZ:-}" != 1 ]; then
    step "Building build-fuzz/ (clang + libFuzzer; tests/fuzz/run.sh for the long run)"
    CC=clang cmake -S . -B build-fuzz -DDB_WERROR=ON -DDB_FUZZ=ON -DDB_INTEGRATION=OFF -DDB_FUZZ_SECONDS=15
    cmake --build build-fuzz -j "$JOBS" --target fuzz_walrec fuzz_props_roundtrip fuzz_config \
        fuzz_xdelay fuzz_uri fuzz_replrec fuzz_retry fuzz_routes
fi

# The tests wait far more than they compute (on 2 cores the machine sits
# 60-90 % idle under one integration test at a time), so the stages run
# side by side, each on brokers of its own, their lines prefixed with the
# stage's name; a summary follows. tests/integration/tests.cmake says how
# tests inside one stage share the machine.
LANES=$(mktemp -d "${TMPDIR:-/tmp}/db-run.XXXXXX")
trap 'rm -rf "$LANES"' EXIT
lane() { # NAME COMMAND...: run in the background, output prefixed; rc in $LANES/NAME.rc
    local name=$1
    shift
    ( set +e; t0=$(date +%s)
      ( "$@" ) 2>&1 | sed -u "s/^/[$name] /"
      echo "${PIPESTATUS[0]} $(( $(date +%s) - t0 ))" >"$LANES/$name.rc" ) &
}

lane_release() {
    # Release (-O3) is what users and packagers build: compiled, not run
    # (its warnings are not those of -O2: GCC's format checks see more once inlined).
    cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release -DDB_WERROR=ON -DDB_INTEGRATION=OFF >/dev/null &&
    nice cmake --build build-release -j "$JOBS" --target delay-bridge
}
lane_asan() {
    # The unit tests under the sanitizers (the integration tests that run
    # the sanitized daemon are in [build]: one scheduler for every broker test).
    # Under nice, this lane gets what [build] leaves: its heavy test,
    # sim.seeds, is sized for ASan and bounded by CPU time, not wall time
    # (tests/sim/tests.cmake has the arithmetic), so a loaded machine
    # slows it down but cannot fail it.
    ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_string_checks=1} \
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
        nice ctest --test-dir build-asan -L unit -j "$JOBS" --output-on-failure
}
lane_fuzz() {
    # CPU-bound, one core: beside the waiting integration tests.
    nice ctest --test-dir build-fuzz -L fuzz --output-on-failure
}
lane_build() {
    # Unit, purity, deploy, integration (most of them against the sanitized
    # daemon), clients, soak, bench smoke and (with DB_CONTAINER_TESTS=1)
    # container tests, -j 5 with the locks of tests/CMakeLists.txt.
    ctest --test-dir build -j "${DB_TEST_JOBS:-5}" --output-on-failure
}

step "Preparing the broker: $(bash tests/integration/broker.sh describe "$DB_RABBITMQ")"
step "Tests side by side: [build] build/'s ctest, [asan] unit tests under ASan/UBSan, [fuzz] fuzzers, [release] the -O3 build"
lane build lane_build
[ "${DB_SKIP_ASAN:-}" != 1 ] && lane asan lane_asan
[ "${DB_SKIP_FUZZ:-}" != 1 ] && lane fuzz lane_fuzz
lane release lane_release
wait

if [ $MATRIX = 1 ]; then
    # The same builds, the broker-facing tests on the other brokers of the
    # matrix, one after the other (they share build/'s broker ports).
    for v in 3.10 4.0; do
        step "Broker-facing tests on $(bash tests/integration/broker.sh describe "$v")"
        lane "rmq-$v" env DB_RABBITMQ="$v" ctest --test-dir build -L '^(integration|clients)$' \
            -j "${DB_TEST_JOBS:-5}" --output-on-failure
        wait
    done
fi

failed=()
step "Summary"
for f in "$LANES"/*.rc; do
    name=$(basename "$f" .rc)
    read -r rc secs <"$f"
    if [ "$rc" = 0 ]; then
        printf '  %-8s passed in %4d s\n' "$name" "$secs"
    else
        printf '  %-8s FAILED in %4d s (exit %s)\n' "$name" "$secs" "$rc"
        failed+=("$name")
    fi
done
step "Total: $(( $(date +%s) - RUN_START )) s"
if [ ${#failed[@]} -gt 0 ]; then
    msg=$(printf '%s; ' "${failed[@]}")
    step "FAILED: ${msg%; } (search the output for lines starting [name])"
    exit 1
fi
step "All tests passed ($ROOT)"
