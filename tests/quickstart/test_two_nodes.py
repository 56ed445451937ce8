"""snippets/quickstart/two_nodes.sbatch, shown on docs/quickstart.md.

Submitted as it is to the two simulated nodes, from a folder that holds train.py and a
link to the tests' virtual environment as .venv: one torchrun per node, one process per
GPU of the profile's nodes (4 for the default), meet at the rendezvous and train as one
job (of 8 for the default). On a GPU cluster, the same on
the nodes and GPUs of the job the tests run in.
"""

import pytest

from harness.outputs import check_output
from tests.quickstart.runs import assert_trained, submit_quickstart
from tests.slurm.jobs import GPUS, job_nodes
from tests.slurm.real_cluster import on_the_gpu_cluster, real_cluster


@pytest.mark.slurm
def test_two_torchruns_train_as_one_job_of_every_gpu_of_both_nodes():
    job = submit_quickstart("quickstart/two_nodes.sbatch", world_size=2 * GPUS)
    check_output(job)
    assert_trained(job, 2 * GPUS)
    assert job_nodes(job) == ["node1", "node2"]


@on_the_gpu_cluster()
def test_on_a_gpu_cluster():
    cluster = real_cluster()
    job = submit_quickstart("quickstart/two_nodes.sbatch", cluster.nodes * cluster.gpus_per_node,
                            cluster, sbatch_args=cluster.shape(tasks_per_gpu=False))
    assert_trained(job, cluster.nodes * cluster.gpus_per_node, "nccl on cuda")
