"""snippets/recipes/train_ddp.py, shown on docs/recipes/own_script.md.

Its reference runs, and what the tests read in a run, are tests/recipes/runs.py's.
"""

import shutil
from pathlib import Path

import pytest
from torch.utils.data import DistributedSampler

from harness.outputs import GPU_ATOL
from tests.compare import assert_same_state, load
from tests.devices import on_each_device
from tests.recipes.record_batches import recorded
from tests.recipes.runs import (EPOCHS, TRAINING, STEP_BATCH, STEPS_PER_EPOCH, TRAIN_IMAGES,
                                VAL_IMAGES, batch_independent, checkpoint,
                                folder_with_data, one_process, train_ddp, two_ranks,
                                validations)

SIGNAL_AT = Path(__file__).with_name("signal_at_step.py")
#: The step after which one rank gets SIGTERM: the second of the second epoch.
STOP_STEP = STEPS_PER_EPOCH + 2
#: How far the parameters of 2 ranks of 16 images and of one process of 32 may end apart
#: after 90 steps, in float32 without batch statistics (batch_independent.py): the sums
#: of a step's gradients run in another order, and 90 steps carry that on. Measured:
#: at most 3.6e-4 (momentum buffers 1.2e-3); a step on other images moves them by 1e-2.
SAME_STEPS_ATOL = 1e-3
#: On GPUs, with SyncBatchNorm and fp16 autocast: fp16 products of a batch of 16 round
#: otherwise than those of a batch of 32 (bf16 on the CPU gave 0.06 after 90 steps).
GPU_SYNC_ATOL = 0.1


@on_each_device(gpus=2, one_gpu=True)
def test_two_ranks_take_the_steps_of_one_process_on_the_whole_batch(device):
    """2 ranks of 16 images take the steps one process takes on 32: the same images, crops
    and flips, learning rate and schedule. With what a rank computes for an image made
    independent of its batch (batch_independent.py), the same model but for the order of
    the sums. On GPUs, SyncBatchNorm does that for the batch statistics itself."""
    ranks = device.ranks(2)
    result = two_ranks() if ranks == 2 else train_ddp(world=1, env=device.env())
    device.check_output(result, tolerance=TRAINING)
    device.assert_ran(ranks, result=result)
    assert (f"{ranks} processes ({device.backend} on {device.type}): {ranks} × "
            f"{STEP_BATCH // ranks} = {STEP_BATCH} images per step, learning rate 0.1, "
            f"{STEPS_PER_EPOCH} steps per epoch") in result.stdout
    assert [count for *_, count in validations(result.stdout)] == [VAL_IMAGES] * EPOCHS
    if ranks == 1:
        return
    if device.cuda:
        two, one = checkpoint(result), checkpoint(one_process())
        assert_same_state(two["model"], one["model"], atol=GPU_SYNC_ATOL)
        return
    two, one = checkpoint(batch_independent(2)), checkpoint(batch_independent(1))
    assert two["scheduler"] == one["scheduler"]
    assert two["step"] == one["step"] == EPOCHS * STEPS_PER_EPOCH
    assert_same_state(two["model"], one["model"], atol=SAME_STEPS_ATOL)
    assert_same_state(two["optimizer"], one["optimizer"], atol=2 * SAME_STEPS_ATOL)
    assert (validations(batch_independent(2).stdout)
            == validations(batch_independent(1).stdout))


def test_every_epoch_has_a_new_order_and_new_crops_and_flips():
    """What the 2 ranks of batch_independent(2) trained on, step by step: each epoch,
    every one of the 960 images once over the two ranks; each rank's labels in another
    order than the epoch before (DistributedSampler.set_epoch: without it, every epoch
    repeats the first's order); and the images, as cropped and flipped, nearly all new
    (the data set's set_epoch: without it, each image is cut alike every epoch; by
    chance, 1 in 50 is, of 25 shifts and 2 flips)."""
    workdir = batch_independent(2).workdir
    ranks = [recorded(workdir, rank) for rank in range(2)]
    epochs = [[batches[e * STEPS_PER_EPOCH:(e + 1) * STEPS_PER_EPOCH] for batches in ranks]
              for e in range(EPOCHS)]
    assert all(len(batches) == EPOCHS * STEPS_PER_EPOCH for batches in ranks)
    seen = [{image for batches in epoch for _, images in batches for image in images}
            for epoch in epochs]
    assert [len(images) for images in seen] == [TRAIN_IMAGES] * EPOCHS
    for before, after in zip(epochs, epochs[1:]):
        for rank in range(2):
            assert ([label for labels, _ in before[rank] for label in labels]
                    != [label for labels, _ in after[rank] for label in labels])
    for before, after in zip(seen, seen[1:]):
        assert len(before & after) < TRAIN_IMAGES / 10


def test_validation_counts_every_image_once_at_any_number_of_ranks():
    """Two ranks validate on 51 and 50 of the 101 images, which divide by none of 2, 3
    or 4: each image once. One process, given their final model, counts the same right
    answers of the same 101 images, and the same loss but for the order of the sums.
    DistributedSampler would have counted one image twice."""
    assert sum(len(DistributedSampler(range(VAL_IMAGES), num_replicas=2, rank=r))
               for r in range(2)) == VAL_IMAGES + 1
    workdir = folder_with_data("recipes-evaluate-")
    shutil.copy(two_ranks().workdir / "checkpoint.pt", workdir)
    result = train_ddp("--evaluate", "--workers", "0", world=1, launcher="env",
                       workdir=workdir)
    [(loss, correct, count)] = validations(result.stdout)
    trained = validations(two_ranks().stdout)[-1]
    assert (correct, count) == trained[1:] and count == VAL_IMAGES
    assert loss == pytest.approx(trained[0], abs=5.1e-5)  # printed to 4 places there


def test_it_refuses_to_resume_at_another_number_of_processes():
    """The 2-process run's checkpoint, resumed by one process: its steps per epoch,
    schedule and random generators would be wrong, so it stops before a step, saying
    why, and leaves the checkpoint as it was."""
    workdir = folder_with_data("recipes-other-world-")
    shutil.copy(two_ranks().workdir / "checkpoint.pt", workdir)
    before = load(workdir / "checkpoint.pt")
    result = train_ddp("--workers", "0", world=1, launcher="env", workdir=workdir,
                       check=False)
    [only] = result.outputs
    assert only.returncode == 1, only
    assert ("checkpoint.pt was saved by 2 processes, not 1: resume with 2, or start "
            "afresh") in only.stderr, only.stderr
    assert "step" not in only.stdout, only.stdout
    assert_same_state(load(workdir / "checkpoint.pt"), before)


def test_the_checkpoint_holds_every_state():
    state = checkpoint(two_ranks())
    assert state.keys() == {"model", "optimizer", "scheduler", "scaler", "epoch", "step",
                            "rng"}
    assert (state["epoch"], state["step"]) == (EPOCHS, EPOCHS * STEPS_PER_EPOCH)
    assert state["scheduler"]["last_epoch"] == state["step"]
    parameters = [k for k in state["model"] if "running" not in k and "batches" not in k]
    assert len(state["optimizer"]["state"]) == len(parameters)  # a momentum for each
    assert len(state["rng"]) == 2  # each rank's generator, each its own
    assert state["rng"][0]["cpu"].ne(state["rng"][1]["cpu"]).any()
    assert state["scaler"] == {}  # bf16 on the CPU: no scaler (fp16 on GPUs has one)


@on_each_device(gpus=2)
def test_a_signal_mid_epoch_stops_every_rank_and_the_resumed_run_ends_as_if_never_stopped(
        device):
    """Rank 1 and its loader's workers alone get SIGTERM in the second epoch: the workers
    go on, every rank stops at the same step, rank 0 alone saves, prints and writes its
    log, and both exit with 0. Run again, it
    resumes and ends with the uninterrupted run's state: bit for bit on the CPU."""
    workdir = folder_with_data("recipes-stopped-")
    stopped = train_ddp(launcher="env", world=2, workdir=workdir, env=device.env(),
                        wrapper=SIGNAL_AT, wrapper_args=("1", str(STOP_STEP)))
    rank0, rank1 = stopped.outputs
    assert [rank0.returncode, rank1.returncode] == [0, 0]
    assert f"rank 1: SIGTERM after step {STOP_STEP}" in rank1.stderr
    assert rank1.stdout == "" and "it/s" not in rank1.stderr  # no print, no progress bar
    assert "it/s" in rank0.stderr
    assert rank0.stdout.splitlines()[-1] == (
        f"stopped by a signal at epoch 2, step {STOP_STEP}: saved checkpoint.pt; "
        "run again to resume")
    assert (workdir / "train.log").read_text() == rank0.stdout  # written by rank 0 alone
    assert load(workdir / "checkpoint.pt")["step"] == STOP_STEP
    assert sorted(p.name for p in workdir.iterdir() if not p.name.startswith("logs-")) == [
        "checkpoint.pt", "images", "train.log"]

    resumed = train_ddp(world=2, workdir=workdir, env=device.env())
    device.check_output(resumed, "resumed", tolerance=TRAINING)
    assert resumed.stdout.startswith(
        f"resumed from checkpoint.pt at epoch 2, step {STOP_STEP}\n")
    uninterrupted = two_ranks()
    assert validations(resumed.stdout) == validations(uninterrupted.stdout)[1:]
    assert_same_state(checkpoint(resumed), checkpoint(uninterrupted),
                      atol=device.pick(0, GPU_ATOL))
