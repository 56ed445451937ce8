"""pytest configuration: the markers, the plugins (one job each, harness/plugins/ and
harness/), and process hygiene: every process a test started is gone when the session ends."""

import os
import shutil
import tempfile

from harness.launch import SESSION_ID, SESSION_TAG, SHARED_RUNS, kill_tagged

pytest_plugins = [
    # the core (CONTRIBUTING.md, "How the harness is built")
    "harness.plugins.strictness",  # REQUIRE_ALL, --only-compared
    "harness.plugins.scheduling",  # test processes get whole files, slowest first
    "harness.plugins.devices",     # multigpu tests on GPUs (or skipped), the others on the CPU
    "harness.plugins.budget",      # --time-budget=SECONDS: skip what would start after it
    # the optional parts, which the core never imports
    "harness.plugins.cluster",     # the local Slurm cluster of the tests marked slurm
    "harness.gpu_report",          # --gpu-report=DIR: the report of a GPU run
    "harness.plugins.claimed",     # --claimed-by=RELEASE: the tests of one release's snippets
    "harness.releases",            # --record-releases: docs/_data/torch_versions.json
]

MARKERS = {
    "multigpu(n)": "needs at least n CUDA GPUs (run with `make test-gpu` in a GPU allocation)",
    "one_gpu": "a test's case at world size 1 on one GPU (tests/devices.py; tools/gpu-check)",
    "slurm": "submits job scripts to the local Slurm cluster (tools/local-slurm)",
    "mpi": "launches with OpenMPI's mpirun",
    "extras": "needs the heavy extra packages (`make test-extras`)",
    "browser": "drives the built site in headless Chromium",
    "older_torch": "starts a snippet on a PyTorch older than it needs "
                   "(harness.torch_versions.run_on_older)",
}


def pytest_configure(config):
    os.environ[SESSION_TAG] = SESSION_ID  # inherited by every process a test starts
    if not hasattr(config, "workerinput"):  # the process that runs the session
        os.environ[SHARED_RUNS] = tempfile.mkdtemp(prefix="shared-runs-")
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")


def pytest_sessionfinish(session, exitstatus):
    """Rule: A test leaves no process behind. Fix: start processes through
    `harness.launch.run`, which kills all it started, or end in the test the ones the
    failure lists."""
    leftovers = kill_tagged(SESSION_TAG, SESSION_ID)
    if leftovers:
        session.config.get_terminal_writer().line(
            f"ERROR: processes left behind by the tests were killed: {leftovers}", red=True)
        session.exitstatus = 1
    if not hasattr(session.config, "workerinput"):
        shutil.rmtree(os.environ[SHARED_RUNS], ignore_errors=True)
