"""pytest plugin: which test process runs which tests, slowest first.

With pytest-xdist, whole groups of tests go to one process (a test file, or a group of
SHARED_GROUPS), and the groups start in order of the seconds their files took in the last
run (pytest's cache, or tests/file_seconds.json as make bench measured them), so that no
slow file is left to run alone at the end. It changes the order of the collected tests and
the seconds kept in pytest's cache, nothing else.
"""

import json
import os
from pathlib import Path

import pytest

#: Seconds each test file took in the last run (pytest's cache).
FILE_SECONDS = "snippets/file-seconds"
#: The same, as make bench last measured them, for a clone that has not run the tests yet.
MEASURED_SECONDS = Path(__file__).resolve().parents[2] / "tests" / "file_seconds.json"
_seconds: dict[str, float] = {}

#: Tests that run in one process with others: the browser's (one built site, one
#: browser). A test may also get a process of its own: the DeepSpeed job script, slow and
#: sharing no run with the tests in its file. (Runs that tests of several files check, such
#: as DeepSpeed's or the job that hangs on purpose, are shared between processes by
#: harness.launch.shared.) The first prefix that matches a test id wins.
SHARED_GROUPS = {"tests/memory/test_deepspeed_zero.py::test_the_job_script": "deepspeed job",
                 "tests/browser/": "browser"}


def group(nodeid: str) -> str:
    """The name of the tests that run in one process: a file's, or a shared group's."""
    return next((name for prefix, name in SHARED_GROUPS.items() if nodeid.startswith(prefix)),
                nodeid.split("::")[0])


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's
def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist hands out whole groups, slowest first."""
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return group(nodeid)

    return ByGroup(config, log)


@pytest.hookimpl(trylast=True)  # after the tests are selected
def pytest_collection_modifyitems(config, items):
    seconds = {**json.loads(MEASURED_SECONDS.read_text()), **config.cache.get(FILE_SECONDS, {})}
    files: dict[str, set[str]] = {}  # group: the files its tests are in
    for item in items:
        files.setdefault(group(item.nodeid), set()).add(item.nodeid.split("::")[0])
    cost = {name: sum(seconds.get(path, 0.0) for path in paths) for name, paths in files.items()}
    items.sort(key=lambda item: -cost[group(item.nodeid)])  # stable: groups stay whole


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::")[0]
    _seconds[path] = _seconds.get(path, 0.0) + report.duration


def pytest_sessionfinish(session):
    if _seconds and not hasattr(session.config, "workerinput"):
        kept = session.config.cache.get(FILE_SECONDS, {})
        session.config.cache.set(FILE_SECONDS, {**kept, **{k: round(v, 1)
                                                            for k, v in _seconds.items()}})
