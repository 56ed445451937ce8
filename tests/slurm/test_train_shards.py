"""snippets/slurm/train_shards.py, which the data-staging job of docs/slurm/data.md runs.

Here it is started by torchrun on one machine, from a folder of shards it wrote itself:
each rank reads its own whole shard files, every sample once, and training converges.
The staging job (tests/slurm/test_stage_data.py) runs it on two nodes of the local
cluster.
"""

import re

import pytest
import torch

from harness.launch import run
from tests.on_gpus import NcclLogs
from tests.slurm.started_by import SRUN_OR_TORCHRUN, assert_reads_its_launcher

SNIPPET = "slurm/train_shards.py"
#: The example data set: 16 shard files of 64 samples.
SHARDS = [f"shard-{i:05d}.pt" for i in range(16)]


def reads(stdout: str) -> list[tuple[int, str, int, list[str], str]]:
    """(rank, node, samples, shard names, folder) of every rank, as rank 0 printed them."""
    return [(int(rank), node, int(samples), names.split(", "), folder)
            for rank, node, samples, names, folder in re.findall(
                r"^rank (\d+) on (\S+): (\d+) samples from (.*) in (\S+)$", stdout, re.M)]


def epoch_losses(stdout: str) -> list[tuple[float, int]]:
    return [(float(loss), int(n)) for loss, n in re.findall(
        r"^epoch \d+: loss (\S+) over (\d+) samples$", stdout, re.M)]


@pytest.mark.parametrize("started_by", SRUN_OR_TORCHRUN)
def test_it_reads_the_rank_of_srun_or_torchrun_and_stops_in_the_job_script(started_by,
                                                                           monkeypatch):
    """Slurm's variables only in a task of srun: the job script has SLURM_PROCID=0 too
    (tests/slurm/started_by.py)."""
    assert_reads_its_launcher(SNIPPET, started_by, monkeypatch)


def make_shards(workdir, folder="project/shards"):
    """The example data set, written by the snippet as the page says."""
    made = run(SNIPPET, "--make-shards", folder, workdir=workdir)
    assert made.stdout.startswith("wrote 16 shards of 64 samples")
    return sorted(p.name for p in (workdir / folder).iterdir())


def assert_trained(stdout: str, world_size: int) -> None:
    """Every sample read once, by one rank; the loss fell; over all 1024 samples."""
    ranks = reads(stdout)
    assert [r[0] for r in ranks] == list(range(world_size))
    shards = [name for r in ranks for name in r[3]]
    assert sorted(shards) == SHARDS  # each once
    assert all(r[2] == 1024 // world_size for r in ranks)
    losses = epoch_losses(stdout)
    assert len(losses) == 3 and all(n == 1024 for _, n in losses)
    assert losses[-1][0] < losses[0][0]


def test_without_its_data_it_says_what_to_give():
    result = run(SNIPPET, launcher="torchrun", nproc=1, world_size=0, check=False)
    assert result.returncode != 0
    assert "error: give --data DIR (or --make-shards DIR to write the example data)" in result.text


def test_each_rank_reads_its_own_shards(tmp_path):
    assert make_shards(tmp_path) == SHARDS
    result = run(SNIPPET, "--data", "project/shards", launcher="torchrun", nproc=2,
                 workdir=tmp_path)
    assert_trained(result.stdout, 2)
    assert [r[3] for r in reads(result.stdout)] == [SHARDS[0::2], SHARDS[1::2]]
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=True)


@pytest.mark.multigpu(2)
def test_on_two_gpus(tmp_path):
    make_shards(tmp_path)
    logs = NcclLogs()
    result = run(SNIPPET, "--data", "project/shards", launcher="torchrun", nproc=2,
                 workdir=tmp_path, env=logs.env)
    logs.assert_nccl_ran(2)
    assert_trained(result.stdout, 2)
