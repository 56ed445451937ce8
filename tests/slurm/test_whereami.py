"""snippets/slurm/whereami.py, shown on docs/slurm/anatomy.md.

The page's one-line try-out: srun, typed on a login node, starts the script on two
nodes with two tasks each, and each task reports its rank, node and GPUs.
"""

import pytest

from harness.launch import run
from tests.slurm.jobs import whereami

pytestmark = pytest.mark.slurm


def test_srun_on_a_login_node_starts_every_task_where_slurm_says():
    result = run("slurm/whereami.py", launcher="srun", nnodes=2, nproc=2, world_size=0,
                 srun_args=["--gpus-per-node=2"])
    rows = sorted(row[:6] for row in whereami(result.stdout))
    assert rows == [(0, 4, "node1", 0, 0, "0,1"), (1, 4, "node1", 1, 1, "0,1"),
                    (2, 4, "node2", 0, 0, "0,1"), (3, 4, "node2", 1, 1, "0,1")]
