"""Checks that a snippet reads its rank, world size and local rank from what started it
(harness/slurm_env.py: what a process finds in its environment inside a Slurm job, by
what started it, and the ``started-by`` launcher), or stops with one line that names
the fix where nothing did.
"""

from __future__ import annotations

import os

from harness.launch import Result, snippet_code
from harness.slurm_env import STARTED_BY, set_by_a_launcher


def read_by(script: str, started_by: str, monkeypatch, function: str = "launcher_env"):
    """What ``function`` of the snippet returns (as a tuple) in a process started by
    ``started_by``, or the line it stops with."""
    code = snippet_code(script)
    assert function in code, (f"{script} defines no {function}(), which "
                              "tests/slurm/started_by.py calls: rename it back, or rename "
                              "it there and on the pages that name it")
    for name in [name for name in os.environ if set_by_a_launcher(name)]:
        monkeypatch.delenv(name)  # the tests may run inside a job of their own
    for name, value in STARTED_BY[started_by][0].items():
        monkeypatch.setenv(name, value)
    try:
        return tuple(code[function]())
    except SystemExit as stop:
        return stop.code


def assert_reads_its_launcher(script: str, started_by: str, monkeypatch) -> None:
    """The snippet's launcher_env reads the rank, world size and local rank of what started
    it, or, in the job script, stops with one line that names the fix."""
    read, expected = read_by(script, started_by, monkeypatch), STARTED_BY[started_by][1]
    if expected is None:
        name = script.split("/")[-1]
        assert isinstance(read, str) and read.startswith(f"{name}: "), read
        assert f"srun python {name}" in read, read
    else:
        assert read == expected


def assert_stopped_with_one_line(result: Result, within: float = 60) -> str:
    """The run stopped by itself, with exit code 1, within ``within`` seconds, printing
    one line (on stderr, no traceback) that names the snippet and tells how to start it
    in a job script; return the line."""
    name = result.script.name
    assert not result.timed_out and result.returncode == 1, result.report()
    assert result.seconds < within, result.report()
    assert result.stdout == "" and result.outputs[0].stderr.count("\n") == 1, result.report()
    line = result.outputs[0].stderr.strip()
    assert line.startswith(f"{name}: ") and f"srun python {name}" in line, line
    return line
