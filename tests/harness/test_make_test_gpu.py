"""`make test-gpu PYTHON=...` runs the GPU tests in that Python as it is: no virtual
environment is made or updated, even where the Makefile would make one."""

import os
import subprocess

from harness.launch import ROOT


def dry_run(*args: str) -> list[str]:
    """The commands make would run, with requirements.txt taken as changed (so .venv is
    stale), and none of the variables of a make that runs this test (CI's make test)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    done = subprocess.run(["make", "--no-print-directory", "-n", "-W", "requirements.txt",
                           "test-gpu", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return [line.strip() for line in done.stdout.splitlines()]


def test_with_python_given_nothing_is_installed():
    commands = dry_run("PYTHON=/opt/centre/bin/python3")
    assert commands == ["/opt/centre/bin/python3 -u -m pytest -m multigpu --gpu-report=gpu-report"]


def test_without_it_the_venv_is_brought_up_to_date_first():
    commands = dry_run()
    assert any("pip install" in line for line in commands)
    assert commands[-1] == ".venv/bin/python -u -m pytest -m multigpu --gpu-report=gpu-report"


def test_the_tests_print_as_they_go_and_pass_on_no_unbuffered_output(tmp_path):
    """pytest runs unbuffered (``python -u``: a job's log shows each test as it ends), and
    PYTHONUNBUFFERED stays unset, so the snippets the tests run buffer their output as a
    reader's do: seen by a stand-in Python that prints what it was given."""
    python = tmp_path / "python3"
    python.write_text('#!/bin/sh\necho "PYTHONUNBUFFERED=${PYTHONUNBUFFERED-unset} $*"\n')
    python.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    env.pop("PYTHONUNBUFFERED", None)
    done = subprocess.run(["make", "--no-print-directory", "-s", "test-gpu", f"PYTHON={python}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.stdout == ("PYTHONUNBUFFERED=unset -u -m pytest -m multigpu "
                           "--gpu-report=gpu-report\n")
