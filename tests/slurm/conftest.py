"""The job every training job of docs/slurm is compared with: one node, 4 processes."""

import pytest

from tests.slurm.jobs import submit


@pytest.fixture(scope="session")
def one_node_job(slurm_cluster):
    """snippets/slurm/one_node.sbatch, run once: srun, one task per GPU, world size 4."""
    return submit("slurm/one_node.sbatch", world_size=4)
