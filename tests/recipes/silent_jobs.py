"""The two jobs of docs/recipes/silent_job.md, for tests/recipes/test_silent_job.py and
test_silent_job_buffered.py: silent_job.sbatch and silent_job_buffered.sbatch, submitted
at the same time, as a reader submits them, to the local cluster. Both wait for a file
that never comes, and Slurm stops both at their time limit of one minute.

While they wait, the variables of each job's processes are read from /proc: those the
job script started with (what the job inherited from the shell that submitted it) and
those of each task srun started. Once they have ended, the job's state is asked of
Slurm, as the page asks it.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from harness.launch import Result, shared
from harness.slurm import jobs_in, processes as slurm_processes
from tests.slurm.jobs import GPUS, submit

JOB = "recipes/silent_job.sbatch"
BUFFERED = "recipes/silent_job_buffered.sbatch"
SCRIPT = "recipes/silent_job.py"
NODES = 2  # the job scripts' --nodes
RANKS = NODES * GPUS
#: What the page types to see how a job ended, while Slurm still knows it.
STATE = "scontrol show job {} | grep -E 'JobState|ExitCode|RunTime'"


@dataclasses.dataclass
class Job:
    result: Result  # the job: its output file on stdout
    job_id: str
    err: str  # its .err file
    state: str  # what STATE printed
    state_command: str
    #: PYTHONUNBUFFERED as the job script found it, and as each task of srun had it
    #: (None: not set), read from /proc while the job ran.
    script_env: str | None
    task_env: list[str | None]


def processes(job_id: str) -> list[tuple[str, dict[str, str]]]:
    """The command line and the environment (at its start) of every process of the job."""
    return [(" ".join(argv), environ) for _, argv, environ, _ in slurm_processes()
            if environ.get("SLURM_JOB_ID") == job_id]


def watch(workdir: Path, submitted, timeout: float = 400):
    """The job's id and, once every task of its srun waits, PYTHONUNBUFFERED in the job
    script's environment and in each task's."""
    deadline = time.monotonic() + timeout
    while not (ids := jobs_in(workdir)):
        if submitted.done():
            submitted.result()
        assert time.monotonic() < deadline, f"no job from {workdir}"
        time.sleep(0.2)
    job_id = ids[0]
    while True:
        found = processes(job_id)
        script = [env for cmd, env in found if "slurm_script" in cmd]
        tasks = [env for cmd, env in found if "SLURM_STEP_ID" in env
                 and "silent_job.py" in cmd and "srun" not in cmd]
        if len(script) == 1 and len(tasks) == RANKS:
            return job_id, script[0].get("PYTHONUNBUFFERED"), [
                t.get("PYTHONUNBUFFERED") for t in tasks]
        assert not submitted.done(), f"job {job_id} ended before its {RANKS} tasks ran"
        assert time.monotonic() < deadline, f"job {job_id}: {len(tasks)} tasks seen"
        time.sleep(0.5)


def _job(script: str, workdir: Path) -> Result:
    return submit(script, files=(SCRIPT,), world_size=RANKS, timeout=400, check=False,
                  workdir=workdir)


@shared
def both_jobs() -> dict[str, Job]:
    """silent_job.sbatch ("unbuffered") and silent_job_buffered.sbatch ("buffered"),
    run at the same time; each followed to its end."""
    import tempfile

    folders = {name: Path(tempfile.mkdtemp(prefix=f"silent-{name}-"))
               for name in ("unbuffered", "buffered")}
    scripts = {"unbuffered": JOB, "buffered": BUFFERED}
    with ThreadPoolExecutor(4) as pool:  # submit both; watch each while it runs
        runs = {name: pool.submit(_job, scripts[name], folders[name]) for name in folders}
        watched = {name: pool.submit(watch, folders[name], runs[name]) for name in folders}
        seen = {name: watched[name].result() for name in folders}
        results = {name: runs[name].result() for name in folders}
    jobs = {}
    for name, result in results.items():
        job_id, script_env, task_env = seen[name]
        stem = Path(scripts[name]).stem
        command = STATE.format(job_id)
        state = subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                               timeout=30).stdout
        err = (result.workdir / f"{stem}-{job_id}.err").read_text()
        jobs[name] = Job(result, job_id, err, state, command, script_env, task_env)
    return jobs


def started_lines(stdout: str) -> dict[str, set[int]]:
    """The ranks that printed each start-up line, by what the line says."""
    found: dict[str, set[int]] = {}
    for rank, what in re.findall(r"(?m)^rank (\d+) on \S+ at \d\d:\d\d:\d\d: (.*)$", stdout):
        found.setdefault(what, set()).add(int(rank))
    return found
