#!/bin/bash
# broker.sh -- which RabbitMQ the tests, benchmarks and quick start run: the
# broker matrix.
#
#   broker.sh bin-dir [VERSION]    prepare VERSION if need be; print the directory
#                                  whose rabbitmq-server, rabbitmqctl, ... to use
#   broker.sh prepare [VERSION]    only prepare it (CI does this before the suite)
#   broker.sh describe [VERSION]   print "RabbitMQ X.Y.Z (where)"
#
# VERSION (default: $DB_RABBITMQ, else 3.10):
#   3.10  the host's own Debian 12 package (rabbitmq-server 3.10.8, apt-get)
#   4.0   Debian 13 (trixie)'s rabbitmq-server 4.0.5, Erlang 27
#   4.3   Debian 14 (forky, testing)'s rabbitmq-server 4.3.6, Erlang 29
#   qq-delay  rabbitmq-server's qq-vNext branch (the 4.4 line, quorum queues
#         that hold a message published with a future x-opt-delivery-time),
#         built from source by build_qq_delay.sh over the forky root, into
#         ROOTS/qq-delay (a minute, once; see that script)
#   4.4   rabbitmq-server's main (the 4.4 line; no publish-time delays yet),
#         the same way into ROOTS/main-4.4, with the khepri and osiris at
#         hand (0.19.0-beta.1 and 1.13.1, where main asks for beta.2 and 1.13.2)
#
# Debian 12 cannot install the newer packages (their Erlang needs a newer
# libc), so 4.0 and 4.3 live in a root file system of their Debian suite,
# made once with debootstrap from the mirror apt already uses (about a
# minute, ~370 MB) under $DB_RABBITMQ_ROOTS (default
# /var/cache/delay-bridge/roots/SUITE) and reused. Nodes run in it under
# chroot: a chroot shares the host's network, so a node listens on the
# host's loopback and every client, test and bridge connects as usual.
# Next to the root, SUITE.bin/ holds one wrapper per RabbitMQ command
# (rabbitmq-server, rabbitmqctl, rabbitmq-plugins, rabbitmq-diagnostics,
# rabbitmq-queues, rabbitmq-streams, rabbitmq-upgrade): each mounts /proc,
# /dev and /sys into the root if they are not yet, and execs the root's
# command under chroot with the caller's environment. That directory is
# what RABBITMQ_BIN_DIR names for rabbitmq.sh and cluster.sh.
#
# Paths: a node's state directory must be the same path inside the root as
# outside. rabbitmq.sh makes it a symlink on the host to ROOT/DIR (see
# rabbitmq.sh, "A node in a root"), so nothing is bind-mounted per node.
#
# Root only (debootstrap, chroot, mount). Exit codes: 0 ok, 1 error,
# 2 usage, 77 this machine cannot run VERSION (not root, no debootstrap):
# callers skip rather than fail.
set -euo pipefail

ROOTS=${DB_RABBITMQ_ROOTS:-/var/cache/delay-bridge/roots}
COMMANDS="rabbitmq-server rabbitmqctl rabbitmq-plugins rabbitmq-diagnostics rabbitmq-queues rabbitmq-streams rabbitmq-upgrade"

say() { printf 'broker.sh: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }
cannot() { say "cannot run RabbitMQ $VERSION here: $*"; exit 77; }

usage() {
    sed -n '5,9p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

suite_of() {
    case "$1" in
    3.10) echo host ;;
    4.0) echo trixie ;;
    4.3) echo forky ;;
    qq-delay) echo qq-delay ;;
    4.4) echo main-4.4 ;;
    *) say "unknown broker version '$1': 3.10, 4.0, 4.3, 4.4 or qq-delay"; exit 2 ;;
    esac
}

mirror() {
    local m
    m=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    [ -n "$m" ] || m=$(awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
    [ -n "$m" ] || m=http://deb.debian.org/debian
    echo "$m"
}

# The root of SUITE, made once (atomically: a half-made root is never used).
make_root() {
    local suite=$1 root=$ROOTS/$1 script=() log
    [ -x "$root/usr/lib/rabbitmq/bin/rabbitmq-server" ] && return 0
    if [ "$suite" = qq-delay ] || [ "$suite" = main-4.4 ]; then
        # Built from source over the forky root (which it prepares itself,
        # under this same lock: it calls "broker.sh prepare 4.3" only when
        # forky is missing, so take that case first).
        make_root forky
        if [ "$suite" = main-4.4 ]; then
            DB_RABBITMQ_ROOTS=$ROOTS QQ_DELAY_REF=main QQ_DELAY_NAME=main-4.4 \
                "$(dirname "$0")/build_qq_delay.sh" >&2 || exit $?
        else
            DB_RABBITMQ_ROOTS=$ROOTS "$(dirname "$0")/build_qq_delay.sh" >&2 || exit $?
        fi
        return 0
    fi
    [ "$(id -u)" -eq 0 ] || cannot "making its root needs root (debootstrap, chroot)"
    command -v debootstrap >/dev/null || cannot "debootstrap is not installed (apt-get install debootstrap)"
    mkdir -p "$ROOTS"
    # Debian 12's debootstrap has no script for forky (testing); sid's serves.
    [ "$suite" = forky ] && [ ! -e /usr/share/debootstrap/scripts/forky ] &&
        script=(/usr/share/debootstrap/scripts/sid)
    log=$ROOTS/$suite.debootstrap.log
    say "making the RabbitMQ $VERSION root in $root (debootstrap $suite, about a minute; log $log)"
    rm -rf "$root.tmp"
    if ! debootstrap --variant=minbase --include=rabbitmq-server,python3,procps \
        "$suite" "$root.tmp" "$(mirror)" "${script[@]}" >"$log" 2>&1; then
        tail -n 20 "$log" >&2
        die "debootstrap $suite failed (log $log)"
    fi
    mv "$root.tmp" "$root"
}

make_wrappers() {
    local suite=$1 root=$ROOTS/$1 bin=$ROOTS/$1.bin c
    mkdir -p "$bin"
    for c in $COMMANDS; do
        [ -e "$root/usr/lib/rabbitmq/bin/$c" ] || continue
        cat >"$bin/$c.tmp.$$" <<WRAP
#!/bin/bash
# Made by tests/integration/broker.sh: $c of RabbitMQ $VERSION in $root, under chroot.
for d in proc dev sys; do
    mountpoint -q "$root/\$d" || mount --bind "/\$d" "$root/\$d"
done
exec chroot "$root" /usr/lib/rabbitmq/bin/$c "\$@"
WRAP
        chmod 755 "$bin/$c.tmp.$$"
        mv -f "$bin/$c.tmp.$$" "$bin/$c"
    done
    echo "$bin"
}

bin_dir() {
    local suite
    suite=$(suite_of "$VERSION")
    if [ "$suite" = host ]; then
        local d=/usr/lib/rabbitmq/bin
        [ -x "$d/rabbitmq-server" ] || cannot "rabbitmq-server is not installed (apt-get install rabbitmq-server)"
        echo "$d"
        return
    fi
    # One preparation at a time (ctest starts two brokers at once).
    mkdir -p "$ROOTS"
    exec 9>"$ROOTS/.lock"
    flock 9
    make_root "$suite"
    make_wrappers "$suite"
    exec 9>&-
}

[ $# -ge 1 ] || usage
CMD=$1
VERSION=${2:-${DB_RABBITMQ:-3.10}}
case "$CMD" in
bin-dir) bin_dir ;;
prepare) bin_dir >/dev/null ;;
describe)
    suite=$(suite_of "$VERSION")
    if [ "$suite" = host ]; then
        printf 'RabbitMQ %s (the host'"'"'s Debian package)\n' \
            "$(dpkg-query -W -f '${Version}' rabbitmq-server 2>/dev/null || echo '?')"
    else
        bin_dir >/dev/null
        if [ "$suite" = qq-delay ] || [ "$suite" = main-4.4 ]; then
            printf 'RabbitMQ %s (%s, built in %s)\n' \
                "$(awk '$1 == "version" {print $2}' "$ROOTS/$suite/QQ_DELAY_BUILD")" \
                "$(awk '$1 == "rabbitmq-server" {print $2 " " substr($3, 1, 12)}' "$ROOTS/$suite/QQ_DELAY_BUILD")" \
                "$ROOTS/$suite"
            exit 0
        fi
        printf 'RabbitMQ %s (Debian %s root in %s)\n' \
            "$(chroot "$ROOTS/$suite" dpkg-query -W -f '${Version}' rabbitmq-server 2>/dev/null || echo '?')" \
            "$suite" "$ROOTS/$suite"
    fi
    ;;
*) usage ;;
esac
