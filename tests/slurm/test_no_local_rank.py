"""snippets/slurm/no_local_rank.sbatch, shown on docs/slurm/pitfalls.md.

Submitted as it is: one node, 2 tasks. Plain srun sets SLURM_LOCALID in each task but
neither LOCAL_RANK nor RANK, so code that reads os.environ["LOCAL_RANK"] fails with a
KeyError and the job fails. On a GPU cluster, the same with 2 GPUs of one node.
"""

import re

import pytest

from harness.outputs import check_output
from tests.slurm.jobs import job_end, submit
from tests.slurm.real_cluster import on_the_gpu_cluster, real_cluster, submit_real

SNIPPET = "slurm/no_local_rank.sbatch"


def assert_srun_set_no_local_rank(result) -> None:
    assert re.findall(r"^task (\d+): SLURM_LOCALID=(\d+), LOCAL_RANK=not set, RANK=not set$",
                      result.stdout, re.M) == [("0", "0"), ("1", "1")]
    assert "KeyError: 'LOCAL_RANK'" in result.stdout
    # srun's own line and the task's traceback reach the job's output file in either order
    assert re.search(r"^srun: error: \S+: task 0: Exited with exit code 1$", result.stdout, re.M)
    assert job_end(result) == {"state": "FAILED", "exit code": "1:0", "restarts": 0}


@pytest.mark.slurm
def test_srun_sets_slurm_localid_but_no_local_rank():
    result = submit(SNIPPET, files=(), check=False)
    check_output(result)
    assert_srun_set_no_local_rank(result)


@on_the_gpu_cluster()
def test_on_a_gpu_cluster():
    cluster = real_cluster()
    result = submit_real(cluster, SNIPPET, files=(), check=False,
                         sbatch_args=cluster.shape(nodes=1, gpus_per_node=2))
    assert_srun_set_no_local_rank(result)
