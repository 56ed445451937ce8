"""snippets/quickstart/two_nodes.sbatch, shown on docs/quickstart.md.

Submitted as it is to the two simulated nodes, from a folder that holds train.py and a
link to the tests' virtual environment as .venv: one torchrun per node, 4 processes
each, meet at the rendezvous and train as one job of 8. On a GPU cluster, the same on
the nodes and GPUs of the job the tests run in.
"""

import pytest

from harness.outputs import check_output
from tests.quickstart.test_one_node import assert_trained, submit_quickstart
from tests.slurm.jobs import job_nodes
from tests.slurm.real_cluster import on_the_gpu_cluster, real_cluster


@pytest.mark.slurm
def test_two_torchruns_train_as_one_job_of_eight():
    job = submit_quickstart("quickstart/two_nodes.sbatch", world_size=8)
    check_output(job)
    assert_trained(job, 8)
    assert job_nodes(job) == ["node1", "node2"]


@on_the_gpu_cluster()
def test_on_a_gpu_cluster():
    cluster = real_cluster()
    job = submit_quickstart("quickstart/two_nodes.sbatch", cluster.nodes * cluster.gpus_per_node,
                            cluster, sbatch_args=cluster.shape(tasks_per_gpu=False))
    assert_trained(job, cluster.nodes * cluster.gpus_per_node, "nccl on cuda")
