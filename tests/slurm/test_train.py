"""snippets/slurm/train.py, which every training job of docs/slurm runs.

The jobs themselves are the tests of the job scripts; here, which variables it reads
its rank from in each way of starting it inside a job (harness/slurm_env.py), and
the promise of docs/slurm/preemption.md that a process killed while it writes a
checkpoint leaves the previous checkpoint whole, and that a checkpoint of another model
(another job's, in the same folder) stops the training with one line that says what to
do. On 2 GPUs, the same with NCCL, whose barrier must be told the process's GPU.
"""

from pathlib import Path

import pytest
import torch

from harness.launch import run, snippet
from harness.outputs import BARRIER_WARNING
from harness.slurm_env import SRUN_OR_TORCHRUN
from tests.compare import load, saved_from
from tests.devices import on_each_device
from tests.slurm.jobs import backend
from tests.slurm.started_by import assert_reads_its_launcher

HELPER = Path(__file__).with_name("kill_during_save.py")


def test_a_kill_while_saving_leaves_the_previous_checkpoint_intact(tmp_path):
    result = run(HELPER, str(snippet("slurm/train.py")), world_size=1, workdir=tmp_path,
                 check=False)
    assert result.returncode == -9, result.report()  # SIGKILL
    assert result.stdout == "saved step 1\nwrote half of checkpoint.pt.tmp, killed\n"
    state = load(tmp_path / "checkpoint.pt")
    assert state["step"] == 1
    with pytest.raises(Exception):  # what saving in place would have left behind
        load(tmp_path / "checkpoint.pt.tmp")


@pytest.mark.parametrize("started_by", SRUN_OR_TORCHRUN)
def test_it_reads_the_rank_of_srun_or_torchrun_and_stops_in_the_job_script(started_by,
                                                                           monkeypatch):
    """Slurm's variables only in a task of srun: the job script has SLURM_PROCID=0 too."""
    assert_reads_its_launcher("slurm/train.py", started_by, monkeypatch)


def refuse_another_models_checkpoint(folder, ranks=2):
    """train.py with 16 hidden units, then with 32 in the same folder, on ``ranks``
    processes; both runs."""
    first = run("slurm/train.py", "--epochs", "1", "--hidden", "16", launcher="torchrun",
                nproc=ranks, workdir=folder)
    steps = 1024 // (32 * ranks)  # an epoch of 1024 samples, 32 per process and step
    assert f"done: {steps} steps, final model in checkpoint.pt" in first.stdout
    other = run("slurm/train.py", "--epochs", "1", "--hidden", "32", launcher="torchrun",
                nproc=ranks, workdir=folder, check=False)
    assert other.returncode != 0
    said = [line for line in other.text.splitlines() if line.startswith("train.py: ")]
    assert said == [
        "train.py: checkpoint.pt holds train.py's model (features 20, hidden 16, classes 4), "
        "not train.py's model (features 20, hidden 32, classes 4): give this job its own "
        "--checkpoint file, or delete checkpoint.pt to start afresh"]
    assert "size mismatch" not in other.text and " loss " not in other.text
    state = load(folder / "checkpoint.pt")
    assert state["config"]["hidden"] == 16
    return first, other


@on_each_device(gpus=2, one_gpu=True)
def test_a_checkpoint_of_another_model_stops_every_rank_with_one_line(tmp_path, device):
    """On GPUs the same with NCCL, whose barrier must be told the process's GPU; rank 0
    saves its model from cuda:0."""
    first, _ = refuse_another_models_checkpoint(tmp_path, device.ranks(2))
    if device.cuda:
        assert backend(first.stdout) == "nccl on cuda"
        assert BARRIER_WARNING not in first.text
        assert saved_from(tmp_path / "checkpoint.pt") == {"cuda:0"}


def test_a_checkpoint_that_records_no_model_is_not_resumed_either(tmp_path):
    torch.save({"model": {}, "optimizer": {}, "step": 3}, tmp_path / "checkpoint.pt")
    result = run("slurm/train.py", "--epochs", "1", launcher="torchrun", nproc=1,
                 workdir=tmp_path, check=False)
    assert result.returncode != 0
    assert ("train.py: checkpoint.pt holds a model it does not describe, not train.py's "
            "model (features 20, hidden 64, classes 4):") in result.text
