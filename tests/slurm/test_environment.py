"""snippets/slurm/environment.sbatch, shown on docs/slurm/environment.md.

Submitted from a shell where no virtual environment is active, from a folder that holds
train.py and the virtual environment .venv (here, as for every job, a link to the one
the tests use: harness/slurm.py):
the job activates it itself, and trains. On a GPU cluster, the same test with 2 GPUs
(tests/slurm/clusters.py).
"""

from harness.launch import BIN
from harness.outputs import check_output
from tests.slurm.clusters import on_each_cluster
from tests.slurm.jobs import backend, job_end, on_one_node


def assert_the_job_used_its_own_environment(result, ranks: int) -> None:
    # activate names the environment by the path it was made at (.venv may be a link)
    assert f"python is {BIN.resolve()}/python\n" in result.stdout
    assert on_one_node(result.stdout) == (ranks, list(range(ranks)))  # whichever node was free
    assert job_end(result)["state"] == "COMPLETED"


@on_each_cluster()
def test_the_job_activates_its_own_environment(cluster):
    result = cluster.submit("slurm/environment.sbatch", world_size=2,
                            workdir=cluster.folder("environment"),
                            sbatch_args=cluster.shape(nodes=1, gpus_per_node=2))
    if not cluster.real:
        check_output(result)
    assert_the_job_used_its_own_environment(result, 2)
    assert backend(result.stdout) == cluster.backend
