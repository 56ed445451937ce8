"""snippets/slurm/one_node_torchrun.sbatch, shown on docs/slurm/one_node.md.

Submitted as it is: one task with 4 GPUs, and torchrun --standalone starts 4 processes.
On a GPU cluster, the same test with one task with the GPUs of the job the tests run in
(tests/slurm/clusters.py), compared with one_node.sbatch's run there
(real_cluster.real_one_node).
"""

from harness.outputs import check_output
from tests.slurm.clusters import on_each_cluster
from tests.slurm.jobs import assert_same_training, backend, losses, on_one_node
from tests.slurm.real_cluster import GPU_ATOL, real_one_node


@on_each_cluster(jobs=2)
def test_torchrun_trains_exactly_like_srun(cluster, request):
    gpus = cluster.gpus_per_node
    result = cluster.submit("slurm/one_node_torchrun.sbatch", world_size=gpus,
                            sbatch_args=cluster.shape(tasks_per_gpu=False, nodes=1))
    if not cluster.real:
        check_output(result)
    assert on_one_node(result.stdout) == (gpus, list(range(gpus)))  # on whichever node was free
    assert backend(result.stdout) == cluster.backend
    if cluster.real:
        reference = real_one_node(cluster, gpus)
    else:  # the session's run of one_node.sbatch (tests/slurm/conftest.py)
        reference = request.getfixturevalue("one_node_job")
    assert len(losses(result.stdout)) == len(losses(reference.stdout))
    if not cluster.real:  # on the CPU bit for bit: the very same losses
        assert losses(result.stdout) == losses(reference.stdout)
    assert_same_training(result, reference, atol=cluster.pick(0.0, GPU_ATOL))
