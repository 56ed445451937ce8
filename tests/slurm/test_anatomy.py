"""snippets/slurm/anatomy.sbatch, shown on docs/slurm/anatomy.md: one task per GPU.

Submitted as it is: 2 nodes, 4 tasks and 4 GPUs per node, 8 cores per task. With
SLURM_DEBUG, srun says how many CPUs it asks for: the 8 cores of each of its 8 tasks,
which Slurm 22.05 (installed here) gives only if the script passes them on. On a GPU
cluster, the same test with one task per GPU of the job the tests run in, on as many
nodes (1 or 2) (tests/slurm/clusters.py).
"""

from harness.outputs import check_output
from tests.slurm.clusters import on_each_cluster
from tests.slurm.jobs import GPUS, SRUN_DEBUG, srun_steps, whereami


def assert_one_task_per_gpu(result, nodes: int, gpus: int, cpus: int) -> list[str]:
    """Ranks node by node, local rank = GPU, every task given ``cpus`` cores; returns the
    nodes' names."""
    rows = whereami(result.stdout)
    names = list(dict.fromkeys(row[2] for row in rows))
    visible = rows[0][5]
    assert len(names) == nodes and len(visible.split(",")) == gpus
    assert rows == [(rank, nodes * gpus, names[rank // gpus], rank % gpus, rank % gpus, visible,
                     str(cpus)) for rank in range(nodes * gpus)]
    assert srun_steps(result) == [(nodes * gpus * cpus, nodes * gpus)]  # not 1 core per task
    return names


@on_each_cluster()
def test_srun_starts_one_process_per_gpu_numbered_node_by_node(cluster):
    result = cluster.submit("slurm/anatomy.sbatch", files=("slurm/whereami.py",),
                            env=SRUN_DEBUG, sbatch_args=cluster.shape())
    if not cluster.real:
        check_output(result)
    names = assert_one_task_per_gpu(result, cluster.nodes, cluster.gpus_per_node,
                                    cluster.cpus_per_gpu)
    if not cluster.real:  # both nodes, all their GPUs
        assert names == ["node1", "node2"]
        assert whereami(result.stdout)[0][5] == ",".join(map(str, range(GPUS)))
