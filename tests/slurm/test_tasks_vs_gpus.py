"""snippets/slurm/tasks_vs_gpus.sbatch, shown on docs/slurm/pitfalls.md.

Submitted as it is: 2 nodes with 4 GPUs each, but one task per node, so srun starts 2
processes for 8 GPUs, and the job succeeds without a word about it.
"""

import pytest

from harness.outputs import check_output
from tests.slurm.jobs import job_end, placement, submit

pytestmark = pytest.mark.slurm


def test_two_processes_for_eight_gpus():
    result = submit("slurm/tasks_vs_gpus.sbatch", world_size=2)
    check_output(result)
    assert result.stdout.startswith("2 nodes, 4 GPUs each, 2 tasks\n")
    assert placement(result.stdout) == (2, {"node1": [0], "node2": [1]})
    assert job_end(result)["state"] == "COMPLETED"
