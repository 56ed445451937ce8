"""tools/gpu-check, the prepared check for a short GPU allocation (docs/slurm/gpu_tests.md):
which tests it runs where one GPU is visible, its limits, and the report it leaves.

No GPU here: SNIPPET_HARNESS_FAKE_GPUS=1 makes the harness count one, and sample tests
stand in for the suite's, so that the selection and the report are what is checked."""

import json
import math
import os
import re
import subprocess
import sys

from harness.launch import FAKE_GPUS_ENV, ROOT

CONFTEST = '''
pytest_plugins = ["harness.plugins.devices", "harness.plugins.budget", "harness.gpu_report"]

def pytest_configure(config):
    for name in ("multigpu(n): GPUs", "one_gpu: one GPU"):
        config.addinivalue_line("markers", name)
'''

TESTS = '''
import os, time
import pytest
from tests.devices import on_each_device

@on_each_device(gpus=2, one_gpu=True)
def test_claim(device):
    assert device.ranks(2) == (1 if device.gpus == 1 else 2)
    assert device.cuda and device.backend == "nccl"
    assert "SNIPPET_HARNESS_DEVICE" not in os.environ  # the GPUs are not hidden

@pytest.mark.multigpu(1)
def test_hangs():
    time.sleep(60)

def test_on_the_cpu():
    pass
'''


def gpu_check(tmp_path, **env) -> tuple[subprocess.CompletedProcess, dict]:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_sample.py").write_text(TESTS)
    done = subprocess.run(
        [ROOT / "tools" / "gpu-check", tmp_path / "report", "--rootdir", tmp_path, tmp_path],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(ROOT),
             FAKE_GPUS_ENV: "1", **env})
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    return done, {nodeid.split("::")[1]: test for nodeid, test in report["tests"].items()}


def test_one_gpu_runs_the_one_gpu_cases_and_skips_the_rest_with_the_reason(tmp_path):
    done, tests = gpu_check(tmp_path, LIMIT="5")
    assert done.returncode == 1, done.stdout + done.stderr  # test_hangs went past its limit
    assert {name: test["outcome"] for name, test in tests.items()} == {
        "test_claim[1-gpu]": "passed", "test_claim[2-gpus]": "skipped", "test_hangs": "failed"}
    assert tests["test_claim[2-gpus]"]["reason"] == "needs 2 CUDA GPUs, this machine has 1"
    assert "Timeout" in tests["test_hangs"]["output"]
    assert tests["test_hangs"]["seconds"] < 30
    text = (tmp_path / "report" / "report.md").read_text()
    assert "--time-budget=300" in text and "--timeout=5" in text  # the command it ran


def test_a_spent_budget_skips_what_would_start_after_it(tmp_path):
    done, tests = gpu_check(tmp_path, BUDGET="0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert {test["reason"] for test in tests.values()} == {
        "needs 2 CUDA GPUs, this machine has 1",
        "the run's time budget was spent before this test started"}


def test_the_page_states_its_defaults():
    script = (ROOT / "tools" / "gpu-check").read_text()
    limit, budget = (int(re.search(rf"\${{{name}:-(\d+)}}", script)[1])
                     for name in ("LIMIT", "BUDGET"))
    page = " ".join((ROOT / "docs" / "slurm" / "gpu_tests.md").read_text().split())
    assert f"stops any test after {limit} seconds" in page
    assert f"starts no test after {budget // 60} minutes" in page and budget % 60 == 0
    assert f"allow {math.ceil((budget + limit) / 60)} minutes in all" in page
    assert budget + limit <= 8 * 60  # the check fits a short allocation
