"""A RabbitMQ node of a test's own with extra plugins enabled.

Shared by test_plugin_compat.py (the delayed-message plugin 4.0.7 on 4.0.5)
and test_shim.py (delay-bridge's shim on the suite's broker line):

    node = PluginNode(ctx, "4.3", [built_dir_or_ez, ...], ["app_name", ...])
    ... node.uri, node.ctl("list_queues"), node.restart() ...
    node.stop()

The node runs through rabbitmq.sh in ctx.tmp/node (for a broker line in a
Debian root, rabbitmq.sh makes that a symlink into the root, so the node
finds its plugins at the same path), on free ports, with
RABBITMQ_PLUGINS_DIR = the broker's own plugins directory plus
ctx.tmp/node/plugins (the copies of the given plugins) and
RABBITMQ_ENABLED_PLUGINS = the given apps.
"""

import os
import shutil
import subprocess
import sys
import time

import harness as h
from harness import check


def run_cmd(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, **kw)


def broker_bin_dir(line):
    """broker.sh bin-dir LINE (Skip when this machine cannot run LINE)."""
    r = run_cmd(["bash", os.path.join(h.HERE, "broker.sh"), "bin-dir", line])
    if r.returncode == 77:
        raise h.Skip("RabbitMQ %s cannot run here: %s" % (line, r.stdout.strip()))
    check(r.returncode == 0, "broker.sh bin-dir %s failed (%d): %s" % (line, r.returncode, r.stdout))
    return r.stdout.strip().splitlines()[-1]


def root_of(bin_dir):
    """The Debian root behind broker.sh's wrappers, "" for the host's broker."""
    if bin_dir.endswith(".bin") and os.path.isdir(bin_dir[:-len(".bin")] + "/usr/lib/rabbitmq"):
        return bin_dir[:-len(".bin")]
    return ""


def server_version(root):
    """The RabbitMQ version installed in root ("" = the host), from its lib directory."""
    lib = root + "/usr/lib/rabbitmq/lib"
    names = [d for d in os.listdir(lib) if d.startswith("rabbitmq_server-")]
    check(names, "no RabbitMQ in %s" % lib)
    return sorted(names)[-1][len("rabbitmq_server-"):]


def in_root_plugins(root):
    return "/usr/lib/rabbitmq/lib/rabbitmq_server-%s/plugins" % server_version(root)


def suite_line():
    return os.environ.get("DB_RABBITMQ") or "3.10"


class PluginNode(object):
    """A node of broker line `line` with `plugins` (built plugin directories
    <app>-<vsn> or .ez files) enabled as `apps`, in ctx.tmp/<name>."""

    def __init__(self, ctx, line, plugins, apps, name="node"):
        self.line = line
        self.bin_dir = broker_bin_dir(line)
        self.root = root_of(self.bin_dir)
        self.dir = os.path.join(ctx.tmp, name)
        plugdir = os.path.join(self.dir, "plugins")
        os.makedirs(plugdir)
        for p in plugins:
            if os.path.isdir(p):
                shutil.copytree(p, os.path.join(plugdir, os.path.basename(p)))
            else:
                shutil.copy(p, plugdir)
        self.port, dist = h.free_port(), h.free_port()
        self.env = dict(os.environ, RABBITMQ_BIN_DIR=self.bin_dir,
                        RABBITMQ_PLUGINS_DIR="%s:%s" % (in_root_plugins(self.root), plugdir))
        if apps:
            self.env["RABBITMQ_ENABLED_PLUGINS"] = ",".join(apps)
        self.started = False
        self._sh("start", self.dir, str(self.port), str(dist))
        self.started = True
        self.uri = "amqp://guest:guest@127.0.0.1:%d/%%2f" % self.port
        self.node = self._node_name()

    def _node_name(self):
        with open(os.path.join(self.dir, "node.env")) as f:
            for line in f:
                if line.startswith("NODE="):
                    return line.strip().split("=", 1)[1]
        h.fail("no NODE= in %s/node.env" % self.dir)

    def ctl_cmd(self):
        """rabbitmqctl of this node (a root's runs under chroot), and its environment."""
        env = dict(self.env, HOME=self.dir, ERL_EPMD_ADDRESS="127.0.0.1")
        return [os.path.join(self.bin_dir, "rabbitmqctl"), "-n", self.node], env

    def in_root(self, path):
        """A host path for a path inside the node's root (where the node reads files)."""
        return os.path.join(self.root, path.lstrip("/")) if self.root else path

    def _sh(self, *args):
        r = run_cmd(["bash", h.RABBITMQ_SH] + list(args), env=self.env, timeout=300)
        sys.stdout.write(r.stdout)
        check(r.returncode == 0, "rabbitmq.sh %s failed (%d)" % (" ".join(args), r.returncode))

    def restart(self):
        self._sh("restart", self.dir)

    def ctl(self, *args, timeout=120):
        """rabbitmqctl ARGS against this node: its stdout (fails on an error)."""
        cmd, env = self.ctl_cmd()
        for _ in range(3):
            r = subprocess.run(cmd + ["-q"] + list(args), env=env, timeout=timeout,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
            if r.returncode != 69:  # the CLI could not reach the node: ask again (harness.rabbitmqctl)
                break
            time.sleep(1.0)
        check(r.returncode == 0, "rabbitmqctl %s failed (%d): %s%s" % (
            " ".join(a[:200] for a in args), r.returncode, r.stdout[-2000:], r.stderr[-2000:]))
        return r.stdout

    def plugins(self, *args):
        """rabbitmq-plugins ARGS against this running node (its enabled-plugins
        file, not the environment the node started with); returns stdout."""
        node = self.node
        env = dict(self.env, HOME=self.dir, ERL_EPMD_ADDRESS="127.0.0.1",
                   RABBITMQ_ENABLED_PLUGINS_FILE=os.path.join(self.dir, "enabled_plugins"))
        env.pop("RABBITMQ_ENABLED_PLUGINS", None)
        r = run_cmd([os.path.join(self.bin_dir, "rabbitmq-plugins"), "-n", node] + list(args), env=env,
                    timeout=180)
        check(r.returncode == 0, "rabbitmq-plugins %s failed (%d): %s" % (" ".join(args), r.returncode,
                                                                          r.stdout.strip()))
        return r.stdout

    def stop(self):
        if not self.started:
            return
        r = run_cmd(["bash", h.RABBITMQ_SH, "stop", self.dir], env=self.env, timeout=120)
        sys.stdout.write(r.stdout)
        inside = os.path.realpath(self.dir)
        if self.root and inside != self.dir and inside.startswith(self.root + "/"):
            shutil.rmtree(inside, ignore_errors=True)
            try:
                os.rmdir(os.path.dirname(inside))  # rabbitmq.sh's parent of it in the root
            except OSError:
                pass
        self.started = False


class OnNode(object):
    """with OnNode(ctx, node): harness calls (connect, Consumer, ctx.admin())
    go to node instead of the suite's broker; consumers and the admin
    channel opened inside are closed on the way out."""

    def __init__(self, ctx, node):
        self.ctx, self.node = ctx, node

    def __enter__(self):
        self.saved = (os.environ.get("DB_TEST_BROKER_URI"), os.environ.get("DB_TEST_BROKER_DIR"))
        os.environ["DB_TEST_BROKER_URI"] = self.node.uri
        os.environ.pop("DB_TEST_BROKER_DIR", None)
        return self.node

    def __exit__(self, *exc):
        ctx = self.ctx
        for cons in ctx.consumers:
            cons.close()
        for p in ctx.publishers:
            p.close()
        ctx.consumers, ctx.publishers, ctx.queues, ctx.exchanges = [], [], set(), set()
        if ctx._admin is not None and ctx._admin[0].is_open:
            try:
                ctx._admin[0].close()
            except Exception:
                pass
        ctx._admin = None
        for k, v in zip(("DB_TEST_BROKER_URI", "DB_TEST_BROKER_DIR"), self.saved):
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        return False
