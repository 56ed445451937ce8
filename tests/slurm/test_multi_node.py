"""snippets/slurm/multi_node.sbatch, shown on docs/slurm/multi_node.md: srun, one task per
GPU on two nodes.

Submitted with 2 tasks and 2 GPUs per node (sbatch's options override the script's),
world size 4 on the two simulated nodes.
"""

import pytest

from harness.outputs import check_output
from tests.slurm.jobs import TWO_PER_NODE, assert_same_training, placement, submit

pytestmark = pytest.mark.slurm


def test_ranks_on_both_nodes_find_rank_0_and_train_as_on_one_node(one_node_job):
    result = submit("slurm/multi_node.sbatch", world_size=4, sbatch_args=TWO_PER_NODE)
    check_output(result)
    assert "rank 0 on node1, port" in result.stdout
    assert placement(result.stdout) == (4, {"node1": [0, 1], "node2": [2, 3]})
    assert_same_training(result, one_node_job)  # world size 4 either way
