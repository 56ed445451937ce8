"""snippets/slurm/one_node_torchrun.sbatch, shown on docs/slurm/one_node.md.

Submitted as it is: one task with 4 GPUs, and torchrun --standalone starts 4 processes.
"""

import pytest

from harness.outputs import check_output
from tests.slurm.jobs import assert_same_training, losses, on_one_node, submit

pytestmark = pytest.mark.slurm


def test_torchrun_trains_exactly_like_srun(one_node_job):
    result = submit("slurm/one_node_torchrun.sbatch", world_size=4)
    check_output(result)
    assert on_one_node(result.stdout) == (4, [0, 1, 2, 3])  # on whichever node was free
    assert losses(result.stdout) == losses(one_node_job.stdout)
    assert_same_training(result, one_node_job)
