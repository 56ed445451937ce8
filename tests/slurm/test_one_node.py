"""snippets/slurm/one_node.sbatch, shown on docs/slurm/one_node.md: srun, one task per GPU.

Submitted as the page shows it: one node, one task per GPU of the profile's nodes. Its run (tests/slurm/conftest.py) is
the one the other training jobs of the chapter are compared with. On a GPU cluster, the
same job with the GPUs of the job the tests run in (tests/slurm/real_cluster.py).
"""

import pytest

from harness.outputs import BARRIER_WARNING, check_output
from tests.slurm.jobs import GPUS, backend, checkpoint, job_end, losses, on_one_node
from tests.slurm.real_cluster import on_the_gpu_cluster, real_cluster, real_one_node


def assert_trained_on_one_node(job, ranks: int) -> None:
    """``ranks`` processes on one node trained 3 epochs, printed their losses, saved."""
    assert on_one_node(job.stdout) == (ranks, list(range(ranks)))  # whichever node was free
    assert job_end(job)["state"] == "COMPLETED"
    steps = 3 * (1024 // (32 * ranks))  # 3 epochs of 1024 samples, 32 per process and step
    assert len(losses(job.stdout)) == steps // 10  # one loss line every 10 steps
    assert checkpoint(job)["step"] == steps


@pytest.mark.slurm
def test_srun_starts_a_rank_per_gpu_of_the_node_and_they_train(one_node_job):
    check_output(one_node_job)
    assert_trained_on_one_node(one_node_job, GPUS)


@on_the_gpu_cluster()
def test_on_a_gpu_cluster():
    cluster = real_cluster()
    job = real_one_node(cluster, cluster.gpus_per_node)
    assert_trained_on_one_node(job, cluster.gpus_per_node)
    assert backend(job.stdout) == "nccl on cuda"
    assert BARRIER_WARNING not in job.text
