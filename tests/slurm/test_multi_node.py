"""snippets/slurm/multi_node.sbatch, shown on docs/slurm/multi_node.md: srun, one task per
GPU on two nodes.

Submitted as the page shows it: one task per GPU of the profile's nodes on the two
simulated nodes (tests/slurm/conftest.py runs it once; multi_node_torchrun.sbatch must
train exactly like it). On a GPU cluster, the same test with the world size of the
one-node job there, spread over 2 nodes when the job the tests run in has 2
(tests/slurm/clusters.py), and the training of that one-node job.
"""

from harness.outputs import check_output
from tests.slurm.clusters import on_each_cluster
from tests.slurm.jobs import GPUS, assert_same_training, backend, placement
from tests.slurm.real_cluster import GPU_ATOL, real_one_node


def assert_ranks_node_by_node(result, nodes: int, per_node: int) -> list[str]:
    """Ranks numbered node by node, and every rank found rank 0 on the first node."""
    world_size, placed = placement(result.stdout)
    assert world_size == nodes * per_node
    assert list(placed.values()) == [list(range(n * per_node, (n + 1) * per_node))
                                     for n in range(nodes)]
    assert f"rank 0 on {next(iter(placed))}, port" in result.stdout
    return list(placed)


@on_each_cluster(jobs=2)
def test_ranks_on_both_nodes_find_rank_0_and_train(cluster, request):
    per_node = cluster.pick(GPUS, cluster.gpus_per_node // cluster.nodes)
    world = cluster.nodes * per_node
    if cluster.real:
        result = cluster.submit("slurm/multi_node.sbatch", world_size=world,
                                sbatch_args=cluster.shape(gpus_per_node=per_node))
    else:  # the session's run (tests/slurm/conftest.py)
        result = request.getfixturevalue("two_node_job")
        check_output(result)
    names = assert_ranks_node_by_node(result, cluster.nodes, per_node)
    assert len(names) == cluster.nodes
    assert backend(result.stdout) == cluster.backend
    steps = 3 * (1024 // (32 * world))  # 3 epochs of 1024 samples, 32 per process and step
    assert f"done: {steps} steps" in result.stdout
    if cluster.real:  # as one_node.sbatch trains on as many GPUs of one node
        assert_same_training(result, real_one_node(cluster, world), atol=GPU_ATOL)
    else:
        assert names == ["node1", "node2"]
