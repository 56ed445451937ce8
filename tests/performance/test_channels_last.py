"""snippets/performance/channels_last.py, shown on docs/performance/channels_last.md."""

import re

import pytest
import torch

from harness.launch import run, snippet, snippet_code
from harness.outputs import BARRIER_WARNING, Tolerance
from tests.compare import assert_same_state, load
from tests.devices import on_each_device
from tests.on_gpus import assert_gpu_path
from tests.performance.device_checks import check_barrier_names_the_gpu
from tests.performance.reference import full_batch_reference

SNIPPET = "performance/channels_last.py"
RANKS = 2
#: Varies from run to run: the timing ratio and the rounding difference between formats.
SUMMATION = Tolerance(atol=1e-5, why="the two formats add the same products in another order")
#: How far the trained weights may be from the one-process float32 reference on the CPU.
#: The page explains them: float32 rounding on CPUs; on GPUs, cuDNN's convolutions in
#: TF32 by default (about 1e-3 on Ampere and newer), and float32 rounding with TF32 off.
ATOL = {"cpu": 1e-5, "cuda": 1e-2, "cuda, TF32 off": 1e-4}
#: What the page says to put at the top of a script to turn TF32 off.
TF32_OFF = """import runpy
import torch
torch.backends.cudnn.allow_tf32 = False        # convolutions
torch.backends.cuda.matmul.allow_tf32 = False  # matrix products (the default)
runpy.run_path({script!r}, run_name="__main__")
"""


def flags(stdout, fmt):
    row = next(line for line in stdout.splitlines() if line.startswith(fmt))
    return row.split()[-3:]


#: channels_last.py's first line: the device it trained on.
DEVICE_LINE = r"^on (?P<device>\w+), batch "


def check_run(workdir, device, script=SNIPPET, env=None, ranks=RANKS):
    result = run(script, launcher="torchrun", nproc=ranks, workdir=workdir, env=env)
    assert flags(result.stdout, "contiguous_format") == ["no", "no", "no"]
    # weight, activation and gradient
    assert flags(result.stdout, "channels_last") == ["yes", "yes", "yes"]
    state = load(workdir / "channels_last.pt")
    assert state["0.weight"].is_contiguous(memory_format=torch.channels_last)
    reference = full_batch_reference(  # contiguous, one process, full batches
        SNIPPET,
        loss_fn=torch.nn.functional.cross_entropy,
        batch_size=16 * ranks,
        epochs=3,
        make_optimizer=lambda p: torch.optim.SGD(p, lr=0.05),
    )
    assert_same_state(state, reference, atol=ATOL[device])
    return result


@on_each_device(gpus=RANKS, one_gpu=True)
def test_channels_last_trains_the_same_model_in_another_layout(tmp_path, device):
    """On GPUs cuDNN's convolutions run in TF32: the weights agree to ATOL["cuda"]."""
    ranks = device.ranks(RANKS)
    result = check_run(tmp_path, device.type, env=device.env(), ranks=ranks)
    device.check_output(result, tolerance=SUMMATION)
    if device.cuda:
        assert_gpu_path(result.stdout, DEVICE_LINE, count=1)
    device.assert_ran(ranks, result=result)
    assert BARRIER_WARNING not in result.text
    if not device.cuda:
        # A clock's figure: it depends on the CPU's kernels (1.10x on the page, 1.35x with
        # ATEN_CPU_CAPABILITY=default in CI), so the page makes no claim about it on a CPU.
        ratio = float(re.search(r"speed-up of channels_last: ([\d.]+)x", result.stdout).group(1))
        assert ratio > 0


def test_barrier_names_the_gpu(monkeypatch):
    check_barrier_names_the_gpu(snippet_code(SNIPPET), monkeypatch)


@pytest.mark.multigpu(2)
def test_on_gpus_with_tf32_off_the_weights_agree_to_float32_rounding(tmp_path):
    script = tmp_path / "tf32_off.py"
    script.write_text(TF32_OFF.format(script=str(snippet(SNIPPET))))
    assert_gpu_path(check_run(tmp_path, "cuda, TF32 off", script).stdout, DEVICE_LINE, count=1)


def test_converting_after_wrapping_makes_ddp_warn(exercise_checks):
    """The page's exercise: DDP's buckets keep the layout the parameters had when wrapped."""
    warned = exercise_checks["channels_last_after_wrapping"]
    assert any("Grad strides do not match bucket view strides" in w for w in warned)
