# tests/container/podman_base.sh -- sourced by the container tests
# (test_container.sh, test_deb.sh): root podman and a debian:bookworm-slim
# image on a machine with no registry (see /work/shared/CONTAINERS-NOTES.md).
#
# Needs from the caller: $WORK (logs), $CACHE (the rootfs tarball cache),
# functions step, info, skip, fail, logged (as in test_container.sh).
#
#   db_podman_host_settings     cgroup v1 mount of the unified controllers,
#                               default_ulimits in containers.conf
#   db_podman_base_image IMAGE [SUITE]
#                               IMAGE (docker.io/library/debian:bookworm-slim)
#                               from debootstrap of SUITE (default bookworm;
#                               forky for the RabbitMQ 4.3 stand-in) + the
#                               host's apt mirror, cached; skips (77) when
#                               containers cannot run here

db_podman_host_settings() {
    local unified_ctls ctl conf hard_n hard_u line
    unified_ctls=$(cat /sys/fs/cgroup/unified/cgroup.controllers 2>/dev/null || true)
    if [ -n "$unified_ctls" ] && [ "$(stat -f -c %T /sys/fs/cgroup)" != cgroup2fs ]; then
        for ctl in $unified_ctls; do
            mkdir -p "/sys/fs/cgroup/$ctl" 2>/dev/null || true
            if ! mountpoint -q "/sys/fs/cgroup/$ctl"; then
                mount -t cgroup -o "$ctl" cgroup "/sys/fs/cgroup/$ctl" \
                    || skip "cannot mount cgroup controller $ctl on v1 (crun: cgroups in hybrid mode not supported)"
                info "mounted cgroup v1 controller $ctl"
            fi
        done
    fi
    conf=/etc/containers/containers.conf
    hard_n=$(ulimit -Hn)
    hard_u=$(ulimit -Hu)
    if [ "$hard_u" = unlimited ] || [ "$hard_u" -gt 32768 ]; then hard_u=32768; fi
    if [ "$hard_n" != unlimited ] && ! grep -qs '^[[:space:]]*default_ulimits' "$conf"; then
        line="default_ulimits = [\"nofile=$hard_n:$hard_n\", \"nproc=$hard_u:$hard_u\"]"
        mkdir -p "$(dirname "$conf")"
        if grep -qs '^\[containers\]' "$conf"; then
            sed -i "/^\[containers\]/a $line" "$conf"
        else
            printf '[containers]\n%s\n' "$line" >>"$conf"
        fi
        info "$conf: $line"
    fi
}

db_podman_base_image() {
    local image=$1 suite=${2:-bookworm} tarball sources mirror rootfs script=()
    if podman image exists "$image"; then
        step "Base image $image: present"
    else
        tarball=$CACHE/debian-$suite-minbase.tar
        if [ ! -s "$tarball" ]; then
            command -v debootstrap >/dev/null || skip "no $image and no debootstrap to make it (apt-get install debootstrap)"
            sources=/etc/apt/sources.list.d/debian.sources
            if [ -f "$sources" ]; then
                mirror=$(awk '$1 == "URIs:" { print $2; exit }' "$sources")
            else
                sources=/etc/apt/sources.list
                mirror=$(awk '$1 == "deb" && $2 !~ /^\[/ { print $2; exit }' "$sources" 2>/dev/null || true)
            fi
            [ -n "$mirror" ] || fail "no Debian mirror found in $sources"
            step "Base image: debootstrap $suite from $mirror (cached in $tarball)"
            mkdir -p "$CACHE"
            rootfs=$(mktemp -d "$CACHE/rootfs.XXXXXX")
            # Debian 12's debootstrap has no script for forky (testing); sid's serves.
            [ -e "/usr/share/debootstrap/scripts/$suite" ] || script=(/usr/share/debootstrap/scripts/sid)
            logged "debootstrap-$suite.log" debootstrap --variant=minbase "$suite" "$rootfs" "$mirror" \
                "${script[@]}"
            if [ "$suite" = bookworm ]; then
                # the host's own sources (bookworm, its updates and security)
                rm -f "$rootfs/etc/apt/sources.list"
                cp "$sources" "$rootfs/etc/apt/sources.list.d/"
            else
                # debootstrap's sources.list ("deb $mirror $suite main"). A testing
                # suite's Release file is valid for a week only (Valid-Until): a
                # mirror that lags this machine's clock (seen here: forky's
                # "expired 21d ago") makes apt-get update refuse it. This base
                # is for offline tests only: let apt take it.
                echo 'Acquire::Check-Valid-Until "false";' >"$rootfs/etc/apt/apt.conf.d/99db-valid-until"
            fi
            rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
            tar --numeric-owner -C "$rootfs" -cf "$tarball.tmp" .
            mv "$tarball.tmp" "$tarball"
            rm -rf "$rootfs"
        else
            step "Base image: importing $tarball"
        fi
        logged "import-$suite.log" podman import --change 'CMD ["bash"]' "$tarball" "localhost/debian:$suite-slim"
        podman tag "localhost/debian:$suite-slim" "$image"
    fi
    if ! podman run --rm --network none "$image" true >"$WORK/run-check.log" 2>&1; then
        sed 's/^/    | /' "$WORK/run-check.log" | tail -n 5
        skip "podman cannot run a container on this machine (see $WORK/run-check.log)"
    fi
}
