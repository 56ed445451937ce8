"""snippets/slurm/preemptible.sbatch, shown on docs/slurm/preemption.md.

Two copies of the job run side by side, with 2 tasks and 2 GPUs each. One is left alone.
The other gets, while it trains, the signal that --signal=B:USR1@300 sends 5 minutes
before the time limit (sent here at once, with scancel). It saves a checkpoint, is
requeued, resumes in its second run, and ends with exactly the model and optimiser
state of the uninterrupted job.
"""

import re
import subprocess
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from harness.outputs import check_output
from harness.slurm import job_info, jobs_in
from tests.slurm.jobs import TWO_PER_NODE, assert_same_training, job_end, losses, submit

pytestmark = pytest.mark.slurm

SCRIPT = "slurm/preemptible.sbatch"

def wait_until_training(workdir: Path, submitted: Future, timeout: float = 300) -> str:
    """The id of the job submitted from ``workdir``, once it has printed a loss."""
    deadline = time.monotonic() + timeout
    while not (jobs := jobs_in(workdir)):
        if submitted.done():
            submitted.result()  # raises the submission's failure
        assert time.monotonic() < deadline, f"no job from {workdir} within {timeout} s"
        time.sleep(0.1)
    output = Path(job_info(jobs[0])["StdOut"])
    while not (output.is_file() and " loss " in output.read_text()):
        assert not submitted.done(), f"job {jobs[0]} ended before it printed a loss"
        assert time.monotonic() < deadline, f"job {jobs[0]} printed no loss within {timeout} s"
        time.sleep(0.05)
    return jobs[0]


def test_a_signalled_job_saves_requeues_resumes_and_ends_as_if_never_stopped(tmp_path):
    alone, stopped = tmp_path / "alone", tmp_path / "stopped"
    with ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(submit, SCRIPT, world_size=2, sbatch_args=TWO_PER_NODE, workdir=d,
                            timeout=600)
                for d in (alone, stopped)]
        job = wait_until_training(stopped, runs[1])
        subprocess.run(["scancel", "--signal=USR1", "--batch", job], check=True, timeout=30)
        reference, result = (run.result() for run in runs)

    check_output(result)
    assert job_end(result) == {"state": "COMPLETED", "exit code": "0:0", "restarts": 1}
    assert job_end(reference)["restarts"] == 0
    saved = int(re.search(r"^SIGUSR1: saved checkpoint.pt at step (\d+) and stopped$",
                          result.stdout, re.M)[1])
    assert re.search(rf"^job {job}, run 2\n.*^resumed from checkpoint.pt at step {saved}$",
                     result.stdout, re.M | re.S)
    assert 0 < saved < 160
    assert "done: 160 steps" in result.stdout
    assert losses(result.stdout) == losses(reference.stdout)  # each step once, none lost
    assert_same_training(result, reference)
