"""snippets/slurm/one_node.sbatch, shown on docs/slurm/one_node.md: srun, one task per GPU.

Submitted as the page shows it: one node, one task per GPU of the profile's nodes. Its run (tests/slurm/conftest.py) is
the one the other training jobs of the chapter are compared with. On a GPU cluster, the
same test with the GPUs of the job the tests run in (tests/slurm/clusters.py), whose run
(real_cluster.real_one_node) is the one compared with there.
"""

from harness.outputs import BARRIER_WARNING, check_output
from tests.slurm.clusters import on_each_cluster
from tests.slurm.jobs import backend, checkpoint, job_end, losses, on_one_node
from tests.slurm.real_cluster import real_one_node


def assert_trained_on_one_node(job, ranks: int) -> None:
    """``ranks`` processes on one node trained 3 epochs, printed their losses, saved."""
    assert on_one_node(job.stdout) == (ranks, list(range(ranks)))  # whichever node was free
    assert job_end(job)["state"] == "COMPLETED"
    steps = 3 * (1024 // (32 * ranks))  # 3 epochs of 1024 samples, 32 per process and step
    assert len(losses(job.stdout)) == steps // 10  # one loss line every 10 steps
    assert checkpoint(job)["step"] == steps


@on_each_cluster()
def test_srun_starts_a_rank_per_gpu_of_the_node_and_they_train(cluster, request):
    if cluster.real:
        job = real_one_node(cluster, cluster.gpus_per_node)
    else:  # the session's run (tests/slurm/conftest.py)
        job = request.getfixturevalue("one_node_job")
        check_output(job)
    assert_trained_on_one_node(job, cluster.gpus_per_node)
    assert backend(job.stdout) == cluster.backend
    if cluster.real:  # NCCL's warning of a barrier before the process chose its GPU
        assert BARRIER_WARNING not in job.text
