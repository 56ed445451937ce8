"""Fixtures shared by the chapter's tests."""

import json
from pathlib import Path

import pytest

from harness.launch import run, shared


@shared
def _exercise_checks():
    result = run(Path(__file__).with_name("exercise_checks.py"), launcher="env", nproc=1)
    return json.loads(result.stdout)


@pytest.fixture(scope="session")
def exercise_checks():
    """Results of exercise_checks.py, run once in the session as one rank in a process of
    its own."""
    return _exercise_checks()
