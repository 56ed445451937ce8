"""pytest plugin: which tests run, and what counts as a failure.

- ``REQUIRE_ALL=1`` (CI): a skip other than for want of GPUs is a failure.
- ``--only-compared``: only the tests that compared a captured output with floating-point
  figures in the last full run (kept in pytest's cache), to rerun them under another
  kernel choice (``ATEN_CPU_CAPABILITY=default``).
"""

import os
from pathlib import Path

import pytest

from harness.outputs import COMPARED

#: In CI every test must run: a skip is a failure, except for want of GPUs.
REQUIRE_ALL = os.environ.get("REQUIRE_ALL") == "1"


def pytest_addoption(parser):
    parser.addoption("--only-compared", action="store_true",
                     help="run only the tests that compared a captured output with "
                          "floating-point figures in the last full run (e.g. again with "
                          "ATEN_CPU_CAPABILITY=default)")


def _compared_dir(config) -> Path:
    return Path(config.cache.mkdir("compared-outputs"))


def keep_only(config, items, keep) -> None:
    """Deselect, as pytest reports it, every collected test for which ``keep`` is false."""
    config.hook.pytest_deselected(items=[item for item in items if not keep(item)])
    items[:] = [item for item in items if keep(item)]


def skip_reason(report) -> str:
    """Why pytest skipped a test or a module, from its report."""
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    return reason.removeprefix("Skipped: ")


@pytest.hookimpl(tryfirst=True)  # select before the others order or mark
def pytest_collection_modifyitems(config, items):
    if not config.getoption("only_compared"):
        return
    compared = {line for f in _compared_dir(config).glob("*.txt")
                for line in f.read_text().splitlines() if line}
    if not compared:
        raise pytest.UsageError("--only-compared: no run has recorded which tests compare "
                                "outputs yet: run `make test` first")
    keep_only(config, items, lambda item: item.nodeid in compared)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if REQUIRE_ALL and report.skipped and not item.get_closest_marker("multigpu"):
        report.outcome = "failed"
        report.longrepr = f"REQUIRE_ALL=1 forbids skipping this test: {skip_reason(report)}"


def pytest_sessionfinish(session):
    if COMPARED and not session.config.getoption("only_compared"):
        name = os.environ.get("PYTEST_XDIST_WORKER", "main")
        (_compared_dir(session.config) / f"{name}.txt").write_text("\n".join(sorted(COMPARED)))
