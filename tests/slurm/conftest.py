"""The jobs the training jobs of docs/slurm are compared with: one node (one process per
GPU of a node of the centre profile) and two nodes."""

import pytest

from tests.slurm.jobs import GPUS, submit


@pytest.fixture(scope="session")
def one_node_job(slurm_cluster):
    """snippets/slurm/one_node.sbatch, run once: srun, one task per GPU of one node."""
    return submit("slurm/one_node.sbatch", world_size=GPUS)


@pytest.fixture(scope="session")
def two_node_job(slurm_cluster):
    """snippets/slurm/multi_node.sbatch, run once: srun, one task per GPU of two nodes."""
    return submit("slurm/multi_node.sbatch", world_size=2 * GPUS)
