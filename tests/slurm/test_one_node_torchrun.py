"""snippets/slurm/one_node_torchrun.sbatch, shown on docs/slurm/one_node.md.

Submitted as it is: one task with 4 GPUs, and torchrun --standalone starts 4 processes.
On a GPU cluster, one task with the GPUs of the job the tests run in.
"""

import pytest

from harness.outputs import check_output
from tests.slurm.jobs import GPUS, assert_same_training, backend, losses, on_one_node, submit
from tests.slurm.real_cluster import (GPU_ATOL, on_the_gpu_cluster, real_cluster, real_one_node,
                                      submit_real)


@pytest.mark.slurm
def test_torchrun_trains_exactly_like_srun(one_node_job):
    result = submit("slurm/one_node_torchrun.sbatch", world_size=GPUS)
    check_output(result)
    assert on_one_node(result.stdout) == (GPUS, list(range(GPUS)))  # on whichever node was free
    assert losses(result.stdout) == losses(one_node_job.stdout)
    assert_same_training(result, one_node_job)


@on_the_gpu_cluster(jobs=2)
def test_on_a_gpu_cluster():
    cluster = real_cluster()
    gpus = cluster.gpus_per_node
    result = submit_real(cluster, "slurm/one_node_torchrun.sbatch", world_size=gpus,
                         sbatch_args=cluster.shape(tasks_per_gpu=False, nodes=1))
    assert on_one_node(result.stdout) == (gpus, list(range(gpus)))
    assert backend(result.stdout) == "nccl on cuda"
    reference = real_one_node(cluster, gpus)
    assert len(losses(result.stdout)) == len(losses(reference.stdout))
    assert_same_training(result, reference, atol=GPU_ATOL)
