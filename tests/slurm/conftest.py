"""The jobs the training jobs of docs/slurm are compared with: one node (one process per
GPU of a node of the centre profile) and two nodes. Each runs once in the test session."""

import pytest

from harness.launch import shared
from tests.slurm.jobs import GPUS, submit


@shared
def _submit(script: str, world_size: int):
    return submit(script, world_size=world_size)


@pytest.fixture(scope="session")
def one_node_job(slurm_cluster):
    """snippets/slurm/one_node.sbatch: srun, one task per GPU of one node."""
    return _submit("slurm/one_node.sbatch", GPUS)


@pytest.fixture(scope="session")
def two_node_job(slurm_cluster):
    """snippets/slurm/multi_node.sbatch: srun, one task per GPU of two nodes."""
    return _submit("slurm/multi_node.sbatch", 2 * GPUS)
