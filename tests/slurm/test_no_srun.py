"""snippets/slurm/no_srun.sbatch, shown on docs/slurm/pitfalls.md: a 2-node job that
starts torchrun without srun.

Submitted as it is. The job gets both nodes, and all 4 processes run on the first.
"""

import pytest

from harness.outputs import check_output
from tests.slurm.jobs import job_end, placement, submit

pytestmark = pytest.mark.slurm


def test_only_the_first_node_works():
    result = submit("slurm/no_srun.sbatch", world_size=4)
    check_output(result)
    assert "nodes node[1-2]" in result.outputs[0].stderr  # the job had two nodes...
    assert placement(result.stdout) == (4, {"node1": [0, 1, 2, 3]})  # ...and used one
    assert job_end(result)["state"] == "COMPLETED"  # and nothing says so
