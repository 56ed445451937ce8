"""snippets/slurm/multi_node.sbatch, shown on docs/slurm/multi_node.md: srun, one task per
GPU on two nodes.

Submitted as the page shows it: one task per GPU of the profile's nodes on the two
simulated nodes (tests/slurm/conftest.py runs it once; multi_node_torchrun.sbatch must
train exactly like it). On a GPU cluster, the same world size as the
one-node job there, spread over 2 nodes when the job the tests run in has 2.
"""

import pytest

from harness.outputs import check_output
from tests.slurm.jobs import GPUS, assert_same_training, backend, placement
from tests.slurm.real_cluster import (GPU_ATOL, on_the_gpu_cluster, real_cluster, real_one_node,
                                      submit_real)


def assert_ranks_node_by_node(result, nodes: int, per_node: int) -> list[str]:
    """Ranks numbered node by node, and every rank found rank 0 on the first node."""
    world_size, placed = placement(result.stdout)
    assert world_size == nodes * per_node
    assert list(placed.values()) == [list(range(n * per_node, (n + 1) * per_node))
                                     for n in range(nodes)]
    assert f"rank 0 on {next(iter(placed))}, port" in result.stdout
    return list(placed)


@pytest.mark.slurm
def test_ranks_on_both_nodes_find_rank_0_and_train(two_node_job):
    check_output(two_node_job)
    assert assert_ranks_node_by_node(two_node_job, 2, GPUS) == ["node1", "node2"]
    steps = 3 * (1024 // (32 * 2 * GPUS))  # 3 epochs of 1024 samples, 32 per process and step
    assert f"done: {steps} steps" in two_node_job.stdout


@on_the_gpu_cluster(jobs=2)
def test_on_a_gpu_cluster():
    cluster = real_cluster()
    per_node = cluster.gpus_per_node // cluster.nodes
    result = submit_real(cluster, "slurm/multi_node.sbatch", world_size=cluster.nodes * per_node,
                         sbatch_args=cluster.shape(gpus_per_node=per_node))
    assert len(assert_ranks_node_by_node(result, cluster.nodes, per_node)) == cluster.nodes
    assert backend(result.stdout) == "nccl on cuda"
    reference = real_one_node(cluster, cluster.nodes * per_node)
    assert_same_training(result, reference, atol=GPU_ATOL)
