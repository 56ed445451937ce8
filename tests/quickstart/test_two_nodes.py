"""snippets/quickstart/two_nodes.sbatch, shown on docs/quickstart.md.

Submitted as it is to the two simulated nodes, from a folder that holds train.py and a
link to the tests' virtual environment as .venv: one torchrun per node, one process per
GPU of the profile's nodes (4 for the default), meet at the rendezvous and train as one
job (of 8 for the default). On a GPU cluster, the same test on
the nodes and GPUs of the job the tests run in (tests/slurm/clusters.py).
"""

from harness.outputs import check_output
from tests.quickstart.runs import assert_trained, submit_quickstart
from tests.slurm.clusters import on_each_cluster
from tests.slurm.jobs import job_nodes


@on_each_cluster()
def test_two_torchruns_train_as_one_job_of_every_gpu_of_both_nodes(cluster):
    world_size = cluster.nodes * cluster.gpus_per_node
    job = submit_quickstart(cluster, "quickstart/two_nodes.sbatch", world_size,
                            sbatch_args=cluster.shape(tasks_per_gpu=False))
    if not cluster.real:
        check_output(job)
    assert_trained(job, world_size, cluster.backend)
    if not cluster.real:
        assert job_nodes(job) == ["node1", "node2"]
