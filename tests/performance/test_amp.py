"""snippets/performance/amp.py, shown on docs/performance/amp.md.

bf16 and fp16 training under DDP must land where float32 training of the same steps lands,
within what 16-bit arithmetic allows; fp16 must resume with its scaler's state.
"""

import math
import re

import torch

from harness.launch import run
from harness.outputs import BF16, FP16
from tests.compare import assert_same_state, load
from tests.devices import on_each_device
from tests.killed_save import assert_only_plain_save_breaks, run_killed
from tests.on_gpus import assert_gpu_path
from tests.performance.reference import full_batch_reference

SNIPPET = "performance/amp.py"
RANKS = 2
BATCH = 32  # per rank, the snippet's default
EPOCHS = 4
#: 16-bit floats keep 2 to 3 significant digits; after 32 SGD steps with momentum the
#: parameters (largest about 0.9) agree with float32 to this much. A step skipped or
#: applied wrongly moves them by more than 0.3.
LOW_PRECISION_ATOL = 0.05


def assert_close_to_reference(checkpoint, skipped_steps=0):
    state = load(checkpoint)
    assert state["epoch"] == EPOCHS
    reference = full_batch_reference(
        SNIPPET,
        loss_fn=torch.nn.functional.mse_loss,
        batch_size=BATCH * RANKS,
        epochs=EPOCHS,
        make_optimizer=lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
        skipped_steps=skipped_steps,
    )
    assert_same_state(state["model"], reference, LOW_PRECISION_ATOL)


def scales(stdout):
    return [float(s) for s in re.findall(r"loss scale ([\d.]+)", stdout)]


def run_amp(workdir, ranks, *args, env=None):
    """The page's command: torchrun --standalone --nproc_per_node=2 amp.py ARGS. With fewer
    ranks each takes a larger batch, so that every step sees the page's BATCH * RANKS
    samples: 16-bit training drifts further from float32 in twice as many smaller steps
    (0.22 for bf16 at world size 1 with the page's batch, on the CPU)."""
    if ranks != RANKS:
        args = (*args, "--batch-size", str(BATCH * RANKS // ranks))
    return run(SNIPPET, *args, launcher="torchrun", nproc=ranks, workdir=workdir, env=env)


def run_fp16_in_two_parts(workdir, ranks):
    """Two epochs, then a second command that resumes from the checkpoint to the fourth."""
    first = run_amp(workdir, ranks, "--precision", "fp16", "--epochs", "2")
    return first, run_amp(workdir, ranks, "--precision", "fp16", "--epochs", str(EPOCHS))


def skipped_by_scaler(first_scale):
    """Steps the scaler skipped: each halves the scale from 65536 (it grows only every 2000)."""
    return round(math.log2(65536 / first_scale))


def check_fp16(workdir, first, resumed):
    saved = scales(first.stdout)[-1]
    assert f"resumed from amp_fp16.pt at epoch 2, loss scale {saved}" in resumed.stdout
    state = load(workdir / "amp_fp16.pt")
    scaler = torch.amp.GradScaler("cpu")
    scaler.load_state_dict(state["scaler"])
    assert scaler.get_scale() == scales(resumed.stdout)[-1]
    assert_close_to_reference(workdir / "amp_fp16.pt", skipped_by_scaler(scales(first.stdout)[0]))


@on_each_device(gpus=RANKS, one_gpu=True)
def test_bf16_autocast_matches_float32_training(tmp_path, device):
    """On GPUs the same code autocasts on CUDA."""
    ranks = device.ranks(RANKS)
    result = run_amp(tmp_path, ranks, "--precision", "bf16", env=device.env())
    device.check_output(result, "bf16", tolerance=BF16)
    said = "weights torch.float32, forward output torch.bfloat16"
    assert device.pick(said, f"bf16 on cuda: {said}") in result.stdout
    device.assert_ran(ranks, result=result)
    if not device.cuda:
        assert "loss scale" not in result.stdout  # no scaler for bf16
    assert_close_to_reference(tmp_path / "amp_bf16.pt")


@on_each_device(gpus=RANKS, one_gpu=True)
def test_fp16_with_grad_scaler_resumes_with_its_scale(tmp_path, device):
    """On GPUs the scaler is CUDA's, and its scale is saved and restored as on the CPU."""
    ranks = device.ranks(RANKS)
    first, resumed = run_fp16_in_two_parts(tmp_path, ranks)
    device.check_output(first, "fp16-first", tolerance=FP16)
    device.check_output(resumed, "fp16-resumed", tolerance=FP16)
    assert "forward output torch.float16" in first.stdout
    if device.cuda:
        for part in (first, resumed):  # autocast on CUDA, and the scaler of CUDA's
            assert_gpu_path(part.stdout, r"^fp16 on (?P<device>\w+): weights torch\.float32, "
                                         r"forward output torch\.float16$", count=1)
    else:
        # The first steps overflow at 65536 and are skipped; the page explains this.
        assert skipped_by_scaler(scales(first.stdout)[0]) >= 1
    check_fp16(tmp_path, first, resumed)


def test_a_kill_while_saving_keeps_the_last_checkpoint(tmp_path):
    """SIGKILL halfway through writing the second epoch's checkpoint: the first epoch's
    survives, loads, and the next run resumes from it. The same kill in a copy that saves
    with a plain torch.save leaves a checkpoint that does not load."""
    args = ("--precision", "bf16", "--epochs", "2")
    run_killed(SNIPPET, 2, *args, workdir=tmp_path, launcher="torchrun", nproc=RANKS)
    assert (tmp_path / "amp_bf16.pt.tmp").exists()  # the half-written one
    assert load(tmp_path / "amp_bf16.pt")["epoch"] == 1
    resumed = run_amp(tmp_path, RANKS, *args)
    assert "resumed from amp_bf16.pt at epoch 1" in resumed.stdout
    assert "epoch 2: loss" in resumed.stdout and "epoch 1: loss" not in resumed.stdout
    assert load(tmp_path / "amp_bf16.pt")["epoch"] == 2
    assert_only_plain_save_breaks(SNIPPET, "amp_bf16.pt", 2, *args, folder=tmp_path / "plain",
                                  launcher="torchrun", nproc=RANKS)
