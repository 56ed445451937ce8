"""pytest configuration: markers, the CI skip policy, and process hygiene."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from harness import slurm as local_slurm  # registers the sbatch launcher
from harness import torch_versions
from harness.launch import (DEVICE_ENV, FAKE_GPUS_ENV, SESSION_ID, SESSION_TAG, SHARED_RUNS,
                            kill_tagged)
from harness.outputs import COMPARED

pytest_plugins = ["harness.gpu_report",  # --gpu-report=DIR: the report of a GPU run
                  "harness.releases"]  # --record-releases: docs/_data/torch_versions.json

MARKERS = {
    "multigpu(n)": "needs at least n CUDA GPUs (run with `make test-gpu` in a GPU allocation)",
    "slurm": "submits job scripts to the local Slurm cluster (tools/local-slurm)",
    "mpi": "launches with OpenMPI's mpirun",
    "extras": "needs the heavy extra packages (`make test-extras`)",
    "browser": "drives the built site in headless Chromium",
    "older_torch": "starts a snippet on a PyTorch older than it needs "
                   "(harness.torch_versions.run_on_older)",
}

#: In CI every test must run: a skip is a failure, except for want of GPUs.
REQUIRE_ALL = os.environ.get("REQUIRE_ALL") == "1"


def pytest_addoption(parser):
    parser.addoption("--only-compared", action="store_true",
                     help="run only the tests that compared a captured output with "
                          "floating-point figures in the last full run (e.g. again with "
                          "ATEN_CPU_CAPABILITY=default)")
    parser.addoption("--claimed-by", metavar="RELEASE",
                     help="run only the tests of the snippets whose oldest tested PyTorch "
                          "release is RELEASE (docs/_data/torch_versions.json), and the tests "
                          "marked older_torch")


def _compared_dir(config) -> Path:
    return Path(config.cache.mkdir("compared-outputs"))


#: Where the session's Slurm cluster lives: made by the process that runs the session
#: (never inherited from an outer test session, whose cluster is not this one's).
SLURM_STATE = "SNIPPET_HARNESS_SLURM_STATE"


def _is_worker(config) -> bool:
    return hasattr(config, "workerinput")  # a pytest-xdist worker of the session


def pytest_configure(config):
    os.environ[SESSION_TAG] = SESSION_ID
    if not _is_worker(config):
        os.environ[SLURM_STATE] = tempfile.mkdtemp(prefix="local-slurm-")
        os.environ[SHARED_RUNS] = tempfile.mkdtemp(prefix="shared-runs-")
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")


def gpu_count() -> int:
    """CUDA GPUs visible, asked of a subprocess so that pytest never initialises CUDA."""
    if os.environ.get(FAKE_GPUS_ENV):
        return int(os.environ[FAKE_GPUS_ENV])
    if shutil.which("nvidia-smi") is None:
        return 0
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                           capture_output=True, text=True, timeout=120)
    return int(probe.stdout.strip() or 0)


def _only_compared(config, items):
    """Keep only the tests that compared an output with floating-point figures in the last
    run that recorded them."""
    compared = {line for f in _compared_dir(config).glob("*.txt")
                for line in f.read_text().splitlines() if line}
    if not compared:
        raise pytest.UsageError("--only-compared: no run has recorded which tests compare "
                                "outputs yet: run `make test` first")
    keep = [item for item in items if item.nodeid in compared]
    config.hook.pytest_deselected(items=[item for item in items if item.nodeid not in compared])
    items[:] = keep


#: Seconds each test file took in the last run (pytest's cache): with several test
#: processes, the slowest files start first, so that none is left to run alone at the end.
FILE_SECONDS = "snippets/file-seconds"
#: The same, as make bench last measured them, for a clone that has not run the tests yet.
MEASURED_SECONDS = Path(__file__).parent / "tests" / "file_seconds.json"
_seconds: dict[str, float] = {}


#: Tests that run in one process with others: the browser's (one built site, one
#: browser). A test may also get a process of its own: the DeepSpeed job script, slow and
#: sharing no run with the tests in its file. (Runs that tests of several files check, such
#: as DeepSpeed's or the job that hangs on purpose, are shared between processes by
#: harness.launch.shared.) The first prefix that matches a test id wins.
SHARED_GROUPS = {"tests/memory/test_deepspeed_zero.py::test_the_job_script": "deepspeed job",
                 "tests/browser/": "browser"}


def _group(nodeid: str) -> str:
    """The name of the tests that run in one process: a file's, or a shared group's."""
    return next((group for prefix, group in SHARED_GROUPS.items() if nodeid.startswith(prefix)),
                nodeid.split("::")[0])


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's
def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist hands out whole groups (see _group), slowest first."""
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return _group(nodeid)

    return ByGroup(config, log)


def _claimed_by(config, items):
    """Keep the tests of the snippets that claim the release, and the older_torch tests."""
    release = config.getoption("claimed_by")
    claims = torch_versions.claims()
    if release not in claims.values():
        raise pytest.UsageError(f"--claimed-by={release}: no snippet claims it "
                                f"(claimed: {sorted(set(claims.values()), key=torch_versions.key)})")
    def keep(item):
        snippets = torch_versions.snippets_of(item.nodeid.split("::")[0])
        return (item.get_closest_marker("older_torch") is not None
                or any(claims.get(s) == release for s in snippets))
    config.hook.pytest_deselected(items=[item for item in items if not keep(item)])
    items[:] = [item for item in items if keep(item)]


def pytest_collection_modifyitems(config, items):
    if config.getoption("only_compared"):
        _only_compared(config, items)
    if config.getoption("claimed_by"):
        _claimed_by(config, items)
    seconds = {**json.loads(MEASURED_SECONDS.read_text()), **config.cache.get(FILE_SECONDS, {})}
    files: dict[str, set[str]] = {}  # group: the files its tests are in
    for item in items:
        files.setdefault(_group(item.nodeid), set()).add(item.nodeid.split("::")[0])
    cost = {group: sum(seconds.get(path, 0.0) for path in paths) for group, paths in files.items()}
    items.sort(key=lambda item: -cost[_group(item.nodeid)])  # stable: groups stay whole
    gpu_items = [item for item in items if item.get_closest_marker("multigpu")]
    if not gpu_items:
        return
    have = gpu_count()
    for item in gpu_items:
        need = item.get_closest_marker("multigpu").args[0]
        if have < need:
            gpus = "1 CUDA GPU" if need == 1 else f"{need} CUDA GPUs"
            item.add_marker(pytest.mark.skip(reason=f"needs {gpus}, this machine has {have}"))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Tests not marked multigpu run their snippets on the CPU, on a GPU node too (before
    any fixture of the test starts a run)."""
    if item.get_closest_marker("multigpu"):
        os.environ.pop(DEVICE_ENV, None)
    else:
        os.environ[DEVICE_ENV] = "cpu"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if REQUIRE_ALL and report.skipped and not item.get_closest_marker("multigpu"):
        from harness.gpu_report import skip_reason  # the plugin, loaded by then

        reason = skip_reason(report)
        report.outcome = "failed"
        report.longrepr = f"REQUIRE_ALL=1 forbids skipping this test: {reason}"


@pytest.fixture(scope="session")
def slurm_cluster():
    """The throwaway two-node cluster of tools/local-slurm, one for the whole session.

    The first test process that needs it starts it, and every parallel test process
    shares it; jobs find it through SLURM_CONF. The process that runs the session stops
    it at the end, and any of its daemons or job processes still alive fails the session.
    """
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


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::")[0]
    _seconds[path] = _seconds.get(path, 0.0) + report.duration


def _stop_slurm(session) -> None:
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


def pytest_sessionfinish(session, exitstatus):
    if COMPARED and not session.config.getoption("only_compared"):
        name = os.environ.get("PYTEST_XDIST_WORKER", "main")
        (_compared_dir(session.config) / f"{name}.txt").write_text("\n".join(sorted(COMPARED)))
    leftovers = kill_tagged(SESSION_TAG, SESSION_ID)
    if leftovers:
        session.config.get_terminal_writer().line(
            f"ERROR: processes left behind by the tests were killed: {leftovers}", red=True)
        session.exitstatus = 1
    if not _is_worker(session.config):
        _stop_slurm(session)
        shutil.rmtree(os.environ[SHARED_RUNS], ignore_errors=True)
        if _seconds:
            session.config.cache.set(FILE_SECONDS, {**session.config.cache.get(FILE_SECONDS, {}),
                                                    **{k: round(v, 1) for k, v in _seconds.items()}})
