"""snippets/recipes/silent_job.sbatch and silent_job.py, shown on
docs/recipes/silent_job.md: the job script as the page shows it, on both nodes of the
local cluster (one task per GPU), run beside silent_job_buffered.sbatch
(tests/recipes/silent_jobs.py). It waits outside any collective until Slurm stops it at
its time limit; every line it printed before is in its output file, because its job
script, not the environment it was submitted from, set PYTHONUNBUFFERED. The script
itself also runs under srun's variables on every device, with the file it waits for
present: it then finishes.
"""

import re

import pytest

from harness.launch import run, snippet
from harness.outputs import check_output, check_text
from tests.devices import on_each_device
from tests.recipes import silent_jobs
from tests.recipes.silent_jobs import RANKS, both_jobs, started_lines
from tests.slurm.jobs import job_end, run_seconds

JOB = "recipes/silent_job.sbatch"
SCRIPT = "recipes/silent_job.py"  # what the job runs
assert (JOB, SCRIPT) == (silent_jobs.JOB, silent_jobs.SCRIPT)
WAITS_FOR = "data/next_shard.pt"  # what the job script's srun line waits for
STEPS = [str(step) for step in range(5)]  # silent_job.py's --steps


def srun_arguments(job: str) -> list[str]:
    """The arguments of silent_job.py on the srun line of the job script ``job``."""
    line = re.search(r"(?m)^srun python silent_job\.py (.*)$", snippet(job).read_text())
    return line[1].split()


@pytest.mark.slurm
def test_every_line_printed_before_the_time_limit_is_in_the_output_file():
    job = both_jobs()["unbuffered"]
    result = job.result
    assert job_end(result)["state"] == "TIMEOUT", result.report()
    assert run_seconds(result) >= 60  # its time limit, one minute
    # the job inherited no PYTHONUNBUFFERED; its job script's export reached every task
    assert job.script_env is None and job.task_env == ["1"] * RANKS, job
    assert result.ranks_started == set(range(RANKS)), result.report()
    assert started_lines(result.stdout) == {
        "before init_process_group": set(range(RANKS)),
        f"after init_process_group, world size {RANKS}": set(range(RANKS))}
    assert re.match(r"Starting job \d+ on node\[1-2\] at \d\d:\d\d:\d\d\n", result.stdout)
    # every line rank 0 printed, the last one included; not one line after it
    assert re.findall(r"(?m)^step (\d+): loss \d+\.\d+$", result.stdout) == STEPS
    assert result.stdout.endswith(f"waiting for {WAITS_FOR}\n"), result.stdout
    # Slurm stopped it at its time limit; no collective timed out (no Python error)
    assert re.search(r"\*\*\* JOB \d+ ON node[12] CANCELLED AT \S+ DUE TO TIME LIMIT \*\*\*",
                     job.err), job.err
    assert "Error" not in job.err and "Traceback" not in job.err, job.err
    assert re.search(r"JobState=TIMEOUT Reason=TimeLimit", job.state), job.state
    check_output(result)
    check_text(job.err, JOB, "err",
               command=[*result.command, f"cat silent_job-{job.job_id}.err"])
    check_text(job.state, JOB, "state", command=[*result.command, job.state_command])


@on_each_device(gpus=2, one_gpu=True)
def test_with_the_file_there_every_rank_goes_on_and_finishes(device, tmp_path):
    """The srun line of JOB, with srun's variables (SLURM_PROCID...) on this machine, in a
    folder where the file it waits for exists: every rank joins, trains and ends."""
    ranks = device.ranks(2)
    (tmp_path / WAITS_FOR).parent.mkdir()
    (tmp_path / WAITS_FOR).touch()
    result = run(SCRIPT, *srun_arguments(JOB), launcher="srun-env", nproc=ranks,
                 env=device.env(), workdir=tmp_path, timeout=180)
    device.assert_ran(ranks, result=result)
    lines = started_lines(result.text)
    assert lines == {"before init_process_group": set(range(ranks)),
                     f"after init_process_group, world size {ranks}": set(range(ranks))}
    assert re.findall(r"(?m)^step (\d+): loss", result.stdout) == STEPS
    assert result.stdout.endswith(f"waiting for {WAITS_FOR}\ndone\n"), result.stdout
