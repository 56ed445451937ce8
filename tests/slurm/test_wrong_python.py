"""snippets/slurm/wrong_python.sbatch, shown on docs/slurm/pitfalls.md.

Submitted from a shell where the virtual environment that has torch is not active: the
job finds another python3 on the PATH, one without torch, and fails.
"""

import re

import pytest

from harness.outputs import check_output
from tests.slurm.jobs import job_end, submit

pytestmark = pytest.mark.slurm


def test_without_the_virtual_environment_there_is_no_torch():
    result = submit("slurm/wrong_python.sbatch", activate=False, check=False)
    # srun's own line and the task's traceback reach the job's output file in either order
    assert re.search(r"^srun: error: node[12]: task 0: Exited with exit code 1$", result.stdout,
                     re.M)
    check_output(result)
    assert "ModuleNotFoundError: No module named 'torch'" in result.stdout
    assert job_end(result) == {"state": "FAILED", "exit code": "1:0", "restarts": 0}
    assert result.returncode == 1
