"""snippets/slurm/no_srun.sbatch, shown on docs/slurm/pitfalls.md: a 2-node job that
starts torchrun without srun.

Submitted as it is. The job gets both nodes, and all 4 processes run on the first. On
a GPU cluster, the same test with the GPUs per node of the job the tests run in (on 2
nodes when that job has 2, otherwise 1, where only the placement can be checked;
tests/slurm/clusters.py).
"""

from harness.outputs import check_output
from tests.slurm.clusters import on_each_cluster
from tests.slurm.jobs import backend, job_end, job_nodes, placement


def assert_only_the_first_node_works(result, nodes: int, gpus: int) -> str:
    given = job_nodes(result)
    assert len(given) == nodes  # the job had this many nodes...
    assert placement(result.stdout) == (gpus, {given[0]: list(range(gpus))})  # ...used one
    assert job_end(result)["state"] == "COMPLETED"  # and nothing says so
    return given[0]


@on_each_cluster()
def test_only_the_first_node_works(cluster, monkeypatch):
    cluster.use(monkeypatch)  # job_nodes asks the cluster's scontrol
    result = cluster.submit("slurm/no_srun.sbatch", world_size=cluster.gpus_per_node,
                            sbatch_args=cluster.shape(tasks_per_gpu=False))
    if not cluster.real:
        check_output(result)
        assert job_nodes(result) == ["node1", "node2"]
    first = assert_only_the_first_node_works(result, cluster.nodes, cluster.gpus_per_node)
    if not cluster.real:
        assert first == "node1"
    assert backend(result.stdout) == cluster.backend
