"""snippets/slurm/train_shards.py, which the data-staging job of docs/slurm/data.md runs.

Here it is started by torchrun on one machine, from a folder of shards it wrote itself:
each rank reads its own whole shard files, every sample once, and training converges.
The staging job (tests/slurm/test_stage_data.py) runs it on two nodes of the local
cluster.
"""

import pytest

from harness.launch import run
from harness.slurm_env import SRUN_OR_TORCHRUN
from tests.compare import load, saved_from
from tests.devices import on_each_device
from tests.killed_save import assert_only_plain_save_breaks, run_killed
from tests.slurm.shards import SHARDS, SNIPPET, assert_trained, make_shards, reads
from tests.slurm.started_by import assert_reads_its_launcher


@pytest.mark.parametrize("started_by", SRUN_OR_TORCHRUN)
def test_it_reads_the_rank_of_srun_or_torchrun_and_stops_in_the_job_script(started_by,
                                                                           monkeypatch):
    """Slurm's variables only in a task of srun: the job script has SLURM_PROCID=0 too
    (harness/slurm_env.py)."""
    assert_reads_its_launcher(SNIPPET, started_by, monkeypatch)


def test_without_its_data_it_says_what_to_give():
    result = run(SNIPPET, launcher="torchrun", nproc=1, world_size=0, check=False)
    assert result.returncode != 0
    assert "error: give --data DIR (or --make-shards DIR to write the example data)" in result.text


@on_each_device(gpus=2, one_gpu=True)
def test_each_rank_reads_its_own_shards(tmp_path, device):
    """On GPUs over NCCL, each rank on its own GPU; rank 0 saves its model from cuda:0. On
    one GPU the only rank reads every shard."""
    ranks = device.ranks(2)
    assert make_shards(tmp_path) == SHARDS
    result = run(SNIPPET, "--data", "project/shards", launcher="torchrun", nproc=ranks,
                 workdir=tmp_path, env=device.env())
    device.assert_ran(ranks, result=result)
    assert_trained(result.stdout, ranks)
    assert [r[3] for r in reads(result.stdout)] == [SHARDS[r::ranks] for r in range(ranks)]
    assert load(tmp_path / "checkpoint.pt")
    if device.cuda:
        assert saved_from(tmp_path / "checkpoint.pt") == {"cuda:0"}


def test_a_kill_while_saving_keeps_the_last_checkpoint(tmp_path):
    """A second run, killed by SIGKILL halfway through writing its checkpoint, leaves the
    first run's checkpoint as it was, and it loads; a third run replaces it. The same
    kill in a copy that saves with a plain torch.save leaves a checkpoint that does not
    load."""
    make_shards(tmp_path)
    data = ("--data", "project/shards")
    run(SNIPPET, *data, "--epochs", "1", launcher="torchrun", nproc=2, workdir=tmp_path)
    first = (tmp_path / "checkpoint.pt").read_bytes()
    run_killed(SNIPPET, 1, *data, workdir=tmp_path, launcher="torchrun", nproc=2)
    assert (tmp_path / "checkpoint.pt.tmp").exists()  # the half-written one
    assert (tmp_path / "checkpoint.pt").read_bytes() == first
    assert load(tmp_path / "checkpoint.pt")
    again = run(SNIPPET, *data, launcher="torchrun", nproc=2, workdir=tmp_path)
    assert "saved checkpoint.pt" in again.stdout
    assert (tmp_path / "checkpoint.pt").read_bytes() != first
    assert not (tmp_path / "checkpoint.pt.tmp").exists()
    assert_only_plain_save_breaks(SNIPPET, "checkpoint.pt", 1, *data, folder=tmp_path,
                                  launcher="torchrun", nproc=2)
