"""snippets/slurm/anatomy_torchrun.sbatch, shown on docs/slurm/anatomy.md: one torchrun
per node.

Submitted as it is: 2 nodes, one task of 32 cores and 4 GPUs per node. With SLURM_DEBUG,
srun says it asks for the 32 cores of each torchrun, whose 4 processes share them.
"""

import pytest

from harness.outputs import check_output
from tests.slurm.jobs import SRUN_DEBUG, srun_steps, submit, whereami

pytestmark = pytest.mark.slurm


def test_each_torchrun_starts_one_process_per_gpu_of_its_node():
    result = submit("slurm/anatomy_torchrun.sbatch", files=("slurm/whereami.py",),
                    env=SRUN_DEBUG)
    # The rendezvous decides which node gets ranks 0-3: not always the first.
    check_output(result)
    rows = whereami(result.stdout)
    assert [row[0] for row in rows] == list(range(8))
    assert {row[2] for row in rows[:4]} | {row[2] for row in rows[4:]} == {"node1", "node2"}
    assert len({row[2] for row in rows[:4]}) == 1 and len({row[2] for row in rows[4:]}) == 1
    assert [row[1] for row in rows] == [8] * 8
    assert [(row[3], row[4]) for row in rows] == [(rank % 4, rank % 4) for rank in range(8)]
    assert {row[5:] for row in rows} == {("0,1,2,3", "8")}
    assert srun_steps(result) == [(2 * 32, 2)]  # not (2, 2): one core for 4 processes
