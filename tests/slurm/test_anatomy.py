"""snippets/slurm/anatomy.sbatch, shown on docs/slurm/anatomy.md: one task per GPU.

Submitted as it is: 2 nodes, 4 tasks and 4 GPUs per node, 8 cores per task. With
SLURM_DEBUG, srun says how many CPUs it asks for: the 8 cores of each of its 8 tasks,
which Slurm 22.05 (installed here) gives only if the script passes them on.
"""

import pytest

from harness.outputs import check_output
from tests.slurm.jobs import SRUN_DEBUG, srun_steps, submit, whereami

pytestmark = pytest.mark.slurm


def test_srun_starts_one_process_per_gpu_numbered_node_by_node():
    result = submit("slurm/anatomy.sbatch", files=("slurm/whereami.py",), env=SRUN_DEBUG)
    check_output(result)
    assert whereami(result.stdout) == [
        (rank, 8, f"node{rank // 4 + 1}", rank % 4, rank % 4, "0,1,2,3", "8")
        for rank in range(8)]
    assert srun_steps(result) == [(8 * 8, 8)]  # not (8, 8): one core per task
