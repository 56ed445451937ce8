"""pytest plugin: ``--record-releases`` records, in docs/_data/torch_versions.json, which
release of PyTorch each snippet's tests passed on in this session (harness/torch_versions.py).

Only on request (``make releases``, or the flag): a plain test run leaves the work tree as
it was. A test file counts when it ran whole (no -k, no test ids, no marker expression but
the Makefile's, no --lf, --deselect, --only-compared or --claimed-by, no UPDATE_OUTPUTS);
its snippets are recorded "passed" when all its tests that ran passed and none was skipped
other than for want of GPUs or of an older PyTorch, "failed" when one failed, each for the
content it had when the tests were collected (an edit during the session is not what ran).
A file's snippets are recorded as soon as its tests have finished, so an interrupted
session keeps the files it finished. This is the CPU record; the GPU record is
harness/gpu_report.py's.
"""

import os

import pytest

from harness import torch_versions

#: Per test file: what its tests did ("failed", "passed", "skipped"), how many tests it has
#: in this session and how many have finished.
_outcomes: dict[str, set[str]] = {}
_totals: dict[str, int] = {}
_finished: dict[str, int] = {}
_contents: dict[str, str] = {}  # per snippet: its content hash when the tests were collected
_RECORDING: dict = {}  # "on": True in the process that runs a recording session


def pytest_addoption(parser):
    parser.addoption("--record-releases", action="store_true",
                     help="record the release of torch each snippet's tests passed or failed "
                          "on in docs/_data/torch_versions.json (whole test files only)")


def _is_worker(config) -> bool:
    return hasattr(config, "workerinput")  # a pytest-xdist worker of the session


def whole_files(config) -> bool:
    """True when every test of each file that ran was selected."""
    o = config.option
    return not (o.keyword or getattr(o, "lf", False) or getattr(o, "deselect", None)
                or o.markexpr not in ("", "not extras", "extras")
                or config.getoption("only_compared", False)
                or config.getoption("claimed_by", None)
                or any("::" in arg for arg in config.args)
                or os.environ.get("UPDATE_OUTPUTS") == "1")


def pytest_configure(config):
    if not config.getoption("record_releases") or _is_worker(config):
        return
    if not whole_files(config):
        raise pytest.UsageError("--record-releases records whole test files only: drop -k, "
                                "test ids, -m, --lf, --deselect, --only-compared, --claimed-by "
                                "and UPDATE_OUTPUTS")
    _RECORDING["on"] = True


def _count(nodeids) -> None:
    if not _totals:
        for nodeid in nodeids:
            path = nodeid.split("::")[0]
            _totals[path] = _totals.get(path, 0) + 1
        if _RECORDING:
            _contents.update((snippet, torch_versions.content(snippet))
                             for path in _totals for snippet in torch_versions.snippets_of(path))


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's, in the process that runs it
def pytest_xdist_node_collection_finished(node, ids):
    _count(ids)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    if not _is_worker(session.config):
        _count(item.nodeid for item in session.items)


def pytest_runtest_logreport(report):
    if not _RECORDING:
        return
    path = report.nodeid.split("::")[0]
    if report.failed:
        _outcomes.setdefault(path, set()).add("failed")
    elif report.skipped and not {"multigpu", "older_torch"} & set(report.keywords):
        _outcomes.setdefault(path, set()).add("skipped")
    elif report.passed and report.when == "call":
        _outcomes.setdefault(path, set()).add("passed")
    if report.when == "teardown":
        _finished[path] = _finished.get(path, 0) + 1
        if _finished[path] == _totals.get(path):
            record([path])


def record(paths) -> None:
    """Add this release's result for the snippets of these test files (which ran whole)."""
    results = {}
    for path in paths:
        outcomes = _outcomes.get(path, set())
        if "failed" in outcomes:
            outcome = "failed"
        elif outcomes == {"passed"}:
            outcome = "passed"
        else:
            continue  # skipped: not tested here
        for snippet in torch_versions.snippets_of(path):
            results[snippet] = outcome
    if results:
        torch_versions.record(results, torch_versions.torch_release(), contents=_contents)
