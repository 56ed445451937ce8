"""snippets/slurm/environment.sbatch, shown on docs/slurm/environment.md.

Submitted from a shell where no virtual environment is active, from a folder that holds
train.py and the virtual environment .venv (here, a link to the one the tests use):
the job activates it itself, and trains. On a GPU cluster, the same, with 2 GPUs.
"""

import pytest

from harness.launch import BIN
from harness.outputs import check_output
from tests.slurm.jobs import backend, job_end, on_one_node, submit
from tests.slurm.real_cluster import job_folder, on_the_gpu_cluster, real_cluster, submit_real


def assert_the_job_used_its_own_environment(result, ranks: int) -> None:
    # activate names the environment by the path it was made at (.venv may be a link)
    assert f"python is {BIN.resolve()}/python\n" in result.stdout
    assert on_one_node(result.stdout) == (ranks, list(range(ranks)))  # whichever node was free
    assert job_end(result)["state"] == "COMPLETED"


@pytest.mark.slurm
def test_the_job_activates_its_own_environment(tmp_path):
    (tmp_path / ".venv").symlink_to(BIN.parent)
    result = submit("slurm/environment.sbatch", world_size=2, activate=False, workdir=tmp_path)
    check_output(result)
    assert_the_job_used_its_own_environment(result, 2)


@on_the_gpu_cluster()
def test_on_a_gpu_cluster():
    cluster = real_cluster()
    folder = job_folder("environment")
    (folder / ".venv").symlink_to(BIN.parent)
    result = submit_real(cluster, "slurm/environment.sbatch", world_size=2, activate=False,
                         workdir=folder,
                         sbatch_args=cluster.shape(nodes=1, gpus_per_node=2))
    assert_the_job_used_its_own_environment(result, 2)
    assert backend(result.stdout) == "nccl on cuda"
