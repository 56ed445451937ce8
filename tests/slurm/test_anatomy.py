"""snippets/slurm/anatomy.sbatch, shown on docs/slurm/anatomy.md: one task per GPU.

Submitted as it is: 2 nodes, 4 tasks and 4 GPUs per node, 8 cores per task.
"""

import pytest

from harness.outputs import check_output
from tests.slurm.jobs import submit, whereami

pytestmark = pytest.mark.slurm


def test_srun_starts_one_process_per_gpu_numbered_node_by_node():
    result = submit("slurm/anatomy.sbatch", files=("slurm/whereami.py",))
    check_output(result)
    assert whereami(result.stdout) == [
        (rank, 8, f"node{rank // 4 + 1}", rank % 4, rank % 4, "0,1,2,3", "8")
        for rank in range(8)]
