"""snippets/quickstart/one_node.sbatch, shown on docs/quickstart.md.

Submitted as it is, from a folder that holds train.py and a link to the tests' virtual
environment as .venv, from a shell where no environment is active: one torchrun starts
one process per GPU of the profile's nodes (4 for the default), which train and save the
model. On a GPU cluster, the same test with the GPUs of
one node of the job the tests run in (tests/slurm/clusters.py).
"""

from harness.outputs import check_output
from tests.quickstart.runs import assert_trained, submit_quickstart
from tests.slurm.clusters import on_each_cluster


@on_each_cluster()
def test_one_torchrun_trains_on_a_process_per_gpu_of_the_node(cluster):
    job = submit_quickstart(cluster, "quickstart/one_node.sbatch", cluster.gpus_per_node,
                            sbatch_args=cluster.shape(tasks_per_gpu=False, nodes=1))
    if not cluster.real:
        check_output(job)
    assert_trained(job, cluster.gpus_per_node, cluster.backend)
