#!/bin/bash
# tests/run.sh -- build delay-bridge and run every test. The one test command.
#
# On a fresh Debian 12 machine (root, or sudo available) it first installs
# what is missing with apt-get. Then:
#   1. build/       RelWithDebInfo build of the daemon, unit tests and benchmarks;
#      build-release/ the Release build (-O3) users and packagers make, compiled
#                  only (its warnings are not those of -O2: GCC's format
#                  checks see more once inlined);
#   2. build-asan/  the same with clang + ASan/UBSan; runs the unit tests and
#                   the integration tests (but the slowest fault and volume
#                   ones) against the sanitized daemon, on a broker of its own;
#   3. runs the whole ctest suite in build/: unit tests, the purity check,
#      deploy/ checks (systemd unit, Kubernetes manifests, example configs),
#      then the integration tests against a throwaway RabbitMQ on
#      127.0.0.1:5681 (see tests/integration/tests.cmake; DB_TEST_BROKER_URI
#      uses your own broker), the client matrix (tests/clients: a program
#      per client library publishes to a bridge), and with DB_CONTAINER_TESTS=1 the container
#      test (builds docker/ with root podman; changes host settings, so it is
#      off unless asked for -- .ci/run asks).
# A build failure stops at once; a failing test stage does not stop the next
# one (so one run shows everything), and the script exits non-zero at the end.
#
# With --quick, the loop for an edit (about 2 minutes on 2 cores once
# build/ exists): build build/, the unit tests and the purity check in
# parallel, then a representative handful of integration tests on one
# broker -- a crash test (integration.crash), keys (integration.keys), a
# replicated log (integration.replicate) and the WAL tools
# (integration.cli_wal). No ASan build, no fuzzers, no deploy checks, no
# apt-get. Run the whole script (or .ci/run) before a merge.
#
# Environment: JOBS (parallel build jobs, default: CPU count),
# DB_SKIP_INSTALL=1 (never run apt-get), DB_SKIP_ASAN=1 (skip step 2),
# DB_CONTAINER_TESTS=1 (also the container test), DB_SKIP_FUZZ=1 (skip the
# brief fuzzer runs).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}

step() { printf '\n==> %s\n' "$*"; }

# The quick loop's integration tests: one of each kind the suite has.
QUICK_TESTS="integration\.(crash|keys|replicate|cli_wal)$"

if [ "${1:-}" = "--quick" ]; then
    start=$(date +%s)
    step "Building build/ (RelWithDebInfo)"
    cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDB_WERROR=ON >/dev/null
    cmake --build build -j "$JOBS"
    step "Unit tests and the purity check (in parallel)"
    rc=0
    ctest --test-dir build -L unit -j "$JOBS" --output-on-failure || rc=1
    step "Integration tests: crash, keys, replicate, cli_wal (one broker)"
    ctest --test-dir build -R "$QUICK_TESTS" --output-on-failure || rc=1
    step "$([ $rc = 0 ] && echo "Quick tests passed" || echo "Quick tests FAILED") in $(( $(date +%s) - start )) s ($ROOT)"
    exit $rc
elif [ $# -gt 0 ]; then
    echo "usage: tests/run.sh [--quick]" >&2
    exit 2
fi

# The package list lives in one place: deploy/packages.sh.
. deploy/packages.sh
if [ "${DB_CONTAINER_TESTS:-}" = 1 ]; then
    db_install_missing build test clients container
else
    db_install_missing build test clients
fi

step "Building build/ (RelWithDebInfo)"
CONTAINER=OFF
[ "${DB_CONTAINER_TESTS:-}" = 1 ] && CONTAINER=ON
# -Werror here, in the project's own run only (the default is off, for users).
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDB_WERROR=ON -DDB_CONTAINER_TESTS=$CONTAINER
cmake --build build -j "$JOBS"

step "Building build-release/ (Release, -O3: what users and packagers build; compile only)"
cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release -DDB_WERROR=ON -DDB_INTEGRATION=OFF
cmake --build build-release -j "$JOBS" --target delay-bridge

failed=()
if [ "${DB_SKIP_ASAN:-}" != 1 ]; then
    step "Building build-asan/ (clang, ASan + UBSan)"
    # -O1: what the sanitizers' authors recommend (usable speed, exact reports).
    CC=clang cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-g -O1" \
        -DDB_WERROR=ON -DDB_SANITIZE=ON -DDB_INTEGRATION=ON -DDB_TEST_BROKER_PORT=5683 -DDB_TEST_BROKER_DIST_PORT=25683
    cmake --build build-asan -j "$JOBS"

    step "Unit tests under ASan/UBSan (build-asan/)"
    ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_string_checks=1} \
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
        ctest --test-dir build-asan -L unit -j "$JOBS" --output-on-failure || failed+=("unit tests under ASan/UBSan")

    step "Integration tests with the daemon built with ASan/UBSan (build-asan/, broker on :5683)"
    # The slowest fault, volume and multi-node tests run once, in build/ below
    # (the code paths they reach are covered here by the shorter ones); so do
    # the client matrix (other people's programs: the header rules they reach
    # are unit-tested and fuzzed under the sanitizers) and the status page in
    # a browser.
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
        ctest --test-dir build-asan -L integration --output-on-failure \
            -E "kill_loop|failpoints|tls|recovery_progress|browse_purge|cluster|scale_out|drain|stalled_broker|replicate_enable|replicate_crash|clients\.|integration\.ui$" ||
        failed+=("integration tests under ASan/UBSan")
fi

if [ "${DB_SKIP_FUZZ:-}" != 1 ]; then
    step "Fuzzers, briefly (build-fuzz/: clang + libFuzzer; tests/fuzz/run.sh for the long run)"
    CC=clang cmake -S . -B build-fuzz -DDB_WERROR=ON -DDB_FUZZ=ON -DDB_INTEGRATION=OFF -DDB_FUZZ_SECONDS=15
    cmake --build build-fuzz -j "$JOBS" --target fuzz_walrec fuzz_props_roundtrip fuzz_config \
        fuzz_xdelay fuzz_uri fuzz_replrec
    ctest --test-dir build-fuzz -L fuzz --output-on-failure || failed+=("fuzzers")
fi

step "All tests in build/ (unit + integration against a real RabbitMQ)"
# -j: unit and deploy tests run side by side; integration tests marked
# RUN_SERIAL (tests/integration/tests.cmake) still run alone.
ctest --test-dir build -j "$JOBS" --output-on-failure || failed+=("ctest in build/")

if [ ${#failed[@]} -gt 0 ]; then
    msg=$(printf '%s; ' "${failed[@]}")
    step "FAILED: ${msg%; }"
    exit 1
fi
step "All tests passed ($ROOT)"
