"""snippets/slurm/gpu_tests.sbatch, shown on docs/slurm/gpu_tests.md.

Submitted as the page says, from the top folder of the guide: the job runs
`make test-gpu` there, for real. On this machine's declared GPUs PyTorch finds no CUDA
device, so every multigpu test is skipped with its reason, and the job succeeds.
The output file goes to the test's folder instead of the guide's top folder.
"""

import json
import re

import pytest

from harness.launch import ROOT, run
from harness.outputs import check_text
from tests.slurm.jobs import job_end

pytestmark = pytest.mark.slurm


def test_make_test_gpu_runs_in_the_job(tmp_path):
    # Under `make outputs`, the tests inside the job must not rewrite output files.
    # Its report goes to the test's folder too (make reads GPU_REPORT from the environment).
    result = run("slurm/gpu_tests.sbatch", launcher="sbatch", world_size=0, submit_dir=ROOT,
                 sbatch_args=[f"--output={tmp_path}/%x-%j.out"], workdir=tmp_path,
                 env={"UPDATE_OUTPUTS": "0", "GPU_REPORT": str(tmp_path / "gpu-report")},
                 timeout=300)
    # The page shows the report's folder as a reader's job names it (make's default).
    check_text(result.stdout.replace(str(tmp_path / "gpu-report"), "gpu-report"), result.script,
               command=result.command)
    assert job_end(result)["state"] == "COMPLETED"
    assert re.search(r"(?m)^\.venv(-torch-[\d.]+)?/bin/python -u -m pytest -m multigpu --gpu-report=\S+ -q -rs$",
                     result.stdout)
    reasons = re.findall(r"^SKIPPED \[(\d+)\] \S+: (.*)$", result.stdout, re.M)
    skipped = int(re.search(r"^(\d+) skipped, \d+ deselected in ", result.stdout, re.M)[1])
    assert skipped > 0 and sum(int(n) for n, _ in reasons) == skipped
    # For want of GPUs, or of a library that `make test-extras` installs and that the
    # test needs before its GPUs are counted
    assert all(re.fullmatch(r"needs \d+ CUDA GPUs?, this machine has 0|needs .+: run `make "
                            r"test-extras`, which installs it", why) for _, why in reasons)
    assert any(why.startswith("needs 2 CUDA GPUs") for _, why in reasons)
    assert not re.search(r"\b(passed|failed|error)", result.stdout)
    # The report a maintainer commits: the same tests, skipped for the same reasons
    report = json.loads((tmp_path / "gpu-report" / "report.json").read_text())
    assert {t["outcome"] for t in report["tests"].values()} == {"skipped"}
    assert len(report["tests"]) == skipped
    assert "- Outcome: %d skipped" % skipped in (tmp_path / "gpu-report" / "report.md").read_text()
