# shellcheck shell=bash disable=SC2034  # its globals are read by the scripts that source it
# plugin.sh -- the delayed-message plugin 4.0.7 beside the bridge, for the
# end-to-end benchmarks (run.sh, ontime.sh); sourced, never run.
#
# The plugin as tests/integration/test_plugin_compat.py builds it (ebin/ and
# its .app under ${DB_PLUGIN_CACHE:-/var/cache/delay-bridge/plugin-4.0.7});
# this file only copies it into the broker's root, never builds or fetches
# it. It runs on RabbitMQ 4.0 only (DB_RABBITMQ=4.0): on 4.3 it cannot (it
# keeps its messages in Mnesia, which 4.3 removed), on 3.10 it is not
# measured; BENCH_PLUGIN=0 leaves it out.
#
#   plugin_decide [WHY_NOT_NEEDED]   before the broker starts: PLUGIN=1 when
#       the plugin runs on this node (RABBITMQ_PLUGINS_DIR and
#       RABBITMQ_ENABLED_PLUGINS exported for rabbitmq.sh, a copy of it in
#       PLUGIN_TMP inside the broker's root: the caller's cleanup removes
#       it), else PLUGIN_WHY says why not, in the words of the report.
#       WHY_NOT_NEEDED, when given and not empty, is the caller's reason
#       that its loads do not use the plugin (run.sh: neither steady nor
#       burst listed): checked after the broker version and BENCH_PLUGIN.
#   plugin_check_started   after the broker started (LAST_START and NODE_LOG
#       set, as broker_start of harness.sh sets them): when the node's log
#       lists the plugins it started and this one is not among them,
#       PLUGIN=0 and a FAILED entry.
#
# Reads RABBITMQ_BIN_DIR (bench_preflight of common.sh), DB_RABBITMQ,
# BENCH_PLUGIN; calls say.

PLUGIN_VSN=4.0.7
PLUGIN_APP=rabbitmq_delayed_message_exchange
PLUGIN_NAME="plugin $PLUGIN_VSN"
PLUGIN_CACHE=${DB_PLUGIN_CACHE:-/var/cache/delay-bridge/plugin-$PLUGIN_VSN}
PLUGIN_EX=bench.plugin
PLUGIN=0 PLUGIN_WHY="" PLUGIN_TMP="" PLUGIN_LIB=""
plugin_decide() {
    local built=$PLUGIN_CACHE/$PLUGIN_APP-$PLUGIN_VSN root libs
    case "${DB_RABBITMQ:-3.10}" in
    4.0) ;;
    4.3) PLUGIN_WHY="absent: the plugin cannot run on RabbitMQ 4.3 (it keeps its messages in Mnesia, which 4.3 removed)"; return ;;
    *) PLUGIN_WHY="absent: not measured here (the plugin runs beside the bridge on RabbitMQ 4.0: DB_RABBITMQ=4.0)"; return ;;
    esac
    if [ "${BENCH_PLUGIN:-1}" = 0 ]; then PLUGIN_WHY="absent: left out (BENCH_PLUGIN=0)"; return; fi
    if [ -n "${1:-}" ]; then PLUGIN_WHY=$1; return; fi
    if [ ! -f "$built/ebin/$PLUGIN_APP.app" ]; then
        PLUGIN_WHY="skipped: the plugin is not built on this machine (no $built/ebin/$PLUGIN_APP.app; ctest -R integration.plugin_compat.reference builds it from $PLUGIN_CACHE/src: tests/integration/test_plugin_compat.py)"
        return
    fi
    # The node runs in broker.sh's root: the plugin must be inside it, and the
    # node's plugin path is an in-root path.
    root=${RABBITMQ_BIN_DIR%.bin}
    libs=$(compgen -G "$root/usr/lib/rabbitmq/lib/rabbitmq_server-4.0.*/plugins" | tail -n 1 || true)
    if [ "$root" = "$RABBITMQ_BIN_DIR" ] || [ -z "$libs" ]; then
        PLUGIN_WHY="skipped: $RABBITMQ_BIN_DIR is not a RabbitMQ 4.0 root of broker.sh (no rabbitmq_server-4.0.*/plugins under ${root:-?})"
        return
    fi
    if [ ! -w "$root/tmp" ]; then
        PLUGIN_WHY="skipped: cannot write the plugin into the broker's root ($root/tmp)"; return
    fi
    PLUGIN_LIB=${libs#"$root"}
    PLUGIN_TMP=$(mktemp -d "$root/tmp/delay-bridge-bench-plugin.XXXXXX")
    chmod 755 "$PLUGIN_TMP"
    # Under the build's lock, shared: a copy never meets test_plugin_compat rebuilding it.
    if [ -e "$PLUGIN_CACHE/.lock" ]; then
        flock -s "$PLUGIN_CACHE/.lock" cp -r "$built" "$PLUGIN_TMP/"
    else
        cp -r "$built" "$PLUGIN_TMP/"
    fi
    export RABBITMQ_PLUGINS_DIR="$PLUGIN_LIB:${PLUGIN_TMP#"$root"}"
    export RABBITMQ_ENABLED_PLUGINS=$PLUGIN_APP
    PLUGIN=1
}

plugin_check_started() {
    # (Without the startup summary in the log, the consumer's exchange.declare is the test.)
    if [ "$PLUGIN" = 1 ] && grep -q "plugins started" <<<"$LAST_START" &&
        ! grep -q "$PLUGIN_APP" <<<"$LAST_START"; then
        PLUGIN=0 PLUGIN_WHY="NOT STARTED: the node started without it (its log: $NODE_LOG)"
        FAILED+=("$PLUGIN_NAME: the node started without it")
        say "$PLUGIN_NAME: $PLUGIN_WHY"
    fi
}
