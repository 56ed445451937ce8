"""The report of a GPU test run (pytest --gpu-report, make test-gpu) and the record of GPU
runs that the pages show."""

import json
import subprocess
import sys

from harness import gpu_report
from harness.launch import ROOT

TESTS = '''
import pytest

@pytest.mark.multigpu(1)
def test_passes():
    from harness import launch
    launch.RAN.append(launch.SNIPPETS / "ddp" / "train.py")  # as harness.launch.run does

@pytest.mark.multigpu(1)
def test_fails():
    print("what the run printed")
    assert 1 == 2, "the GPU run went wrong"

@pytest.mark.multigpu(8)
def test_skipped():
    pytest.skip("needs 8 CUDA GPUs, this machine has 1")

def test_on_the_cpu():
    pass
'''


def test_a_session_writes_a_report_a_maintainer_can_read(tmp_path):
    (tmp_path / "test_sample.py").write_text(TESTS)
    folder = tmp_path / "report"
    session = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "harness.gpu_report", "-p", "no:cacheprovider",
         "-W", "ignore::pytest.PytestUnknownMarkWarning", f"--gpu-report={folder}",
         "--rootdir", str(tmp_path), str(tmp_path / "test_sample.py")],
        cwd=tmp_path, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=300)
    assert session.returncode == 1, session.stdout + session.stderr  # one test failed
    report = json.loads((folder / "report.json").read_text())
    tests = {nodeid.split("::")[1]: test for nodeid, test in report["tests"].items()}
    assert {name: t["outcome"] for name, t in tests.items()} == {
        "test_passes": "passed", "test_fails": "failed", "test_skipped": "skipped",
        "test_on_the_cpu": "passed"}
    assert tests["test_skipped"]["reason"] == "needs 8 CUDA GPUs, this machine has 1"
    assert "the GPU run went wrong" in tests["test_fails"]["output"]
    assert "what the run printed" in tests["test_fails"]["output"]
    assert [t["gpu"] for t in tests.values()] == [True, True, True, False]
    assert tests["test_passes"]["snippets"] == ["ddp/train.py"]  # what it started
    assert "snippets" not in tests["test_fails"]  # it started nothing
    assert report["machine"]["torch"].startswith("2.")
    gpus = report["machine"]["gpus"]  # what PyTorch lists: none on this kind of machine
    assert gpu_report.gpus_text(report["machine"]) == (f"{len(gpus)} × {gpus[0]}" if gpus
                                                       else "no GPU")
    text = (folder / "report.md").read_text()
    assert "- Outcome: 1 failed, 2 passed, 1 skipped" in text
    assert "| needs 8 CUDA GPUs, this machine has 1 |" in text
    assert "## failed: `test_sample.py::test_fails`" in text


def report_of(tests: dict) -> dict:
    return {"machine": {"date": "2026-11-26 09:00 UTC", "host": "gpu1", "python": "3.12.3",
                        "torch": "2.11.0+cu130", "gpus": ["NVIDIA H100 80GB HBM3"]},
            "command": ["-m", "multigpu"], "exit status": 0, "tests": tests}


def test_the_record_says_which_snippets_ran_on_which_gpus(tmp_path):
    report = report_of({
        "tests/ddp/test_set_epoch.py::test_gpu": {"outcome": "passed", "gpu": True, "seconds": 1},
        "tests/ddp/test_set_epoch.py::test_cpu": {"outcome": "passed", "gpu": False, "seconds": 1},
        "tests/ddp/test_train.py::test_a": {"outcome": "passed", "gpu": True, "seconds": 1},
        "tests/ddp/test_train.py::test_b": {"outcome": "failed", "gpu": True, "seconds": 1},
        "tests/slurm/test_no_srun.py::test_job": {"outcome": "passed", "gpu": True, "seconds": 1,
                                                  "snippets": ["slurm/no_srun.sbatch"]},
        "tests/ddp/test_topology.py::test_c": {"outcome": "skipped", "gpu": True, "seconds": 0},
    })
    gpu_report.write(tmp_path / "report", report)
    record = tmp_path / "gpu_runs.json"
    gpu_report.record(tmp_path / "report", record)
    runs = json.loads(record.read_text())
    assert runs["ddp/set_epoch.py"] == {"date": "2026-11-26", "gpus": "1 × NVIDIA H100 80GB HBM3",
                                        "torch": "2.11.0+cu130", "passed": 1, "failed": 0,
                                        "skipped": 0}  # the CPU test is not counted
    ran = {snippet: gpu_report.ran_on_gpus(run) for snippet, run in runs.items()}
    assert ran == {"ddp/set_epoch.py": True, "ddp/train.py": False,  # topology.py: skipped
                   "slurm/no_srun.sbatch": True}  # not slurm/train.py, which it copies
    # A later run that only skips a snippet keeps the run before
    gpu_report.write(tmp_path / "later", report_of({
        "tests/ddp/test_set_epoch.py::test_gpu": {"outcome": "skipped", "gpu": True,
                                                  "seconds": 0}}))
    gpu_report.record(tmp_path / "later", record)
    assert json.loads(record.read_text()) == runs


def test_the_committed_record_names_only_snippets_that_exist():
    record = json.loads(gpu_report.RECORD.read_text())
    for snippet, run in record.items():
        assert (ROOT / "snippets" / snippet).is_file(), snippet
        assert set(run) == {"date", "gpus", "torch", "passed", "failed", "skipped"}, snippet
