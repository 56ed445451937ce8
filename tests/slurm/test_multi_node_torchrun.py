"""snippets/slurm/multi_node_torchrun.sbatch, shown on docs/slurm/multi_node.md: one
torchrun per node, meeting at a c10d rendezvous.

Submitted with 2 GPUs per node (sbatch's option overrides the script's), so that each
torchrun starts 2 processes: world size 4 on the two simulated nodes.
"""

import pytest

from harness.outputs import check_output
from tests.slurm.jobs import assert_same_training, placement, submit

pytestmark = pytest.mark.slurm


def test_two_torchruns_meet_and_train_as_on_one_node(one_node_job):
    result = submit("slurm/multi_node_torchrun.sbatch", world_size=4,
                    sbatch_args=["--gpus-per-node=2"])
    # The rendezvous decides which node gets ranks 0-1: not always the first.
    check_output(result)
    world_size, nodes = placement(result.stdout)
    assert world_size == 4 and sorted(nodes.values()) == [[0, 1], [2, 3]]
    assert set(nodes) == {"node1", "node2"}
    assert "rendezvous at node1, port" in result.stdout
    assert_same_training(result, one_node_job)
