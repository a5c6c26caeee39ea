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
import subprocess
import sys
import tempfile
import time

import harness as h
from harness import check

PLUGIN_VSN = "4.0.7"
RABBITMQ_VSN = "4.0.5"
PLUGIN_APP = "rabbitmq_delayed_message_exchange"
PLUGIN_CACHE = os.environ.get("DB_PLUGIN_CACHE", "/var/cache/delay-bridge/plugin-%s" % PLUGIN_VSN)
IN_ROOT_PLUGINS = "/usr/lib/rabbitmq/lib/rabbitmq_server-%s/plugins" % RABBITMQ_VSN


def _run(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, **kw)


def plugin_dir():
    """The built plugin (PLUGIN_CACHE/<app>-<vsn>), building it if need be."""
    srcs = sorted(glob.glob(os.path.join(PLUGIN_CACHE, "src", "*.erl")))
    if len(srcs) != 5:
        raise h.Skip("the delayed-message plugin %s's source is not on this machine (%d of its 5 "
                     "src/*.erl in %s): copy them from tag v%s of "
                     "github.com/rabbitmq/rabbitmq-delayed-message-exchange "
                     "(tests/integration/plugin_node.py's docstring)"
                     % (PLUGIN_VSN, len(srcs), os.path.join(PLUGIN_CACHE, "src"), PLUGIN_VSN))
    bin_dir = broker_bin_dir()
    root = bin_dir[:-len(".bin")]
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
            r = _run(["chroot", root, "/bin/sh", "-c", sh], timeout=300)
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


def broker_bin_dir():
    r = _run(["bash", os.path.join(h.HERE, "broker.sh"), "bin-dir", "4.0"])
    if r.returncode == 77:
        raise h.Skip("RabbitMQ 4.0 cannot run here, and the plugin needs it: %s" % r.stdout.strip())
    check(r.returncode == 0, "broker.sh bin-dir 4.0 failed (%d): %s" % (r.returncode, r.stdout))
    return r.stdout.strip().splitlines()[-1]


class PluginNode(object):
    """A RabbitMQ 4.0.5 node in ctx.tmp/node (a symlink into the trixie
    root, rabbitmq.sh), on free ports; with the plugin enabled unless
    plugin=False (then it needs neither the plugin's source nor its build)."""

    def __init__(self, ctx, plugin=True):
        self.built = plugin_dir() if plugin else None
        self.bin_dir = broker_bin_dir()
        self.root = self.bin_dir[:-len(".bin")]
        self.dir = os.path.join(ctx.tmp, "node")
        plugins = os.path.join(self.dir, "plugins")
        os.makedirs(plugins)
        self.env = dict(os.environ, RABBITMQ_BIN_DIR=self.bin_dir)
        if plugin:
            shutil.copytree(self.built, os.path.join(plugins, os.path.basename(self.built)))
            self.env.update(RABBITMQ_PLUGINS_DIR="%s:%s" % (IN_ROOT_PLUGINS, plugins),
                            RABBITMQ_ENABLED_PLUGINS=PLUGIN_APP)
        self.port, self.dist = h.free_port(), h.free_port()
        self.node = "dbtest%d@localhost" % self.port
        self.started = False
        r = _run(["bash", h.RABBITMQ_SH, "start", self.dir, str(self.port), str(self.dist)], env=self.env,
                 timeout=300)
        self.started = True
        sys.stdout.write(r.stdout)
        check(r.returncode == 0, "could not start the 4.0.5 node (rabbitmq.sh start %d)" % r.returncode)
        self.uri = "amqp://guest:guest@127.0.0.1:%d/%%2f" % self.port

    def ctl_cmd(self):
        """rabbitmqctl of this node (the root's, under chroot), and its environment."""
        env = dict(self.env, HOME=self.dir, ERL_EPMD_ADDRESS="127.0.0.1")
        return [os.path.join(self.bin_dir, "rabbitmqctl"), "-n", self.node], env

    def ctl(self, *args, timeout=120):
        """rabbitmqctl ARGS against this node: its stdout (fails on an error)."""
        cmd, env = self.ctl_cmd()
        for attempt in range(3):
            r = subprocess.run(cmd + ["-q"] + list(args), env=env, timeout=timeout,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
            if r.returncode != 69:  # the CLI could not reach the node: ask again (harness.rabbitmqctl)
                break
            time.sleep(1.0)
        check(r.returncode == 0, "rabbitmqctl %s failed (%d): %s%s" % (
            " ".join(a[:200] for a in args), r.returncode, r.stdout[-2000:], r.stderr[-2000:]))
        return r.stdout

    def in_root(self, path):
        """A host path for a path inside the root (where the node reads files)."""
        return os.path.join(self.root, path.lstrip("/"))

    def stop(self):
        if not self.started:
            return
        r = _run(["bash", h.RABBITMQ_SH, "stop", self.dir], env=self.env, timeout=120)
        sys.stdout.write(r.stdout)
        inside = os.path.realpath(self.dir)
        if inside != self.dir and inside.startswith(self.root + "/"):
            shutil.rmtree(inside, ignore_errors=True)
            try:
                os.rmdir(os.path.dirname(inside))  # rabbitmq.sh's parent of it in the root
            except OSError:
                pass
