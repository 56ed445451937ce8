"""snippets/slurm/no_launcher.sbatch, shown on docs/slurm/pitfalls.md: a job script that
runs train.py with python alone, without srun, torchrun or mpirun.

Submitted as it is: one node, one task per GPU. The batch script runs train.py once.
Slurm sets SLURM_PROCID=0 and SLURM_NTASKS there too, but no SLURM_STEP_ID
(harness/slurm_env.py), so train.py stops at once with one line, and the job fails,
where it used to wait for ranks that never come (or, with one task, to train alone). The
same job with the train.py of docs/ddp/code_changes.md stops with that script's line for
a job script, which the page shows. On a GPU cluster, the first test runs on the GPUs
of one node too (tests/slurm/clusters.py; there is no GPU path to check: the job stops
before anything touches a GPU).
"""

import pytest

from harness.outputs import check_output, check_text
from tests.slurm.clusters import on_each_cluster
from tests.slurm.jobs import job_end, run_seconds, submit

SNIPPET = "slurm/no_launcher.sbatch"
#: Seconds within which the job must have ended, once running (not counting the queue):
#: train.py waits 5 minutes for missing ranks.
AT_ONCE = 60


def assert_stopped_at_once(result) -> str:
    """The job failed within AT_ONCE seconds, its output one line from train.py that tells
    how to start it in a job script; return the line."""
    assert job_end(result) == {"state": "FAILED", "exit code": "1:0", "restarts": 0}
    assert run_seconds(result) < AT_ONCE, result.report()
    assert result.stdout.count("\n") == 1, result.report()
    line = result.stdout.strip()
    assert line.startswith("train.py: ") and "srun python train.py" in line, line
    return line


@on_each_cluster()
def test_python_in_the_job_script_stops_at_once_with_one_line(cluster):
    result = cluster.submit(SNIPPET, check=False, sbatch_args=cluster.shape(nodes=1))
    if not cluster.real:
        check_output(result)
    assert_stopped_at_once(result)


@pytest.mark.slurm
def test_the_ddp_chapters_train_py_stops_too():
    result = submit(SNIPPET, files=("ddp/train.py",), check=False)
    line = assert_stopped_at_once(result)
    assert "the job script ran it without a launcher" in line
    check_text(line + "\n", "ddp/train.py", "job-script", command=result.command)
