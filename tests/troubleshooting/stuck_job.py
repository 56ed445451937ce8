"""The job of docs/troubleshooting/many_nodes.md that hangs on purpose, and the stacks of
its ranks, for tests/troubleshooting/test_hang.py and test_dump_stacks.py.

hang.sbatch is submitted as a reader submits it; while it runs, dump_stacks.sh is run
with the job's id, as a reader runs it from a login node, until every rank is stuck where
hang.py's bug leaves it; then the job is cancelled. Both test files read the same job,
run once in the test session.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from harness.launch import BIN, Result, shared, snippet
from harness.slurm import job_info, jobs_in
from tests.on_gpus import NcclLogs
from tests.slurm.jobs import GPUS, submit
from tests.slurm.real_cluster import (TIMEOUT, RealCluster, job_folder, login_environment,
                                      submit_real)

JOB = "troubleshooting/hang.sbatch"
DUMP = "troubleshooting/dump_stacks.sh"
SKIPPING_RANK = 1  # hang.py's --skip-rank


@dataclass
class Stuck:
    job: Result  # the job, cancelled: its output file on stdout
    job_id: str
    dump: str  # what dump_stacks.sh printed the last time (every rank stuck)
    dumps: int  # how many times it ran until then
    stacks: dict[int, tuple[str, list[str]]]  # rank: (node, functions, innermost first)
    nccl: NcclLogs | None = None  # on a GPU cluster: NCCL's logs of the ranks


def stacks(dump: str) -> dict[int, tuple[str, list[str]]]:
    """Rank: (node, the functions of its main thread, innermost first), from a dump."""
    found = {}
    for block in re.split(r"(?m)^(?= *\d+: rank \d+ on )", dump):
        head = re.match(r" *\d+: rank (\d+) on (\S+), pid \d+:", block)
        if head:  # srun's label, and py-spy's indent of 4 spaces: "0:     all_reduce ("
            functions = re.findall(r"(?m)^ *\d+: {5}(\S+) \(", block)
            found[int(head[1])] = (head[2], functions)
    return found


def every_rank_stuck(found: dict, world_size: int) -> bool:
    """Every rank found; all but one in average_loss, that one in save_checkpoint."""
    if sorted(found) != list(range(world_size)):
        return False
    return all(("save_checkpoint" if rank == SKIPPING_RANK else "average_loss") in functions
               for rank, (_, functions) in found.items())


def every_rank_started(job_id: str, world_size: int) -> bool:
    """Every rank printed its first line, and rank 0 the loss of the last step but one."""
    output = Path(job_info(job_id).get("StdOut", ""))
    text = output.read_text() if output.is_file() else ""
    started = set(re.findall(r"(?m)^ *\d+: rank (\d+) of ", text))
    return len(started) == world_size and re.search(r"(?m)^ *0: step 3: ", text) is not None


def dump_stacks(job_id: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``bash dump_stacks.sh JOBID`` from a shell where the tests' environment is active."""
    path = [str(BIN), *os.environ.get("PATH", "").split(os.pathsep)]
    return subprocess.run(["bash", str(snippet(DUMP)), job_id], capture_output=True,
                          text=True, timeout=120,
                          env={**env, "PATH": os.pathsep.join(path)})


def hang_and_dump(submit: Callable[..., Result], workdir: Path, world_size: int,
                  env: dict[str, str] | None = None, timeout: float = 300) -> Stuck:
    """Submit hang.sbatch from ``workdir``; dump the stacks until every rank is stuck;
    cancel the job (always) and wait for its end."""
    env = dict(os.environ if env is None else env)
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(submit, JOB, files=("troubleshooting/hang.py",),
                              workdir=workdir, timeout=timeout, check=False)
        job_id, dump, dumps = None, None, 0
        deadline = time.monotonic() + timeout
        try:
            while not (jobs := jobs_in(workdir)):
                assert not running.done(), running.result().report()
                assert time.monotonic() < deadline, f"no job from {workdir}"
                time.sleep(0.2)
            job_id = jobs[0]
            while not every_rank_started(job_id, world_size):
                assert not running.done(), running.result().report()
                assert time.monotonic() < deadline, f"job {job_id}: not every rank started"
                time.sleep(0.5)
            while True:
                done = dump_stacks(job_id, env)
                dumps += 1
                dump = done.stdout
                if every_rank_stuck(stacks(dump), world_size):
                    break
                assert not running.done(), f"{running.result().report()}\n{dump}"
                assert time.monotonic() < deadline, (
                    f"the ranks of job {job_id} were not all stuck within {timeout} s; "
                    f"last dump:\n{dump}\n{done.stderr}")
                time.sleep(2)
        finally:
            if job_id:
                subprocess.run(["scancel", job_id], timeout=30, env=env)
        result = running.result()
    return Stuck(result, job_id, dump, dumps, stacks(dump))


@shared
def on_the_local_cluster() -> Stuck:
    """The job on both nodes of the local cluster, as the page shows it: one task per
    GPU of the profile's nodes. Run once in the test session."""
    return hang_and_dump(submit, Path(tempfile.mkdtemp(prefix="hang-")), 2 * GPUS)


@shared
def on_a_gpu_cluster(cluster: RealCluster) -> Stuck:
    """The job on the GPU cluster the tests run in: its nodes, one task per GPU, each
    writing NCCL's log."""
    world_size = cluster.nodes * cluster.gpus_per_node
    folder = job_folder("hang")
    logs = NcclLogs(folder / "nccl-logs")  # where every node sees it
    stuck = hang_and_dump(functools.partial(submit_real, cluster, sbatch_args=cluster.shape(),
                                            env=logs.env),
                          folder, world_size, env=login_environment(), timeout=TIMEOUT)
    return dataclasses.replace(stuck, nccl=logs)


def on(cluster) -> Stuck:
    """The job on the test's cluster (tests/slurm/clusters.py), run once in the session."""
    return on_a_gpu_cluster(cluster) if cluster.real else on_the_local_cluster()


#: How the page tells the reader to read an output file of ``srun --label``.
SORT = "sort --stable --numeric-sort"


def by_rank(output: str) -> str:
    """The lines of a job's output grouped by rank (:data:`SORT`)."""
    return subprocess.run(SORT.split(), input=output, capture_output=True, text=True,
                          check=True).stdout
