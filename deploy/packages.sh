# deploy/packages.sh -- the Debian 12 packages delay-bridge uses, in one place.
#
# Sourced (not run) by .ci/run, tests/run.sh and deploy/quickstart.sh:
#
#   . deploy/packages.sh
#   db_packages build test           # print the packages of these groups
#   db_apt_packages build test       # the same, less what apt must not install here
#   db_install_missing build test    # apt-get install those not installed yet
#
# Groups:
#   build      compile the daemon
#   runtime    run it (what the Docker image's last stage installs)
#   test       the test suite: a real RabbitMQ, clients, sanitizers, tools (jq for
#              the benchmarks' scripts; debootstrap for the RabbitMQ 4.x roots of
#              the broker matrix, tests/integration/broker.sh; xfsprogs for the
#              full-disk tests on xfs; python3-qpid-proton, an AMQP 1.0 client)
#              (promtool from prometheus for deploy/monitoring/, headless
#              chromium for the status page test)
#   container  the container test (root podman; see ../shared notes in docs)
#   clients    the client matrix (tests/clients): a client library per
#              language and its toolchain; amqplib itself comes from npm
#              when the test runs (it is not packaged in Debian 12); Symfony
#              Messenger and php-amqp for the retry recipes (tests/clients/retry-recipes)
#
# db_install_missing honours DB_SKIP_INSTALL=1 (install nothing, warn) and
# uses sudo when not root. apt-get's output goes to $DB_APT_LOG if set.

DB_PKG_build="librabbitmq-dev libev-dev libjson-c-dev libmicrohttpd-dev pkg-config make cmake gcc libc6-dev"
DB_PKG_runtime="librabbitmq4 libev4 libjson-c5 libmicrohttpd12 ca-certificates"
DB_PKG_test="clang libclang-rt-14-dev rabbitmq-server amqp-tools python3-pika python3-yaml systemd valgrind openssl curl jq prometheus chromium debootstrap xfsprogs python3-qpid-proton"
DB_PKG_clients="nodejs npm php-cli php-amqplib ruby-bunny golang-go golang-github-rabbitmq-amqp091-go-dev default-jdk-headless librabbitmq-client-java libslf4j-java python3-pika python3-kombu python3-celery php-amqp php-symfony-messenger php-symfony-amqp-messenger"
DB_PKG_container="podman buildah crun debootstrap uidmap podman-compose golang-github-containernetworking-plugin-dnsname"

db_packages() {
    local g v
    for g in "$@"; do
        v="DB_PKG_$g"
        [ -n "${!v:-}" ] || { echo "packages.sh: unknown group '$g'" >&2; return 2; }
        printf '%s\n' ${!v}
    done | awk '!seen[$0]++'
}

# db_apt_packages: db_packages, less Debian's npm when an npm is already on
# the PATH. A nodejs from NodeSource bundles its own npm and declares
# "Conflicts: npm", so asking apt for npm there fails the whole install
# ("held broken packages"), even though npm is present.
db_apt_packages() {
    local list p
    list=$(db_packages "$@") || return 2
    for p in $list; do
        [ "$p" = npm ] && command -v npm >/dev/null && continue
        printf '%s\n' "$p"
    done
}

db_install_missing() {
    local missing=() p sudo=() list
    list=$(db_apt_packages "$@") || return 2
    for p in $list; do
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "${DB_SKIP_INSTALL:-}" = 1 ]; then
        echo "missing packages (DB_SKIP_INSTALL=1, not installing): ${missing[*]}" >&2
        return 0
    fi
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || { echo "run as root or install sudo; missing: ${missing[*]}" >&2; return 1; }
        sudo=(sudo)
    fi
    echo "==> Installing: ${missing[*]}"
    if [ -n "${DB_APT_LOG:-}" ]; then
        "${sudo[@]}" apt-get update >>"$DB_APT_LOG" 2>&1 &&
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
            "${missing[@]}" >>"$DB_APT_LOG" 2>&1
    else
        "${sudo[@]}" apt-get update &&
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
    fi
}
