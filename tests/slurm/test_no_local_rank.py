"""snippets/slurm/no_local_rank.sbatch, shown on docs/slurm/pitfalls.md.

Submitted as it is: one node, 2 tasks. Plain srun sets SLURM_LOCALID in each task but
neither LOCAL_RANK nor RANK, so code that reads os.environ["LOCAL_RANK"] fails with a
KeyError and the job fails. On a GPU cluster, the same test with 2 GPUs of one node
(tests/slurm/clusters.py).
"""

import re

from harness.outputs import check_output
from tests.slurm.clusters import on_each_cluster
from tests.slurm.jobs import job_end

SNIPPET = "slurm/no_local_rank.sbatch"


def assert_srun_set_no_local_rank(result) -> None:
    assert re.findall(r"^task (\d+): SLURM_LOCALID=(\d+), LOCAL_RANK=not set, RANK=not set$",
                      result.stdout, re.M) == [("0", "0"), ("1", "1")]
    assert "KeyError: 'LOCAL_RANK'" in result.stdout
    # srun's own line and the task's traceback reach the job's output file in either order
    assert re.search(r"^srun: error: \S+: task 0: Exited with exit code 1$", result.stdout, re.M)
    assert job_end(result) == {"state": "FAILED", "exit code": "1:0", "restarts": 0}


@on_each_cluster()
def test_srun_sets_slurm_localid_but_no_local_rank(cluster):
    result = cluster.submit(SNIPPET, files=(), check=False,
                            sbatch_args=cluster.shape(nodes=1, gpus_per_node=2))
    if not cluster.real:
        check_output(result)
    assert_srun_set_no_local_rank(result)
