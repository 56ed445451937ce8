"""The job every training job of docs/slurm is compared with: one node, 4 processes."""

import pytest

from harness.launch import shared
from tests.slurm.jobs import submit


@shared
def _one_node_job():
    return submit("slurm/one_node.sbatch", world_size=4)


@pytest.fixture(scope="session")
def one_node_job(slurm_cluster):
    """snippets/slurm/one_node.sbatch, run once in the session: srun, one task per GPU,
    world size 4."""
    return _one_node_job()
