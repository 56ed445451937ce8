"""pytest configuration: markers, the CI skip policy, and process hygiene."""

import os
import shutil
import subprocess
import sys

import pytest

from harness import slurm as local_slurm  # registers the sbatch launcher
from harness.launch import SESSION_ID, SESSION_TAG, kill_tagged

MARKERS = {
    "multigpu(n)": "needs at least n CUDA GPUs (run with `make test-gpu` in a GPU allocation)",
    "slurm": "submits job scripts to the local Slurm cluster (tools/local-slurm)",
    "mpi": "launches with OpenMPI's mpirun",
    "extras": "needs the heavy extra packages (`make test-extras`)",
    "browser": "drives the built site in headless Chromium",
}

#: In CI every test must run: a skip is a failure, except for want of GPUs.
REQUIRE_ALL = os.environ.get("REQUIRE_ALL") == "1"


def pytest_configure(config):
    os.environ[SESSION_TAG] = SESSION_ID
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")


def gpu_count() -> int:
    """CUDA GPUs visible, asked of a subprocess so that pytest never initialises CUDA."""
    if shutil.which("nvidia-smi") is None:
        return 0
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                           capture_output=True, text=True, timeout=120)
    return int(probe.stdout.strip() or 0)


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if item.get_closest_marker("multigpu")]
    if not gpu_items:
        return
    have = gpu_count()
    for item in gpu_items:
        need = item.get_closest_marker("multigpu").args[0]
        if have < need:
            item.add_marker(pytest.mark.skip(reason=f"needs {need} CUDA GPUs, this machine has {have}"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if REQUIRE_ALL and report.skipped and not item.get_closest_marker("multigpu"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"REQUIRE_ALL=1 forbids skipping this test: {reason}"


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """The throwaway two-node cluster of tools/local-slurm, started once per session.

    Jobs find it through SLURM_CONF, set for the whole session. At the end the
    cluster is stopped, and any of its daemons or job processes still alive
    fails the session.
    """
    reason = local_slurm.unavailable_reason()
    if reason:
        pytest.skip(reason)
    state = tmp_path_factory.mktemp("slurm")
    conf = local_slurm.start_cluster(state)
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(conf)
    try:
        yield conf
    finally:
        local_slurm.stop_cluster(state)
        if previous is None:
            del os.environ["SLURM_CONF"]
        else:
            os.environ["SLURM_CONF"] = previous
    leftovers = local_slurm.cluster_processes(conf)
    assert not leftovers, "the local Slurm cluster left processes behind:\n" + "\n".join(leftovers)


@pytest.fixture(autouse=True)
def _slurm_for_marked_tests(request):
    """Tests marked ``slurm`` get the cluster (or are skipped with the reason there is none)."""
    if request.node.get_closest_marker("slurm"):
        request.getfixturevalue("slurm_cluster")


def pytest_sessionfinish(session, exitstatus):
    leftovers = kill_tagged(SESSION_TAG, SESSION_ID)
    if leftovers:
        session.config.get_terminal_writer().line(
            f"ERROR: processes left behind by the tests were killed: {leftovers}", red=True)
        session.exitstatus = 1
