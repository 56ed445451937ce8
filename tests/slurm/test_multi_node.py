"""snippets/slurm/multi_node.sbatch, shown on docs/slurm/multi_node.md: srun, one task per
GPU on two nodes.

Submitted with 2 tasks and 2 GPUs per node (sbatch's options override the script's),
world size 4 on the two simulated nodes. On a GPU cluster, the same world size as the
one-node job there, spread over 2 nodes when the job the tests run in has 2.
"""

import pytest

from harness.outputs import check_output
from tests.slurm.jobs import TWO_PER_NODE, assert_same_training, backend, placement, submit
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
def test_ranks_on_both_nodes_find_rank_0_and_train_as_on_one_node(one_node_job):
    result = submit("slurm/multi_node.sbatch", world_size=4, sbatch_args=TWO_PER_NODE)
    check_output(result)
    assert assert_ranks_node_by_node(result, 2, 2) == ["node1", "node2"]
    assert_same_training(result, one_node_job)  # world size 4 either way


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
