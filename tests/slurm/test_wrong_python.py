"""snippets/slurm/wrong_python.sbatch, shown on docs/slurm/pitfalls.md.

Submitted from a shell where the virtual environment that has torch is not active: the
job finds another python3 on the PATH, one without torch, and fails. On a GPU cluster,
the same test with a GPU so that a GPU partition takes the job, where the python3 found
without the virtual environment has no torch either (a loaded module may provide one;
tests/slurm/clusters.py).
"""

import re
import shutil
import subprocess

import pytest

from harness.outputs import check_output
from harness.launch import shell
from tests.slurm.clusters import on_each_cluster
from tests.slurm.jobs import job_end


def assert_there_was_no_torch(result) -> None:
    # srun's own line and the task's traceback reach the job's output file in either order
    assert re.search(r"^srun: error: \S+: task 0: Exited with exit code 1$", result.stdout, re.M)
    assert "ModuleNotFoundError: No module named 'torch'" in result.stdout
    assert job_end(result) == {"state": "FAILED", "exit code": "1:0", "restarts": 0}
    assert result.returncode == 1


@on_each_cluster()
def test_without_the_virtual_environment_there_is_no_torch(cluster):
    if cluster.real:  # where a loaded module may give the python3 found without it torch
        python3 = shutil.which("python3", path=shell(activate=False)["PATH"])
        if python3 and subprocess.run([python3, "-c", "import torch"], capture_output=True,
                                      timeout=300).returncode == 0:
            pytest.skip(f"{python3}, found without the virtual environment, has torch here")
    result = cluster.submit("slurm/wrong_python.sbatch", activate=False, check=False,
                            sbatch_args=cluster.pick([], ["--gpus-per-node=1"]))
    if not cluster.real:
        assert re.search(r"^srun: error: node[12]: task 0: Exited with exit code 1$",
                         result.stdout, re.M)
        check_output(result)
    assert_there_was_no_torch(result)
