"""snippets/troubleshooting/hang.sbatch and hang.py, shown on
docs/troubleshooting/many_nodes.md: a job that hangs on purpose, on both nodes of the
local cluster as the page shows it (one task per GPU); it is cancelled once dump_stacks.sh has seen every
rank stuck (tests/troubleshooting/stuck_job.py). On a GPU cluster, the same test on its
nodes (tests/slurm/clusters.py).
"""

import re

from harness.launch import Result, run
from harness.outputs import check_text
from tests.compare import saved_from
from tests.devices import on_each_device
from tests.slurm.clusters import on_each_cluster
from tests.slurm.jobs import job_end
from tests.slurm.started_by import assert_stopped_with_one_line
from tests.troubleshooting import stuck_job
from tests.troubleshooting.common import check_errors, error_lines
from tests.troubleshooting.stuck_job import SKIPPING_RANK, SORT, by_rank

JOB = "troubleshooting/hang.sbatch"
SCRIPT = "troubleshooting/hang.py"  # what the job runs
assert stuck_job.JOB == JOB


def assert_hung_until_cancelled(stuck, world_size: int, steps: int = 5):
    """Every rank started and labelled its lines; rank 0 logged every step but the
    last, which rank SKIPPING_RANK skipped; nobody saved; the job ended cancelled."""
    result = stuck.job
    assert job_end(result)["state"] == "CANCELLED", result.report()
    assert result.ranks_started == set(range(world_size)), result.report()
    started = re.findall(r"(?m)^ *(\d+): rank (\d+) of (\d+) on \S+, pid \d+$", result.stdout)
    assert sorted((int(label), int(rank), int(size)) for label, rank, size in started) == [
        (rank, rank, world_size) for rank in range(world_size)], result.stdout
    logged = re.findall(r"(?m)^ *0: step (\d+): mean loss", result.stdout)
    assert logged == [str(step) for step in range(steps - 1)], result.stdout
    assert "saved" not in result.stdout and SKIPPING_RANK != 0


def test_in_the_job_script_without_srun_it_stops_at_once_with_one_line():
    """The job script has SLURM_PROCID=0 and SLURM_NTASKS too, but no job step
    (harness/slurm_env.py): hang.py does not wait there for ranks that never come."""
    assert_stopped_with_one_line(run(SCRIPT, launcher="started-by", world_size=0,
                                     check=False, timeout=60))


@on_each_cluster()
def test_the_job_hangs_until_cancelled_and_every_line_names_its_rank(cluster, monkeypatch):
    cluster.use(monkeypatch)  # the test's squeue, scontrol and scancel ask the cluster
    stuck = stuck_job.on(cluster)
    assert stuck.job.script.name == JOB.split("/")[1]
    assert_hung_until_cancelled(stuck, cluster.nodes * cluster.gpus_per_node)
    if cluster.real:
        stuck.nccl.assert_nccl_ran(cluster.nodes * cluster.gpus_per_node)  # stuck in NCCL
    else:
        check_text(by_rank(stuck.job.stdout), JOB,  # the page sorts the job's output file
                   command=[*stuck.job.command, f"{SORT} hang-{stuck.job_id}.out"])


def monitored(ranks: int, timeout: float, env=None) -> Result:
    """hang.py with a monitored barrier before each all-reduce, under torchrun on
    ``ranks`` processes."""
    return run(SCRIPT, "--monitored-barrier", "5", launcher="torchrun", nproc=ranks,
               timeout=timeout, check=False, env=env)


def assert_named_the_missing_rank(result: Result) -> list[str]:
    """Rank 0 logged steps 0 to 3, then failed naming rank 1; returns that line."""
    assert not result.timed_out and result.returncode != 0, result.report()
    assert re.findall(r"(?m)^step (\d+): ", result.stdout) == ["0", "1", "2", "3"]
    # the exception's line (rank 1, left alone, may also fail when rank 0 has gone)
    lines = [line for line in error_lines(result) if "monitoredBarrier" in line]
    assert lines == ["[rank0]: RuntimeError: [Rank 0]: Ranks 1 failed to pass "
                     "monitoredBarrier in 5000 ms"], result.report()
    return lines


@on_each_device(gpus=2, one_gpu=True)
def test_a_monitored_barrier_names_the_rank_that_did_not_arrive(device):
    """On GPUs too: the monitored barrier runs in its gloo group. At world size 1 (one
    GPU) rank 1, which skips, is not there: every step and the checkpoint go through."""
    ranks = device.ranks(2)
    result = monitored(ranks, timeout=300, env=device.env())
    # on GPUs, the all-reduces of the steps over NCCL (of steps 0 to 3 with 2 ranks)
    device.assert_ran(ranks, result=result)
    if ranks > 1:
        lines = assert_named_the_missing_rank(result)
        if not device.cuda:  # the pages show the CPU run
            check_errors(result, "monitor", lines)
    else:
        assert result.ok, result.report()
        assert re.search(r"(?m)^rank 0 of 1 on \S+, pid \d+$", result.stdout), result.stdout
        assert re.findall(r"(?m)^step (\d+): mean loss", result.stdout) == [
            "0", "1", "2", "3", "4"]
        assert result.stdout.endswith("saved hang.pt\n")
        assert saved_from(result.workdir / "hang.pt") == {device.pick("cpu", "cuda:0")}
