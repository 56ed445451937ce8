"""pytest plugin: which tests run, and what counts as a failure.

- ``REQUIRE_ALL=1`` (CI): a skip other than for want of GPUs is a failure.
- ``--only-compared``: only the tests that compared a captured output with floating-point
  figures in the last full run (kept in pytest's cache), to rerun them under another
  kernel choice (``ATEN_CPU_CAPABILITY=default``).
- ``--claimed-by=RELEASE``: only the tests of the snippets whose oldest tested release of
  PyTorch is RELEASE (docs/_data/torch_versions.json), and the tests marked older_torch.
"""

import os
from pathlib import Path

import pytest

from harness import torch_versions
from harness.outputs import COMPARED

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


def _keep(config, items, keep) -> None:
    config.hook.pytest_deselected(items=[item for item in items if not keep(item)])
    items[:] = [item for item in items if keep(item)]


def _only_compared(config, items):
    compared = {line for f in _compared_dir(config).glob("*.txt")
                for line in f.read_text().splitlines() if line}
    if not compared:
        raise pytest.UsageError("--only-compared: no run has recorded which tests compare "
                                "outputs yet: run `make test` first")
    _keep(config, items, lambda item: item.nodeid in compared)


def _claimed_by(config, items):
    release = config.getoption("claimed_by")
    claims = torch_versions.claims()
    if release not in claims.values():
        raise pytest.UsageError(f"--claimed-by={release}: no snippet claims it "
                                f"(claimed: {sorted(set(claims.values()), key=torch_versions.key)})")

    def keep(item):
        snippets = torch_versions.snippets_of(item.nodeid.split("::")[0])
        return (item.get_closest_marker("older_torch") is not None
                or any(claims.get(s) == release for s in snippets))
    _keep(config, items, keep)


@pytest.hookimpl(tryfirst=True)  # select before the others order or mark
def pytest_collection_modifyitems(config, items):
    if config.getoption("only_compared"):
        _only_compared(config, items)
    if config.getoption("claimed_by"):
        _claimed_by(config, items)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if REQUIRE_ALL and report.skipped and not item.get_closest_marker("multigpu"):
        from harness.gpu_report import skip_reason  # a plugin, loaded by then

        report.outcome = "failed"
        report.longrepr = f"REQUIRE_ALL=1 forbids skipping this test: {skip_reason(report)}"


def pytest_sessionfinish(session):
    if COMPARED and not session.config.getoption("only_compared"):
        name = os.environ.get("PYTEST_XDIST_WORKER", "main")
        (_compared_dir(session.config) / f"{name}.txt").write_text("\n".join(sorted(COMPARED)))
