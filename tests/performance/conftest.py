"""Fixtures shared by the chapter's tests."""

import json
from pathlib import Path

import pytest

from harness.launch import run


@pytest.fixture(scope="session")
def exercise_checks():
    """Results of exercise_checks.py, run once as one rank in a process of its own."""
    result = run(Path(__file__).with_name("exercise_checks.py"), launcher="env", nproc=1)
    return json.loads(result.stdout)
