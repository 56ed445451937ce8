"""snippets/slurm/missing_hash.sbatch, shown on docs/slurm/pitfalls.md.

Submitted as it is. Bash fails on the line without "#", and sbatch ignores every
directive after it: 1 node, 1 task, the default output file; the job still succeeds.
On a GPU cluster, the same, with one GPU given on sbatch's command line (which the
broken line does not hide), so that a GPU partition takes the job.
"""

import re
from pathlib import Path

import pytest

from harness.outputs import check_output
from tests.slurm.jobs import backend, job_end, on_one_node, submit
from tests.slurm.real_cluster import on_the_gpu_cluster, real_cluster, submit_real


def assert_the_directives_after_the_broken_line_were_ignored(result) -> None:
    assert re.search(r"slurm_script: line \d+: SBATCH: command not found", result.stdout)
    assert on_one_node(result.stdout) == (1, [0])  # not 2 nodes of 2 tasks
    outputs = [p.name for p in Path(result.workdir).glob("*.out")]
    assert len(outputs) == 1 and re.fullmatch(r"slurm-\d+\.out", outputs[0])  # not missing-hash-*
    assert job_end(result)["state"] == "COMPLETED"


@pytest.mark.slurm
def test_the_directives_after_the_broken_line_are_ignored():
    result = submit("slurm/missing_hash.sbatch", world_size=1)
    check_output(result)
    assert_the_directives_after_the_broken_line_were_ignored(result)


@on_the_gpu_cluster()
def test_on_a_gpu_cluster():
    cluster = real_cluster()
    result = submit_real(cluster, "slurm/missing_hash.sbatch", world_size=1,
                         sbatch_args=["--gpus-per-node=1"])
    assert_the_directives_after_the_broken_line_were_ignored(result)
    assert backend(result.stdout) == "nccl on cuda"
