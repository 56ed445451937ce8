"""snippets/quickstart/one_node.sbatch, shown on docs/quickstart.md.

Submitted as it is, from a folder that holds train.py and a link to the tests' virtual
environment as .venv, from a shell where no environment is active: one torchrun starts
one process per GPU of the profile's nodes (4 for the default), which train and save the
model. On a GPU cluster, the same with the GPUs of
one node of the job the tests run in.
"""

import pytest

from harness.outputs import check_output
from tests.quickstart.runs import assert_trained, submit_quickstart
from tests.slurm.jobs import GPUS
from tests.slurm.real_cluster import on_the_gpu_cluster, real_cluster


@pytest.mark.slurm
def test_one_torchrun_trains_on_a_process_per_gpu_of_the_node():
    job = submit_quickstart("quickstart/one_node.sbatch", world_size=GPUS)
    check_output(job)
    assert_trained(job, GPUS)


@on_the_gpu_cluster()
def test_on_a_gpu_cluster():
    cluster = real_cluster()
    job = submit_quickstart("quickstart/one_node.sbatch", cluster.gpus_per_node, cluster,
                            sbatch_args=cluster.shape(tasks_per_gpu=False, nodes=1))
    assert_trained(job, cluster.gpus_per_node, "nccl on cuda")
