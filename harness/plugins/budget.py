"""pytest plugin: a time budget for a whole run (``--time-budget=SECONDS``, tools/gpu-check).

A short GPU allocation must end with a report, not be killed half-way: once the budget is
spent, every test not yet started is skipped with that reason, and the report says which.
The process that runs the session fixes the deadline before pytest-xdist starts its
workers, which inherit it through the environment.
"""

import os
import time

import pytest

DEADLINE_ENV = "SNIPPET_HARNESS_DEADLINE"


def pytest_addoption(parser):
    parser.addoption("--time-budget", type=float, metavar="SECONDS",
                     help="skip the tests that would start after SECONDS (tools/gpu-check)")


def pytest_configure(config):
    if hasattr(config, "workerinput"):
        return
    budget = config.getoption("time_budget", None)
    if budget is None:
        os.environ.pop(DEADLINE_ENV, None)  # not a deadline of an enclosing run
    else:
        os.environ[DEADLINE_ENV] = str(time.time() + budget)


def pytest_runtest_setup(item):
    deadline = os.environ.get(DEADLINE_ENV)
    if deadline and time.time() > float(deadline):
        pytest.skip("the run's time budget was spent before this test started")
