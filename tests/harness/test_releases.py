"""harness/releases.py: the releases of PyTorch are recorded on request only, for whole
test files, each for the content of the snippet that ran, in the file
harness/torch_versions.py names."""

import json
import os
import subprocess
import sys

from harness import torch_versions
from harness.launch import ROOT

#: A test file named after a real snippet (snippets/cheatsheet/debug.sbatch), in a folder
#: of its own, so that the session is fast and records into a file of its own.
TEST_FILE = "tests/cheatsheet/test_debug.py"
SNIPPET = "cheatsheet/debug.sbatch"


def records(outcome: str) -> dict:
    return {SNIPPET: {torch_versions.torch_release(): {
        "outcome": outcome, "content": torch_versions.content(SNIPPET)}}}


def run_pytest(tmp_path, *args, passes=True):
    (tmp_path / TEST_FILE).parent.mkdir(parents=True)
    (tmp_path / TEST_FILE).write_text(f"def test_one():\n    assert {passes}\n\n"
                                      "def test_two():\n    pass\n")
    data = tmp_path / "versions.json"
    env = {**os.environ, torch_versions.DATA_ENV: str(data), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "harness.releases",
                           "-p", "no:cacheprovider", "-p", "no:randomly", TEST_FILE, *args],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    recorded = json.loads(data.read_text()) if data.exists() else None
    return done, recorded


def test_a_plain_run_records_nothing(tmp_path):
    done, recorded = run_pytest(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert recorded is None


def test_the_flag_records_the_release_the_tests_ran_with(tmp_path):
    done, recorded = run_pytest(tmp_path, "--record-releases")
    assert done.returncode == 0, done.stdout + done.stderr
    assert recorded == records("passed")
    assert torch_versions.current(recorded) == {SNIPPET: {torch_versions.torch_release(): "passed"}}


def test_a_failed_test_records_a_failure(tmp_path):
    _, recorded = run_pytest(tmp_path, "--record-releases", passes=False)
    assert recorded == records("failed")


def test_a_selection_cannot_be_recorded(tmp_path):
    done, recorded = run_pytest(tmp_path, "--record-releases", "-k", "one")
    assert done.returncode != 0 and "whole test files only" in done.stdout + done.stderr
    assert recorded is None
