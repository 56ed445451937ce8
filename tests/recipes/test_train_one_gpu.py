"""snippets/recipes/train_one_gpu.py, the single-GPU script shown on
docs/recipes/own_script.md, and the diff the page shows between it and train_ddp.py."""

import re
import shlex
import subprocess
from pathlib import Path

from harness.launch import run, snippet
from harness.outputs import check_text
from tests.compare import assert_same_state, load
from tests.devices import on_each_device
from tests.killed_save import run_killed
from tests.recipes.runs import (DDP, ONE_GPU, TRAINING, VAL_IMAGES, folder_with_data,
                                 validations)


@on_each_device(gpus=1)
def test_it_learns_saves_every_epoch_and_resumes_as_if_never_stopped(tmp_path, device):
    """It writes its stand-in data, learns, and saves every epoch. Killed while it saves
    its second checkpoint, it leaves the first whole; run again, it resumes there and
    ends with the state of the run that was never stopped: bit for bit on the CPU."""
    result = run(ONE_GPU, "--data", "images", "--epochs", "2", workdir=tmp_path, timeout=180)
    device.check_output(result, tolerance=TRAINING)
    assert result.stdout.startswith("wrote a stand-in data set to images\n")
    epochs = validations(result.stdout)
    assert [count for *_, count in epochs] == [VAL_IMAGES] * 2
    assert epochs[1][1] > epochs[0][1]  # more right answers after the second epoch
    state = load(tmp_path / "checkpoint.pt")
    assert state.keys() == {"model", "optimizer", "scheduler", "scaler", "epoch", "step",
                            "rng"}
    assert (state["epoch"], state["step"]) == (2, 60)
    assert (tmp_path / "train.log").read_text() == result.stdout

    killed = folder_with_data("recipes-one-gpu-killed-")
    run_killed(ONE_GPU, 2, "--data", "images", "--epochs", "2", workdir=killed,
               timeout=180)
    assert load(killed / "checkpoint.pt")["step"] == 30  # the first epoch's, whole
    resumed = run(ONE_GPU, "--data", "images", "--epochs", "2", workdir=killed,
                  timeout=180)
    assert re.match(r"resumed from checkpoint\.pt at epoch 2, step 30\n", resumed.stdout)
    assert validations(resumed.stdout) == epochs[1:]
    assert_same_state(load(killed / "checkpoint.pt"), state, atol=device.pick(0, 1e-6))


def test_the_page_shows_how_train_ddp_py_differs_from_it():
    """The diff names the files alone, without their modification times, which differ
    in every copy."""
    one_gpu, ddp = Path(ONE_GPU).name, Path(DDP).name
    command = ["diff", "-u", "--label", one_gpu, "--label", ddp, one_gpu, ddp]
    diff = subprocess.run(command, cwd=snippet(ONE_GPU).parent, capture_output=True,
                          text=True, timeout=30)
    assert diff.returncode == 1, diff
    assert diff.stdout.startswith("--- train_one_gpu.py\n+++ train_ddp.py\n"), diff.stdout
    check_text(diff.stdout, DDP, "diff", command=shlex.join(command))
