"""snippets/slurm/anatomy_torchrun.sbatch, shown on docs/slurm/anatomy.md: one torchrun
per node.

Submitted as it is: 2 nodes, one task of 32 cores and 4 GPUs per node. With SLURM_DEBUG,
srun says it asks for the 32 cores of each torchrun, whose 4 processes share them. On a
GPU cluster, the same test with one torchrun per node of the job the tests run in (1 or
2), with its GPUs (tests/slurm/clusters.py).
"""

from harness.outputs import check_output
from tests.slurm.clusters import on_each_cluster
from tests.slurm.jobs import GPUS, SRUN_DEBUG, srun_steps, whereami


def assert_one_torchrun_per_node(result, nodes: int, gpus: int, cpus: int) -> set[str]:
    """Each node's processes hold consecutive ranks (the rendezvous decides which node gets
    ranks 0 and up: not always the first), local rank = GPU, the node's cores shared out."""
    rows = whereami(result.stdout)
    assert [row[0] for row in rows] == list(range(nodes * gpus))
    groups = [{row[2] for row in rows[n * gpus:(n + 1) * gpus]} for n in range(nodes)]
    assert all(len(group) == 1 for group in groups) and len(set.union(*groups)) == nodes
    assert [row[1] for row in rows] == [nodes * gpus] * (nodes * gpus)
    assert [(row[3], row[4]) for row in rows] == [(rank % gpus, rank % gpus)
                                                  for rank in range(nodes * gpus)]
    assert len({row[5:] for row in rows}) == 1 and rows[0][6] == str(cpus // gpus)
    assert len(rows[0][5].split(",")) == gpus
    assert srun_steps(result) == [(nodes * cpus, nodes)]  # not 1 core per torchrun
    return set.union(*groups)


@on_each_cluster()
def test_each_torchrun_starts_one_process_per_gpu_of_its_node(cluster):
    result = cluster.submit("slurm/anatomy_torchrun.sbatch", files=("slurm/whereami.py",),
                            env=SRUN_DEBUG, sbatch_args=cluster.shape(tasks_per_gpu=False))
    if not cluster.real:
        check_output(result)
    gpus = cluster.gpus_per_node
    names = assert_one_torchrun_per_node(result, cluster.nodes, gpus, gpus * cluster.cpus_per_gpu)
    if not cluster.real:  # both nodes, all their GPUs
        assert names == {"node1", "node2"}
        assert whereami(result.stdout)[0][5] == ",".join(map(str, range(GPUS)))
