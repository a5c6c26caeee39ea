#!/bin/bash
# tests/run.sh -- build delay-bridge and run every test. The one test command.
#
# On a fresh Debian 12 machine (root, or sudo available) it first installs
# what is missing with apt-get. Then:
#   1. build/       RelWithDebInfo build of the daemon, unit tests and benchmarks;
#   2. build-asan/  the same with clang + ASan/UBSan (no integration tests),
#                   and runs the unit tests there (ctest -L unit);
#   3. runs the whole ctest suite in build/: unit tests, then the integration
#      tests against a throwaway RabbitMQ on 127.0.0.1:5681 (see
#      tests/integration/tests.cmake; DB_TEST_BROKER_URI uses your own broker).
# A build failure stops at once; a failing test stage does not stop the next
# one (so one run shows everything), and the script exits non-zero at the end.
#
# Environment: JOBS (parallel build jobs, default: CPU count),
# DB_SKIP_INSTALL=1 (never run apt-get), DB_SKIP_ASAN=1 (skip step 2).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}

step() { printf '\n==> %s\n' "$*"; }

PACKAGES=(
    librabbitmq-dev libev-dev libjson-c-dev pkg-config make cmake gcc libc6-dev
    clang libclang-rt-14-dev rabbitmq-server amqp-tools python3-pika
)

install_missing() {
    local missing=() p
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "${DB_SKIP_INSTALL:-}" = 1 ]; then
        echo "missing packages (DB_SKIP_INSTALL=1, not installing): ${missing[*]}" >&2
        return 0
    fi
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || { echo "run as root or install sudo; missing: ${missing[*]}" >&2; exit 1; }
        sudo=(sudo)
    fi
    step "Installing missing packages: ${missing[*]}"
    "${sudo[@]}" apt-get update
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
}

install_missing

step "Building build/ (RelWithDebInfo)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j "$JOBS"

failed=()
if [ "${DB_SKIP_ASAN:-}" != 1 ]; then
    step "Building build-asan/ (clang, ASan + UBSan)"
    # -O1: what the sanitizers' authors recommend (usable speed, exact reports).
    CC=clang cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-g -O1" \
        -DDB_SANITIZE=ON -DDB_INTEGRATION=OFF
    cmake --build build-asan -j "$JOBS"

    step "Unit tests under ASan/UBSan (build-asan/)"
    ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_string_checks=1} \
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
        ctest --test-dir build-asan -L unit --output-on-failure || failed+=("unit tests under ASan/UBSan")
fi

step "All tests in build/ (unit + integration against a real RabbitMQ)"
ctest --test-dir build --output-on-failure || failed+=("ctest in build/")

if [ ${#failed[@]} -gt 0 ]; then
    msg=$(printf '%s; ' "${failed[@]}")
    step "FAILED: ${msg%; }"
    exit 1
fi
step "All tests passed ($ROOT)"
