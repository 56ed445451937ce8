"""pytest plugin: the local Slurm cluster for the tests marked ``slurm``.

The process that runs the session makes a folder for the cluster's state
(SNIPPET_HARNESS_SLURM_STATE, inherited by the test processes); the first test that
needs the cluster starts it (tools/local-slurm), every test process shares it, jobs find
it through SLURM_CONF, and the session's process stops it at the end: any daemon or job
process still alive then fails the session.
"""

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from harness import slurm as local_slurm

#: Where the session's Slurm cluster lives: made by the process that runs the session
#: (never inherited from an outer test session, whose cluster is not this one's).
SLURM_STATE = "SNIPPET_HARNESS_SLURM_STATE"


def pytest_configure(config):
    if not hasattr(config, "workerinput"):
        os.environ[SLURM_STATE] = tempfile.mkdtemp(prefix="local-slurm-")


@pytest.fixture(scope="session")
def slurm_cluster():
    """The throwaway two-node cluster, one for the whole session."""
    reason = local_slurm.unavailable_reason()
    if reason:
        pytest.skip(reason)
    conf = local_slurm.shared_cluster(Path(os.environ[SLURM_STATE]))
    os.environ["SLURM_CONF"] = str(conf)
    return conf


@pytest.fixture(autouse=True)
def _slurm_for_marked_tests(request):
    """Tests marked ``slurm`` get the cluster (or are skipped with the reason there is none)."""
    if request.node.get_closest_marker("slurm"):
        request.getfixturevalue("slurm_cluster")


def pytest_sessionfinish(session):
    if hasattr(session.config, "workerinput"):
        return
    state = Path(os.environ[SLURM_STATE])
    if not (state / "started").exists():
        shutil.rmtree(state, ignore_errors=True)
        return
    local_slurm.stop_cluster(state)
    leftovers = local_slurm.cluster_processes(state / "slurm.conf")
    if leftovers:
        session.config.get_terminal_writer().line(
            "ERROR: the local Slurm cluster left processes behind:\n" + "\n".join(leftovers),
            red=True)
        session.exitstatus = 1
