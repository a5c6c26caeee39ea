#!/bin/bash
# tests/container/test_container.sh -- build the docker/ images with root
# podman and prove the delay-bridge image does its job.
#
# Against the images a user would run (docker/Dockerfile, docker/demo/,
# and a RabbitMQ), on a podman network, with the WAL on a named volume:
#   1. a message published with x-delay 3000 (by the demo's publish_orders.py)
#      reaches the target queue (the demo's close_orders.py), not before 3 s;
#   2. a message with x-delay 8000, then the bridge container stopped
#      (SIGTERM, must exit 0), removed and started again as a new container on
#      the same volume before it is due: it still arrives, on time, after the
#      restart (the held message lived in the WAL on the volume);
#   3. the daemon runs as uid 10001, not root;
#   4. when the binary accepts the demo config's "http" block (the HTTP
#      endpoint), the container's HEALTHCHECK (curl /healthz) reports healthy;
#      until then the test runs without that block and says so;
#   5. docker/rabbitmq-shim (RabbitMQ + the x-delayed-message shim, built in
#      the image against its own RabbitMQ) starts with the shim enabled and
#      owning the exchange type x-delayed-message;
#   6. (DB_CONTAINER_COMPOSE=1, the default) docker/compose.yml comes up with
#      podman-compose and its demo closes its orders; then `down`. Compose
#      services find each other by name: where containers on a podman network
#      cannot resolve names (podman 4.3 with CNI and no dnsname plugin), this
#      step is skipped with a note; steps 1-4 do not need it.
#
# No registry is needed (see /work/shared/CONTAINERS-NOTES.md): the base
# image debian:bookworm-slim is made with debootstrap from the host's own apt
# mirror (read from /etc/apt/sources.list.d/debian.sources at run time) and
# cached; the official RabbitMQ image is replaced by a stand-in built from
# docker/rabbitmq-standin/ (Debian forky's rabbitmq-server 4.3, on a
# debian:forky-slim base made the same way) and tagged rabbitmq:4.3 (only if
# no image of that name exists that is not the stand-in).
#
# Host settings it applies (root podman on a cgroup-v1 hybrid VM): mounts the
# controllers listed in /sys/fs/cgroup/unified/cgroup.controllers (hugetlb) on
# cgroup v1, and writes default_ulimits into /etc/containers/containers.conf
# when that file sets none (nofile = the hard limit here).
#
# Exit: 0 passed, 1 failed, 77 skipped (not root, podman missing, containers
# cannot run here). Logs and generated files: $DB_CONTAINER_WORK.
# Time (measured on a 2-CPU VM): about 35 s warm (images built before; a
# changed src/ or tests/ reruns only the compile layer), 60 s with the compose
# smoke; about 2 min cold (debootstrap 30 s, apt + compile in the image
# builds 45 s), more with a slow mirror.
#
# Environment:
#   DB_CONTAINER_WORK     logs and generated configs (default: .tmp/container)
#   DB_CONTAINER_CACHE    the debootstrapped base rootfs tarball
#                         (default: /var/cache/delay-bridge-tests)
#   DB_CONTAINER_COMPOSE  0 skips the podman-compose smoke (step 6)
#   DB_CONTAINER_KEEP     1 leaves containers, network and volume for
#                         inspection (and prints how to remove them)
set -euo pipefail

SKIP=77
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
WORK=${DB_CONTAINER_WORK:-$ROOT/.tmp/container}
CACHE=${DB_CONTAINER_CACHE:-/var/cache/delay-bridge-tests}
COMPOSE=${DB_CONTAINER_COMPOSE:-1}
KEEP=${DB_CONTAINER_KEEP:-0}

BASE_IMAGE=docker.io/library/debian:bookworm-slim
RABBIT_IMAGE=docker.io/library/rabbitmq:4.3         # as in docker/compose.yml
STANDIN_BASE=docker.io/library/debian:forky-slim    # docker/rabbitmq-standin/Dockerfile's FROM
BRIDGE_IMAGE=localhost/delay-bridge:dev             # as in docker/compose.yml
SHIM_IMAGE=localhost/rabbitmq-shim:dev               # docker/rabbitmq-shim: RabbitMQ + the shim
DEMO_IMAGE=localhost/delay-bridge-demo:dev          # as in docker/compose.yml
STANDIN_TITLE="rabbitmq stand-in (offline tests only)"

RUN_ID=dbct$$
NET=$RUN_ID-net
VOL=$RUN_ID-wal
C_RABBIT=$RUN_ID-rabbitmq
C_BRIDGE=$RUN_ID-bridge
C_CLOSER=$RUN_ID-closer
C_SHIM=$RUN_ID-rabbitmq-shim
COMPOSE_PROJECT=$RUN_ID-compose
BROKER_URI="amqp://guest:guest@rabbitmq:5672/%2f"

T0=$(date +%s)
step() { printf '==> [%3ds] %s\n' "$(($(date +%s) - T0))" "$*"; }
info() { printf '    %s\n' "$*"; }
skip() { printf 'SKIP: %s\n' "$*"; exit $SKIP; }
fail() {
    printf 'FAIL: %s\n' "$*"
    dump_logs
    exit 1
}
# Run a command with its output in $WORK/$1; on failure show its end and fail.
logged() {
    local logf=$WORK/$1; shift
    if ! "$@" >"$logf" 2>&1; then
        tail -n 25 "$logf" | sed 's/^/    | /'
        fail "'$*' failed (full output: $logf)"
    fi
}

# 0. Can this machine run root podman? ----------------------------------------
[ "$(id -u)" -eq 0 ] || skip "needs root (root podman; run as root or with sudo)"
command -v podman >/dev/null || skip "podman missing (apt-get install podman buildah crun uidmap debootstrap podman-compose)"

mkdir -p "$WORK"
rm -f "$WORK"/*.log "$WORK"/*.json

dump_logs() {
    local c
    for c in "$C_BRIDGE" "$C_CLOSER" "$C_RABBIT"; do
        if podman container exists "$c" 2>/dev/null; then
            podman logs "$c" >"$WORK/$c.final.log" 2>&1 || true
            printf '    --- last lines of %s (all: %s) ---\n' "$c" "$WORK/$c.final.log"
            tail -n 15 "$WORK/$c.final.log" | sed 's/^/    | /'
        fi
    done
}

# podman-compose 1.0.3's `down -v` leaves the project's network behind.
compose_down() {
    podman-compose -p "$COMPOSE_PROJECT" -f docker/compose.yml down -v -t 1 </dev/null
    podman network rm -f "${COMPOSE_PROJECT}_default"
}

cleanup() {
    local rc=$?
    trap - EXIT
    if [ "$KEEP" = 1 ]; then
        info "DB_CONTAINER_KEEP=1: left running; remove with:"
        info "podman rm -f -v $C_RABBIT $C_BRIDGE $C_CLOSER; podman network rm $NET; podman volume rm $VOL"
        exit "$rc"
    fi
    # Outputs to a file, never a pipe: an orphaned `podman start -a` (from
    # podman-compose) can hold a pipe open forever.
    {
        [ -z "${COMPOSE_UP:-}" ] || compose_down
        podman rm -f -v -t 1 "$C_CLOSER" "$C_BRIDGE" "$C_RABBIT" "$C_SHIM"
        podman network rm -f "$NET"
        podman volume rm -f "$VOL"
    } >"$WORK/cleanup.log" 2>&1 </dev/null || true
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM


step "Host settings for root podman"
# crun refuses cgroups in "hybrid mode" while a controller is attached to the
# v2 hierarchy of a v1 host, and podman needs default ulimits it may raise:
# both, and the base image, are tests/container/podman_base.sh's (test_deb.sh
# uses the same steps).
. tests/container/podman_base.sh
db_podman_host_settings

# 1. Base image ------------------------------------------------------------------
db_podman_base_image "$BASE_IMAGE"

# 2. Images ------------------------------------------------------------------------
build() { # build LOGNAME IMAGE ARGS...: docker format keeps HEALTHCHECK and STOPSIGNAL
    local logname=$1 image=$2; shift 2
    logged "$logname" podman build --pull=never --format docker -t "$image" "$@"
}
step "Building images (logs: $WORK/build-*.log)"
title=$(podman image inspect -f '{{index .Config.Labels "org.opencontainers.image.title"}}' \
            "$RABBIT_IMAGE" 2>/dev/null || echo absent)
if [ "$title" = absent ] || [ "$title" = "$STANDIN_TITLE" ]; then
    db_podman_base_image "$STANDIN_BASE" forky
    build build-rabbitmq.log "$RABBIT_IMAGE" docker/rabbitmq-standin
    info "$RABBIT_IMAGE: the offline stand-in (docker/rabbitmq-standin)"
else
    info "$RABBIT_IMAGE: using the image already present"
fi
build build-rabbitmq-shim.log "$SHIM_IMAGE" -f docker/rabbitmq-shim/Dockerfile \
    --build-arg RABBITMQ_IMAGE="$RABBIT_IMAGE" .
build build-bridge.log "$BRIDGE_IMAGE" -f docker/Dockerfile \
    --ignorefile docker/Dockerfile.dockerignore \
    --build-arg VERSION="$(git describe --always --dirty 2>/dev/null || echo dev)" \
    --build-arg REVISION="$(git rev-parse -q --verify HEAD 2>/dev/null || echo unknown)" \
    --build-arg CREATED="$(date -u +%Y-%m-%dT%H:%M:%SZ)" .
build build-demo.log "$DEMO_IMAGE" docker/demo
info "$(podman run --rm --no-healthcheck "$BRIDGE_IMAGE" --version 2>&1)"

# 3. Which config? ------------------------------------------------------------------
# The demo config has the "http" block; a binary without the HTTP endpoint
# rejects it ("unknown key"): then run without it, and skip the health check.
# The demo config listens on 0.0.0.0 (the port is published): the bridge
# refuses that without a token (README "Security"), so every run gets one.
export DELAY_BRIDGE_HTTP_TOKEN=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
check_config() { # check_config FILE -> the image's own binary judges it
    podman run --rm --no-healthcheck --network none -e DELAY_BRIDGE_HTTP_TOKEN \
        -v "$1:/etc/delay-bridge/config.json:ro,Z" \
        "$BRIDGE_IMAGE" -c /etc/delay-bridge/config.json --check-config
}
cp docker/demo/config.json "$WORK/config.json"
chmod 0644 "$WORK/config.json"
HTTP=1
if ! check_config "$WORK/config.json" >"$WORK/check-config.log" 2>&1; then
    if grep -q 'http' "$WORK/check-config.log"; then
        HTTP=0
        python3 -c 'import json, sys
c = json.load(open(sys.argv[1])); c.pop("http", None)
json.dump(c, open(sys.argv[1], "w"), indent=2)' "$WORK/config.json"
        check_config "$WORK/config.json" >>"$WORK/check-config.log" 2>&1 \
            || fail "docker/demo/config.json is rejected even without \"http\": $(tail -n 3 "$WORK/check-config.log")"
        info "NOTE: this delay-bridge rejects the \"http\" block of docker/demo/config.json"
        info "      ($(grep -m1 http "$WORK/check-config.log"));"
        info "      running without it: the HEALTHCHECK (/healthz) is not tested."
    else
        fail "docker/demo/config.json is rejected: $(tail -n 3 "$WORK/check-config.log")"
    fi
fi

# 4. Broker and bridge ----------------------------------------------------------------
step "Network $NET, volume $VOL, RabbitMQ"
logged network.log podman network create "$NET"
logged volume.log podman volume create "$VOL"
# --health-interval disable: podman 4.3 schedules health checks with systemd
# timers (no systemd here); the test runs them with `podman healthcheck run`.
logged run-rabbitmq.log podman run -d --name "$C_RABBIT" --network "$NET" --network-alias rabbitmq \
    --health-interval disable "$RABBIT_IMAGE"
RABBIT_IP=$(podman inspect -f "{{(index .NetworkSettings.Networks \"$NET\").IPAddress}}" "$C_RABBIT")
[ -n "$RABBIT_IP" ] || fail "no IP address for $C_RABBIT on $NET"
# The name "rabbitmq" resolves with or without a DNS plugin on the network
# (podman 4.3 with CNI has DNS only with the dnsname plugin installed).
HOSTS=(--add-host "rabbitmq:$RABBIT_IP")
if podman run --rm --no-healthcheck --network "$NET" "$BASE_IMAGE" getent hosts rabbitmq >"$WORK/dns.log" 2>&1; then
    DNS=1
else
    DNS=0
fi
for _ in $(seq 1 120); do
    podman exec "$C_RABBIT" rabbitmq-diagnostics -q check_port_connectivity >"$WORK/rabbitmq-wait.log" 2>&1 && break
    podman container inspect -f '{{.State.Running}}' "$C_RABBIT" 2>/dev/null | grep -q true \
        || fail "RabbitMQ container exited"
    sleep 1
done
podman exec "$C_RABBIT" rabbitmq-diagnostics -q check_port_connectivity >"$WORK/rabbitmq-wait.log" 2>&1 \
    || fail "RabbitMQ not accepting AMQP connections after 120 s"
info "RabbitMQ up at $RABBIT_IP"

start_bridge() {
    logged run-bridge.log podman run -d --name "$C_BRIDGE" --network "$NET" "${HOSTS[@]}" \
        -v "$VOL:/var/lib/delay-bridge" \
        -v "$WORK/config.json:/etc/delay-bridge/config.json:ro,Z" \
        -e DELAY_BRIDGE_BROKER_URI="$BROKER_URI" -e DELAY_BRIDGE_HTTP_TOKEN \
        --stop-timeout 15 --health-interval disable "$BRIDGE_IMAGE"
    for _ in $(seq 1 300); do
        podman logs "$C_BRIDGE" >"$WORK/bridge.log" 2>&1 || true
        grep -q 'msg="ready"' "$WORK/bridge.log" && return 0
        podman container inspect -f '{{.State.Running}}' "$C_BRIDGE" 2>/dev/null | grep -q true \
            || fail "delay-bridge container exited (log: $WORK/bridge.log)"
        sleep 0.1
    done
    fail "delay-bridge not ready after 30 s (log: $WORK/bridge.log)"
}
step "delay-bridge container (WAL on volume $VOL)"
start_bridge
info "ready"

uid=$(podman exec "$C_BRIDGE" id -u)
[ "$uid" != 0 ] || fail "the delay-bridge container runs as root"
[ "$uid" = 10001 ] || fail "the delay-bridge container runs as uid $uid, expected 10001"
info "runs as uid $uid (not root)"

# 5. Delayed messages through the demo programs ------------------------------------------
demo() { podman run --rm --no-healthcheck --network "$NET" "${HOSTS[@]}" -e AMQP_URI="$BROKER_URI" "$DEMO_IMAGE" "$@"; }
logged run-closer.log podman run -d --name "$C_CLOSER" --network "$NET" "${HOSTS[@]}" \
    -e AMQP_URI="$BROKER_URI" "$DEMO_IMAGE" python3 /demo/close_orders.py --count 2 --timeout 180
closer_log() { podman logs "$C_CLOSER" >"$WORK/closer.log" 2>&1 || true; }
for _ in $(seq 1 300); do
    closer_log
    grep -q 'waiting for orders' "$WORK/closer.log" && break
    sleep 0.1
done
grep -q 'waiting for orders' "$WORK/closer.log" || fail "close_orders.py did not start (log: $WORK/closer.log)"

# wait_closed ORDER SECONDS MIN_S: wait for "closed order ORDER, T s ..., late by X ms";
# fail if T < MIN_S or X < 0 (early).
wait_closed() {
    local order=$1 limit=$2 min=$3 line t late
    for _ in $(seq 1 $((limit * 5))); do
        closer_log
        line=$(grep -m1 "^closed order $order," "$WORK/closer.log" || true)
        [ -n "$line" ] && break
        sleep 0.2
    done
    [ -n "$line" ] || fail "order $order not closed within $limit s (closer log: $WORK/closer.log)"
    info "$line"
    t=$(sed -n 's/.*, \([0-9.]*\) s after.*/\1/p' <<<"$line")
    late=$(sed -n 's/.*late by \(-\{0,1\}[0-9]*\) ms.*/\1/p' <<<"$line")
    if [ -z "$t" ] || [ -z "$late" ]; then fail "cannot parse: $line"; fi
    awk -v t="$t" -v m="$min" 'BEGIN { exit !(t >= m) }' || fail "order $order arrived after $t s, before its delay ($min s)"
    [ "$late" -ge 0 ] || fail "order $order arrived $((-late)) ms early"
}

step "x-delay 3000: order 1 must arrive, not before 3 s"
logged publish-1.log demo python3 /demo/publish_orders.py 1:3
info "$(cat "$WORK/publish-1.log")"
wait_closed 1 30 3

step "x-delay 8000: order 2, then a new bridge container on the same WAL volume before it is due"
logged publish-2.log demo python3 /demo/publish_orders.py 2:8
info "$(cat "$WORK/publish-2.log")"
t_pub=$(date +%s)
sleep 1
logged stop-bridge.log podman stop -t 15 "$C_BRIDGE"
podman logs "$C_BRIDGE" >"$WORK/bridge-1.log" 2>&1 || true
code=$(podman container inspect -f '{{.State.ExitCode}}' "$C_BRIDGE")
[ "$code" = 0 ] || fail "delay-bridge exited $code on SIGTERM, expected 0 (log: $WORK/bridge-1.log)"
info "stopped (SIGTERM, exit 0); container removed"
closer_log
! grep -q '^closed order 2,' "$WORK/closer.log" || fail "order 2 arrived before the restart (too early)"
logged rm-bridge.log podman rm "$C_BRIDGE"
start_bridge
t_ready=$(date +%s)
[ $((t_ready - t_pub)) -lt 8 ] || fail "restart took too long ($((t_ready - t_pub)) s): order 2 may have been due before it"
closer_log
! grep -q '^closed order 2,' "$WORK/closer.log" || fail "order 2 arrived before the new bridge was ready"
info "new container ready $((t_ready - t_pub)) s after publishing; order 2 still held"
wait_closed 2 40 8

# 6. Health ------------------------------------------------------------------------------
if [ "$HTTP" = 1 ]; then
    step "HEALTHCHECK: curl /healthz inside the container"
    # (A failure inside the start period leaves "starting"; the first success
    # makes it "healthy".)
    for _ in $(seq 1 30); do
        podman healthcheck run "$C_BRIDGE" >"$WORK/healthcheck.log" 2>&1 && break
        sleep 1
    done
    status=$(podman inspect -f '{{.State.Health.Status}}' "$C_BRIDGE")
    [ "$status" = healthy ] || fail "health status is '$status' after 30 s ($WORK/healthcheck.log)"
    info "healthy"
else
    step "HEALTHCHECK not tested: this build has no HTTP endpoint (see the NOTE above)"
fi

# 7. RabbitMQ with the shim -----------------------------------------------------------------
step "docker/rabbitmq-shim: the shim enabled and owning x-delayed-message"
logged run-rabbitmq-shim.log podman run -d --name "$C_SHIM" --network "$NET" \
    --health-interval disable "$SHIM_IMAGE"
for _ in $(seq 1 120); do
    podman exec "$C_SHIM" rabbitmq-diagnostics -q check_port_connectivity >"$WORK/shim-wait.log" 2>&1 && break
    podman container inspect -f '{{.State.Running}}' "$C_SHIM" 2>/dev/null | grep -q true \
        || fail "the rabbitmq-shim container exited ($(podman logs "$C_SHIM" 2>&1 | tail -n 5))"
    sleep 1
done
podman exec "$C_SHIM" rabbitmq-plugins list -e -m >"$WORK/shim-plugins.log" 2>&1 || true
grep -qx rabbitmq_delay_bridge_exchange "$WORK/shim-plugins.log" \
    || fail "rabbitmq_delay_bridge_exchange is not enabled: $(cat "$WORK/shim-plugins.log")"
podman exec "$C_SHIM" rabbitmqctl eval "rabbit_registry:lookup_module(exchange, 'x-delayed-message')." \
    >"$WORK/shim-type.log" 2>&1 || true
grep -q 'rabbit_exchange_type_delay_bridge' "$WORK/shim-type.log" \
    || fail "x-delayed-message is not the shim's: $(cat "$WORK/shim-type.log")"
info "enabled; x-delayed-message -> $(tr -d '\n' <"$WORK/shim-type.log")"

# 8. Compose smoke -------------------------------------------------------------------------
if [ "$COMPOSE" = 1 ]; then
    if ! command -v podman-compose >/dev/null; then
        step "podman-compose not installed: compose smoke skipped"
    elif [ "$DNS" = 0 ]; then
        step "compose smoke skipped: containers on a podman network cannot resolve each other's names here"
        info "(compose services find \"rabbitmq\" by name; with podman 4.3 + CNI that needs"
        info " apt-get install golang-github-containernetworking-plugin-dnsname)"
    else
        step "podman-compose -f docker/compose.yml up -d (project $COMPOSE_PROJECT)"
        COMPOSE_UP=1
        # No host ports (another broker may hold 5672); the config chosen above.
        export RABBITMQ_PORT=127.0.0.1: DELAY_BRIDGE_HTTP_PORT=127.0.0.1:
        export DELAY_BRIDGE_CONFIG=$WORK/config.json
        logged compose-up.log podman-compose -p "$COMPOSE_PROJECT" -f docker/compose.yml up -d </dev/null
        closer=$(podman ps -a --filter "label=io.podman.compose.project=$COMPOSE_PROJECT" \
                    --filter "label=com.docker.compose.service=orders-closer" --format '{{.Names}}' | head -n 1)
        [ -n "$closer" ] || fail "no orders-closer container in project $COMPOSE_PROJECT"
        for _ in $(seq 1 90); do
            podman logs "$closer" >"$WORK/compose-closer.log" 2>&1 || true
            [ "$(grep -c '^closed order' "$WORK/compose-closer.log")" -ge 3 ] && break
            sleep 1
        done
        grep '^closed order' "$WORK/compose-closer.log" | sed 's/^/    /' || true
        [ "$(grep -c '^closed order' "$WORK/compose-closer.log")" -ge 3 ] \
            || fail "compose demo: fewer than 3 orders closed in 90 s (log: $WORK/compose-closer.log)"
        ! grep -q 'late by -' "$WORK/compose-closer.log" || fail "compose demo: an order closed early"
        logged compose-down.log compose_down
        COMPOSE_UP=
        info "demo closed 3 orders; down"
    fi
fi

step "PASSED ($(($(date +%s) - T0)) s)"
