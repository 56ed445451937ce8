"""snippets/slurm/multi_node_torchrun.sbatch, shown on docs/slurm/multi_node.md: one
torchrun per node, meeting at a c10d rendezvous.

Submitted as the page shows it: each torchrun starts one process per GPU of the profile's
nodes, and the training must be exactly that of multi_node.sbatch (srun, one task per GPU). On a GPU cluster,
the same world size as the one-node job there, over 2 nodes when the tests' job has 2.
"""

import pytest

from harness.outputs import check_output
from tests.slurm.jobs import GPUS, assert_same_training, backend, losses, placement, submit
from tests.slurm.real_cluster import (GPU_ATOL, on_the_gpu_cluster, real_cluster, real_one_node,
                                      submit_real)


def assert_torchruns_met(result, nodes: int, per_node: int) -> list[str]:
    """Each node's processes hold consecutive ranks (which node gets ranks 0 and up is the
    rendezvous's choice), and the rendezvous was on one of the job's nodes."""
    world_size, placed = placement(result.stdout)
    assert world_size == nodes * per_node
    assert sorted(placed.values()) == [list(range(n * per_node, (n + 1) * per_node))
                                       for n in range(nodes)]
    head = next(line for line in result.stdout.splitlines() if line.startswith("rendezvous at"))
    assert head.split()[2].rstrip(",") in placed, head
    return sorted(placed)


@pytest.mark.slurm
def test_two_torchruns_meet_and_train_as_srun_does(two_node_job):
    result = submit("slurm/multi_node_torchrun.sbatch", world_size=2 * GPUS)
    check_output(result)
    assert assert_torchruns_met(result, 2, GPUS) == ["node1", "node2"]
    assert "rendezvous at node1, port" in result.stdout
    assert losses(result.stdout) == losses(two_node_job.stdout)
    assert_same_training(result, two_node_job)


@on_the_gpu_cluster(jobs=2)
def test_on_a_gpu_cluster():
    cluster = real_cluster()
    per_node = cluster.gpus_per_node // cluster.nodes
    result = submit_real(cluster, "slurm/multi_node_torchrun.sbatch",
                         world_size=cluster.nodes * per_node,
                         sbatch_args=cluster.shape(tasks_per_gpu=False, gpus_per_node=per_node))
    assert len(assert_torchruns_met(result, cluster.nodes, per_node)) == cluster.nodes
    assert backend(result.stdout) == "nccl on cuda"
    assert_same_training(result, real_one_node(cluster, cluster.nodes * per_node), atol=GPU_ATOL)
