"""own_broker -- run one harness test (tests/integration/harness.py) against
a RabbitMQ node of its own, for the regression tests of the bugs
chaos_soak.py found.

The node is tests/integration/rabbitmq.sh's, started afresh (mnesia wiped)
in $TMPDIR/db-chaos-broker-PORT on DB_CHAOS_PORT (default 5751: node 1 of
chaos_soak's cluster, which never runs at the same time: ctest's
RESOURCE_LOCK chaos_cluster) with distribution port PORT + 20000, and
stopped when the test ends, whatever its result. harness.run() ends the
process with os._exit(), so the test runs in a forked child and the parent
stops the node and passes the exit code on (0 pass, 1 fail, 77 skip).
"""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import harness as h  # noqa: E402

RABBITMQ_SH = os.path.join(HERE, "..", "integration", "rabbitmq.sh")


def run(test, budget_s):
    port = int(os.environ.get("DB_CHAOS_PORT", "5751"))
    bdir = os.path.join(os.environ.get("TMPDIR", "/tmp"), "db-chaos-broker-%d" % port)
    os.environ["DB_TEST_BROKER_URI"] = "amqp://guest:guest@127.0.0.1:%d/%%2f" % port
    os.environ["DB_TEST_BROKER_DIR"] = bdir
    subprocess.run(["bash", RABBITMQ_SH, "stop", bdir], check=False)
    subprocess.run(["rm", "-rf", os.path.join(bdir, "mnesia")], check=False)
    subprocess.run(["bash", RABBITMQ_SH, "start", bdir, str(port), str(port + 20000)], check=True)
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        h.run(test, budget_s=budget_s)  # exits
    _, status = os.waitpid(pid, 0)
    subprocess.run(["bash", RABBITMQ_SH, "stop", bdir], check=False)
    sys.exit(os.waitstatus_to_exitcode(status))
