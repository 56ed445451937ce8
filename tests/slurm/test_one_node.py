"""snippets/slurm/one_node.sbatch, shown on docs/slurm/one_node.md: srun, one task per GPU.

Submitted as it is: one node, 4 tasks and 4 GPUs. Its run (tests/slurm/conftest.py) is
the one the other training jobs of the chapter are compared with.
"""

import pytest

from harness.outputs import check_output
from tests.slurm.jobs import checkpoint, job_end, losses, on_one_node

pytestmark = pytest.mark.slurm


def test_srun_starts_four_ranks_on_the_node_and_they_train(one_node_job):
    check_output(one_node_job)
    assert on_one_node(one_node_job.stdout) == (4, [0, 1, 2, 3])  # on whichever node was free
    assert job_end(one_node_job)["state"] == "COMPLETED"
    assert len(losses(one_node_job.stdout)) == 2
    assert checkpoint(one_node_job)["step"] == 3 * 1024 // (4 * 32)  # 3 epochs of 8 steps
