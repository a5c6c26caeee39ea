"""A RabbitMQ 4.0.5 node of a test's own, with or without the
delayed-message plugin 4.0.7: shared by integration.plugin_compat.reference
(test_plugin_compat.py) and integration.migrate_plugin.* (test_migrate_plugin.py).

The plugin's source is not in this repository. plugin_dir() builds it on
first use (erlc of RabbitMQ 4.0.5's Erlang, inside broker.sh's Debian trixie
root) from its five src/*.erl files of tag v4.0.7 of the archived
https://github.com/rabbitmq/rabbitmq-delayed-message-exchange, which it
expects in $DB_PLUGIN_CACHE/src (default /var/cache/delay-bridge/plugin-4.0.7):

    git clone https://github.com/rabbitmq/rabbitmq-delayed-message-exchange R
    mkdir -p /var/cache/delay-bridge/plugin-4.0.7/src
    for f in $(git -C R ls-tree --name-only v4.0.7 src/); do
        git -C R show v4.0.7:$f > /var/cache/delay-bridge/plugin-4.0.7/$f; done

It never fetches anything itself: without those files, or without the 4.0
root (broker.sh; root, debootstrap), it raises h.Skip (77) saying which. The
build (ebin/ and a hand-written .app; the node loads it through
RABBITMQ_PLUGINS_DIR from a copy in its own directory, which is inside the
root) is kept beside the source and redone when a source file is newer. The
plugin runs on 4.0 only (it needs Mnesia, which 4.3 no longer has), so a
PluginNode is always 4.0.5, whatever DB_RABBITMQ says.
"""

import fcntl
import glob
import os
import shutil
import tempfile

import harness as h
import harness_plugin as hp
from harness import check

PLUGIN_VSN = "4.0.7"
RABBITMQ_VSN = "4.0.5"
PLUGIN_APP = "rabbitmq_delayed_message_exchange"
PLUGIN_CACHE = os.environ.get("DB_PLUGIN_CACHE", "/var/cache/delay-bridge/plugin-%s" % PLUGIN_VSN)
IN_ROOT_PLUGINS = "/usr/lib/rabbitmq/lib/rabbitmq_server-%s/plugins" % RABBITMQ_VSN


def plugin_dir():
    """The built plugin (PLUGIN_CACHE/<app>-<vsn>), building it if need be."""
    srcs = sorted(glob.glob(os.path.join(PLUGIN_CACHE, "src", "*.erl")))
    if len(srcs) != 5:
        raise h.Skip("the delayed-message plugin %s's source is not on this machine (%d of its 5 "
                     "src/*.erl in %s): copy them from tag v%s of "
                     "github.com/rabbitmq/rabbitmq-delayed-message-exchange "
                     "(tests/integration/plugin_node.py's docstring)"
                     % (PLUGIN_VSN, len(srcs), os.path.join(PLUGIN_CACHE, "src"), PLUGIN_VSN))
    root = hp.root_of(hp.broker_bin_dir("4.0"))
    out = os.path.join(PLUGIN_CACHE, "%s-%s" % (PLUGIN_APP, PLUGIN_VSN))
    ebin = os.path.join(out, "ebin")
    with open(os.path.join(PLUGIN_CACHE, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        app = os.path.join(ebin, PLUGIN_APP + ".app")
        newest = max(os.path.getmtime(s) for s in srcs)
        if os.path.exists(app) and os.path.getmtime(app) >= newest:
            return out
        h.log("building the delayed-message plugin %s from %s inside %s" % (PLUGIN_VSN, PLUGIN_CACHE, root))
        build = tempfile.mkdtemp(prefix="dbt-plugin-build.", dir=os.path.join(root, "tmp"))
        try:
            os.makedirs(os.path.join(build, "src"))
            os.makedirs(os.path.join(build, "ebin"))
            for s in srcs:
                shutil.copy(s, os.path.join(build, "src"))
            inside = build[len(root):]
            sh = ("cd %s && ERL_LIBS=%s HOME=/tmp erlc -o ebin -I %s/rabbit_common-%s/include src/*.erl"
                  % (inside, IN_ROOT_PLUGINS, IN_ROOT_PLUGINS, RABBITMQ_VSN))
            r = hp.run_cmd(["chroot", root, "/bin/sh", "-c", sh], timeout=300)
            check(r.returncode == 0, "erlc of the plugin failed (%d):\n%s" % (r.returncode, r.stdout))
            mods = sorted(os.path.splitext(os.path.basename(s))[0] for s in srcs)
            with open(os.path.join(build, "ebin", PLUGIN_APP + ".app"), "w") as f:
                f.write('{application, %s, [\n  {description, "RabbitMQ Delayed Message Exchange"},\n'
                        '  {vsn, "%s"},\n  {modules, [%s]},\n  {registered, []},\n'
                        '  {applications, [kernel, stdlib, rabbit_common, rabbit]},\n'
                        '  {mod, {rabbit_delayed_message_app, []}},\n  {env, []},\n'
                        '  {broker_version_requirements, ["4.0.0"]}\n]}.\n'
                        % (PLUGIN_APP, PLUGIN_VSN, ", ".join(mods)))
            shutil.rmtree(out, ignore_errors=True)
            os.makedirs(out)
            shutil.copytree(os.path.join(build, "ebin"), ebin)
        finally:
            shutil.rmtree(build, ignore_errors=True)
    return out


class PluginNode(hp.PluginNode):
    """A RabbitMQ 4.0.5 node (harness_plugin.PluginNode) with the plugin
    enabled unless plugin=False (then it needs neither the plugin's source
    nor its build)."""

    def __init__(self, ctx, plugin=True):
        self.built = plugin_dir() if plugin else None
        super().__init__(ctx, "4.0", [self.built] if plugin else [], [PLUGIN_APP] if plugin else [])
