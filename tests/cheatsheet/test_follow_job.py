"""snippets/cheatsheet/follow_job.sh, shown on docs/cheatsheet.md.

Run with bash on the local cluster, as on a login node: the job it submits is listed by
squeue, has one node, and is CANCELLED after scancel. On a GPU cluster, the same test
against the cluster the tests run in, from outside their job (tests/slurm/clusters.py).
"""

import re

from harness.launch import run
from harness.outputs import check_output
from tests.slurm.clusters import on_each_cluster

SNIPPET = "cheatsheet/follow_job.sh"


def assert_submitted_listed_cancelled(result) -> None:
    jobid = re.search(r"^submitted job (\d+)$", result.stdout, re.M)
    assert jobid, result.stdout
    assert re.search(rf"^sleeper, job {jobid[1]}$", result.stdout, re.M)  # squeue listed it
    assert result.stdout.endswith("NumNodes=1\nJobState=CANCELLED\n"), result.stdout


@on_each_cluster()
def test_a_job_is_submitted_listed_and_cancelled(cluster, monkeypatch):
    cluster.use(monkeypatch)
    result = run(SNIPPET, launcher=cluster.launcher("bash"), world_size=0,
                 timeout=cluster.pick(120, 600))
    if not cluster.real:
        check_output(result)
    assert_submitted_listed_cancelled(result)
