"""snippets/recipes/silent_job_buffered.sbatch, shown on docs/recipes/silent_job.md:
silent_job.sbatch without its PYTHONUNBUFFERED=1, on both nodes of the local cluster,
run beside it (tests/recipes/silent_jobs.py). Neither job inherited PYTHONUNBUFFERED.
Both are stopped at their time limit; this one's output file holds only the start-up
lines silent_job.py flushes: every line rank 0 printed with a plain print() is lost.
"""

import re

import pytest

from harness.outputs import check_output
from tests.recipes.silent_jobs import BUFFERED, RANKS, both_jobs, started_lines
from tests.slurm.jobs import job_end

assert BUFFERED == "recipes/silent_job_buffered.sbatch"


@pytest.mark.slurm
def test_the_lines_still_in_python_s_buffer_are_lost_at_the_time_limit():
    jobs = both_jobs()
    job, unbuffered = jobs["buffered"], jobs["unbuffered"].result
    result = job.result
    assert job_end(result)["state"] == "TIMEOUT", result.report()
    # no PYTHONUNBUFFERED anywhere in this job: not inherited, not set by its job script
    assert job.script_env is None and job.task_env == [None] * RANKS, job
    assert result.ranks_started == set(range(RANKS)), result.report()
    # the flushed start-up lines are there, from every rank
    assert started_lines(result.stdout) == started_lines(unbuffered.stdout)
    assert started_lines(result.stdout)["before init_process_group"] == set(range(RANKS))
    # every line the other job printed with a plain print() is missing here
    printed = [line for line in unbuffered.stdout.splitlines()
               if line.startswith(("step ", "waiting for "))]
    assert len(printed) == 6, unbuffered.stdout
    assert not [line for line in printed if line in result.stdout.splitlines()]
    assert not re.search(r"(?m)^(step \d|waiting for )", result.stdout), result.stdout
    check_output(result)
