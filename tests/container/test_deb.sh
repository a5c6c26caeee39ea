#!/bin/bash
# tests/container/test_deb.sh -- the Debian package, installed where a user
# would install it: a clean Debian 12 container (root podman).
#
#   1. cpack -G DEB in the build directory makes delay-bridge_VERSION_amd64.deb;
#   2. in a fresh debian:bookworm-slim container, `apt-get install ./that.deb`
#      pulls its dependencies from Debian and runs the postinst;
#   3. /usr/bin/delay-bridge --version prints the project's version;
#   4. --check-config accepts the example config /etc/delay-bridge/config.json,
#      also run as the system user delay-bridge (it can read the config, which
#      is 0640 root:delay-bridge, and write /var/lib/delay-bridge, 0700);
#   5. the systemd unit is at /usr/lib/systemd/system/delay-bridge.service
#      (ExecStart=/usr/bin/delay-bridge, User=delay-bridge) and the config is
#      a conffile;
#   6. the man pages: /usr/share/man/man8/delay-bridge.8.gz and
#      /usr/share/man/man5/delay-bridge.json.5.gz are in the package and valid
#      gzip; with man-db installed afterwards (minbase has none; our package
#      needs no man-db trigger), `man -w delay-bridge` and
#      `man -w delay-bridge.json` resolve to them and both render;
#   7. `apt-get purge` removes the binary and the user, and keeps
#      /var/lib/delay-bridge when it holds something (a WAL is never deleted
#      by the package manager).
#
# Gated like test_container.sh (label "container", -DDB_CONTAINER_TESTS=ON):
# root podman changes host settings (podman_base.sh). The base image comes
# from debootstrap and the host's own mirror; no registry.
#
# Exit: 0 passed, 1 failed, 77 skipped. Environment:
#   DB_DEB_BUILD        the cmake build directory to pack (required)
#   DB_CONTAINER_WORK   logs and the .deb (default: .tmp/container-deb)
#   DB_CONTAINER_CACHE  the base rootfs tarball cache (default /var/cache/delay-bridge-tests)
# Time: about 30 s with the base image present (apt inside the container).
set -euo pipefail

SKIP=77
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
WORK=${DB_CONTAINER_WORK:-$ROOT/.tmp/container-deb}
CACHE=${DB_CONTAINER_CACHE:-/var/cache/delay-bridge-tests}
BUILD=${DB_DEB_BUILD:?DB_DEB_BUILD: the cmake build directory to pack}
BASE_IMAGE=docker.io/library/debian:bookworm-slim
C=dbdeb$$

T0=$(date +%s)
step() { printf '==> [%3ds] %s\n' "$(($(date +%s) - T0))" "$*"; }
info() { printf '    %s\n' "$*"; }
skip() { printf 'SKIP: %s\n' "$*"; exit $SKIP; }
fail() { printf 'FAIL: %s\n' "$*"; exit 1; }
logged() {
    local logf=$WORK/$1; shift
    if ! "$@" >"$logf" 2>&1; then
        tail -n 25 "$logf" | sed 's/^/    | /'
        fail "'$*' failed (full output: $logf)"
    fi
}

[ "$(id -u)" -eq 0 ] || skip "needs root (root podman)"
command -v podman >/dev/null || skip "podman missing (apt-get install podman buildah crun uidmap debootstrap)"
command -v cpack >/dev/null || skip "cpack missing (package cmake)"
mkdir -p "$WORK"
rm -f "$WORK"/*.log "$WORK"/*.deb
trap 'podman rm -f -t 1 "$C" >"$WORK/cleanup.log" 2>&1 </dev/null || true' EXIT

. tests/container/podman_base.sh

step "The package: cpack -G DEB in $BUILD"
logged cpack.log cpack -G DEB --config "$BUILD/CPackConfig.cmake" -B "$WORK/cpack"
deb=$(ls "$WORK"/cpack/delay-bridge_*_amd64.deb 2>/dev/null | head -n 1)
[ -n "$deb" ] || fail "cpack made no delay-bridge_*_amd64.deb (see $WORK/cpack.log)"
version=$(sed -n 's/^project(delay-bridge VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
[ "$(basename "$deb")" = "delay-bridge_${version}_amd64.deb" ] \
    || fail "package named $(basename "$deb"), expected delay-bridge_${version}_amd64.deb"
cp "$deb" "$WORK/"
deb=$WORK/$(basename "$deb")
info "$(basename "$deb"): $(stat -c %s "$deb") bytes; $(dpkg-deb -f "$deb" Depends)"
for m in ./usr/share/man/man8/delay-bridge.8.gz ./usr/share/man/man5/delay-bridge.json.5.gz; do
    dpkg-deb -c "$deb" | awk '{print $NF}' | grep -qx "$m" || fail "the package lacks $m (deploy/debian/package.cmake)"
done
info "man pages in the package: delay-bridge.8.gz, delay-bridge.json.5.gz"

step "Host settings for root podman"
db_podman_host_settings
db_podman_base_image "$BASE_IMAGE"

step "Installing it in a clean Debian 12 container"
cat >"$WORK/inside.sh" <<'INSIDE'
set -eu
say() { printf '    | %s\n' "$*"; }
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends /pkg/*.deb >/tmp/apt.log 2>&1 \
    || { tail -n 20 /tmp/apt.log; exit 10; }
say "installed: $(dpkg-query -W -f='${Package} ${Version} ${Status}' delay-bridge)"
v=$(delay-bridge --version)
say "delay-bridge --version: $v"
case "$v" in *"$1"*) ;; *) echo "version $v is not $1"; exit 11 ;; esac
[ "$(command -v delay-bridge)" = /usr/bin/delay-bridge ] || { echo "not /usr/bin/delay-bridge"; exit 12; }
delay-bridge --config /etc/delay-bridge/config.json --check-config || { echo "--check-config (root) failed"; exit 13; }
say "--check-config /etc/delay-bridge/config.json: ok (root)"
id delay-bridge >/dev/null || { echo "no user delay-bridge"; exit 14; }
say "user: $(id delay-bridge)"
st=$(stat -c '%U:%G %a' /var/lib/delay-bridge)
[ "$st" = "delay-bridge:delay-bridge 700" ] || { echo "/var/lib/delay-bridge is $st"; exit 15; }
say "/var/lib/delay-bridge: $st"
st=$(stat -c '%U:%G %a' /etc/delay-bridge/config.json)
[ "$st" = "root:delay-bridge 640" ] || { echo "/etc/delay-bridge/config.json is $st"; exit 16; }
setpriv --reuid=delay-bridge --regid=delay-bridge --init-groups \
    delay-bridge --config /etc/delay-bridge/config.json --check-config \
    || { echo "--check-config as user delay-bridge failed"; exit 17; }
setpriv --reuid=delay-bridge --regid=delay-bridge --init-groups touch /var/lib/delay-bridge/probe \
    || { echo "user delay-bridge cannot write /var/lib/delay-bridge"; exit 18; }
say "--check-config as user delay-bridge: ok; /var/lib/delay-bridge writable by it"
u=/usr/lib/systemd/system/delay-bridge.service
grep -qx 'ExecStart=/usr/bin/delay-bridge --config /etc/delay-bridge/config.json' $u || { echo "$u: ExecStart"; exit 19; }
grep -qx 'User=delay-bridge' $u || { echo "$u: no User=delay-bridge"; exit 20; }
! grep -q '^DynamicUser' $u || { echo "$u: DynamicUser"; exit 21; }
grep -qx /etc/delay-bridge/config.json /var/lib/dpkg/info/delay-bridge.conffiles || { echo "config not a conffile"; exit 22; }
say "unit $u (User=delay-bridge), config a conffile"
m8=/usr/share/man/man8/delay-bridge.8.gz m5=/usr/share/man/man5/delay-bridge.json.5.gz
gzip -t $m8 && gzip -t $m5 || { echo "man pages missing or not gzip"; exit 27; }
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends man-db >/tmp/man.log 2>&1 \
    || { tail -n 20 /tmp/man.log; exit 28; }
[ "$(man -w delay-bridge)" = $m8 ] || { echo "man -w delay-bridge: $(man -w delay-bridge 2>&1)"; exit 29; }
[ "$(man -w delay-bridge.json)" = $m5 ] || { echo "man -w delay-bridge.json: $(man -w delay-bridge.json 2>&1)"; exit 30; }
MANWIDTH=80 man -P cat delay-bridge 2>/dev/null | grep -q 'wal salvage' || { echo "man delay-bridge does not render"; exit 31; }
MANWIDTH=80 man -P cat delay-bridge.json 2>/dev/null | grep -q 'routes\[\]\.max_held' || { echo "man delay-bridge.json does not render"; exit 32; }
say "man -w delay-bridge: $m8; man -w delay-bridge.json: $m5; both render"
DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq delay-bridge >/tmp/purge.log 2>&1 || { tail /tmp/purge.log; exit 23; }
[ ! -e /usr/bin/delay-bridge ] || { echo "binary left after purge"; exit 24; }
[ ! -e $m8 ] && [ ! -e $m5 ] || { echo "man pages left after purge"; exit 33; }
! id delay-bridge >/dev/null 2>&1 || { echo "user left after purge"; exit 25; }
[ -e /var/lib/delay-bridge/probe ] || { echo "purge deleted a non-empty /var/lib/delay-bridge"; exit 26; }
say "purged: binary and user gone, non-empty /var/lib/delay-bridge kept"
INSIDE
if ! podman run --name "$C" --rm -v "$WORK:/pkg:ro,Z" "$BASE_IMAGE" bash /pkg/inside.sh "$version" \
        >"$WORK/inside.log" 2>&1; then
    sed 's/^/    /' "$WORK/inside.log" | tail -n 30
    fail "the package test inside the container failed (log: $WORK/inside.log)"
fi
grep '^    |' "$WORK/inside.log" || true
step "PASSED ($(($(date +%s) - T0)) s)"
