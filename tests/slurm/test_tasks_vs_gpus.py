"""snippets/slurm/tasks_vs_gpus.sbatch, shown on docs/slurm/pitfalls.md.

Submitted as it is: 2 nodes with 4 GPUs each, but one task per node, so srun starts 2
processes for 8 GPUs, and the job succeeds without a word about it. On a GPU cluster,
one task per node of the job the tests run in (1 or 2), with all its GPUs.
"""

import pytest

from harness.outputs import check_output
from tests.slurm.jobs import GPUS, backend, job_end, placement, submit
from tests.slurm.real_cluster import on_the_gpu_cluster, real_cluster, submit_real


def assert_one_process_per_node(result, nodes: int, gpus: int) -> list[str]:
    assert result.stdout.startswith(f"{nodes} nodes, {gpus} GPUs each, {nodes} tasks\n")
    world_size, placed = placement(result.stdout)
    assert world_size == nodes and list(placed.values()) == [[n] for n in range(nodes)]
    assert job_end(result)["state"] == "COMPLETED"
    return list(placed)


@pytest.mark.slurm
def test_two_processes_for_eight_gpus():
    result = submit("slurm/tasks_vs_gpus.sbatch", world_size=2)
    check_output(result)
    assert assert_one_process_per_node(result, 2, GPUS) == ["node1", "node2"]


@on_the_gpu_cluster()
def test_on_a_gpu_cluster():
    cluster = real_cluster()
    result = submit_real(cluster, "slurm/tasks_vs_gpus.sbatch", world_size=cluster.nodes,
                         sbatch_args=cluster.shape(tasks_per_gpu=False))
    assert_one_process_per_node(result, cluster.nodes, cluster.gpus_per_node)
    assert backend(result.stdout) == "nccl on cuda"
