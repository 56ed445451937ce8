"""snippets/cheatsheet/follow_job.sh, shown on docs/cheatsheet.md.

Run with bash on the local cluster, as on a login node: the job it submits is listed by
squeue, has one node, and is CANCELLED after scancel. On a GPU cluster, the same against
the cluster the tests run in, from outside their job.
"""

import re

import pytest

from harness.launch import run
from harness.outputs import check_output
from tests.slurm.real_cluster import on_the_gpu_cluster, real_cluster

SNIPPET = "cheatsheet/follow_job.sh"


def assert_submitted_listed_cancelled(result) -> None:
    jobid = re.search(r"^submitted job (\d+)$", result.stdout, re.M)
    assert jobid, result.stdout
    assert re.search(rf"^sleeper, job {jobid[1]}$", result.stdout, re.M)  # squeue listed it
    assert result.stdout.endswith("NumNodes=1\nJobState=CANCELLED\n"), result.stdout


@pytest.mark.slurm
def test_a_job_is_submitted_listed_and_cancelled(slurm_cluster):
    result = run(SNIPPET, launcher="bash", world_size=0, timeout=120)
    check_output(result)
    assert_submitted_listed_cancelled(result)


@on_the_gpu_cluster()
def test_on_a_gpu_cluster(monkeypatch):
    cluster = real_cluster()
    cluster.use(monkeypatch)
    result = run(SNIPPET, launcher="real-bash", world_size=0, timeout=600)
    assert_submitted_listed_cancelled(result)
