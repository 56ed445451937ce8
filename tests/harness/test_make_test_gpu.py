"""`make test-gpu PYTHON=...` runs the GPU tests in that Python as it is: no virtual
environment is made or updated, even where the Makefile would make one."""

import subprocess

from harness.launch import ROOT


def dry_run(*args: str) -> str:
    """What make would run, with requirements.txt taken as changed (so .venv is stale)."""
    done = subprocess.run(["make", "-n", "-W", "requirements.txt", "test-gpu", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_with_python_given_nothing_is_installed():
    commands = dry_run("PYTHON=/opt/centre/bin/python3")
    assert "pip install" not in commands and "venv" not in commands
    assert "PYTHONUNBUFFERED=1 /opt/centre/bin/python3 -m pytest -m multigpu" in commands


def test_without_it_the_venv_is_brought_up_to_date_first():
    commands = dry_run()
    assert "pip install" in commands
    assert commands.rstrip().endswith("--gpu-report=gpu-report")
    assert ".venv/bin/pytest -m multigpu" in commands
