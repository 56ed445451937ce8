"""snippets/slurm/environment.sbatch, shown on docs/slurm/environment.md.

Submitted from a shell where no virtual environment is active, from a folder that holds
train.py and the virtual environment .venv (here, a link to the one the tests use):
the job activates it itself, and trains.
"""

import pytest

from harness.launch import BIN
from harness.outputs import check_output
from tests.slurm.jobs import job_end, on_one_node, submit

pytestmark = pytest.mark.slurm


def test_the_job_activates_its_own_environment(tmp_path):
    (tmp_path / ".venv").symlink_to(BIN.parent)
    result = submit("slurm/environment.sbatch", world_size=2, activate=False, workdir=tmp_path)
    check_output(result)
    assert f"python is {BIN.parent}/bin/python\n" in result.stdout
    assert on_one_node(result.stdout) == (2, [0, 1])  # on whichever node was free
    assert job_end(result)["state"] == "COMPLETED"
