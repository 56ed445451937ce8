"""snippets/slurm/tasks_vs_gpus.sbatch, shown on docs/slurm/pitfalls.md.

Submitted as it is: 2 nodes with 4 GPUs each, but one task per node, so srun starts 2
processes for 8 GPUs, and the job succeeds without a word about it. On a GPU cluster,
the same test with one task per node of the job the tests run in (1 or 2), with all its
GPUs (tests/slurm/clusters.py).
"""

from harness.outputs import check_output
from tests.slurm.clusters import on_each_cluster
from tests.slurm.jobs import backend, job_end, placement


def assert_one_process_per_node(result, nodes: int, gpus: int) -> list[str]:
    assert result.stdout.startswith(f"{nodes} nodes, {gpus} GPUs each, {nodes} tasks\n")
    world_size, placed = placement(result.stdout)
    assert world_size == nodes and list(placed.values()) == [[n] for n in range(nodes)]
    assert job_end(result)["state"] == "COMPLETED"
    return list(placed)


@on_each_cluster()
def test_two_processes_for_eight_gpus(cluster):
    result = cluster.submit("slurm/tasks_vs_gpus.sbatch", world_size=cluster.nodes,
                            sbatch_args=cluster.shape(tasks_per_gpu=False))
    if not cluster.real:
        check_output(result)
    names = assert_one_process_per_node(result, cluster.nodes, cluster.gpus_per_node)
    if not cluster.real:
        assert names == ["node1", "node2"]
    assert backend(result.stdout) == cluster.backend
