"""snippets/slurm/multi_node_torchrun.sbatch, shown on docs/slurm/multi_node.md: one
torchrun per node, meeting at a c10d rendezvous.

Submitted as the page shows it: each torchrun starts one process per GPU of the profile's
nodes, and the training must be exactly that of multi_node.sbatch (srun, one task per GPU).
On a GPU cluster, the same test with the world size of the one-node job there, over 2
nodes when the tests' job has 2 (tests/slurm/clusters.py), and the training of that
one-node job.
"""

from harness.outputs import check_output
from tests.slurm.clusters import on_each_cluster
from tests.slurm.jobs import GPUS, assert_same_training, backend, losses, placement
from tests.slurm.real_cluster import GPU_ATOL, real_one_node


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


@on_each_cluster(jobs=2)
def test_two_torchruns_meet_and_train_as_srun_does(cluster, request):
    per_node = cluster.pick(GPUS, cluster.gpus_per_node // cluster.nodes)
    world = cluster.nodes * per_node
    result = cluster.submit("slurm/multi_node_torchrun.sbatch", world_size=world,
                            sbatch_args=cluster.shape(tasks_per_gpu=False, gpus_per_node=per_node))
    if not cluster.real:
        check_output(result)
    names = assert_torchruns_met(result, cluster.nodes, per_node)
    assert len(names) == cluster.nodes
    assert backend(result.stdout) == cluster.backend
    if cluster.real:  # srun's training there: one_node.sbatch's, on as many GPUs of one node
        reference = real_one_node(cluster, world)
    else:  # multi_node.sbatch's, on the same two nodes (tests/slurm/conftest.py)
        reference = request.getfixturevalue("two_node_job")
        assert names == ["node1", "node2"]
        assert "rendezvous at node1, port" in result.stdout
        assert losses(result.stdout) == losses(reference.stdout)
    assert_same_training(result, reference, atol=cluster.pick(0.0, GPU_ATOL))
