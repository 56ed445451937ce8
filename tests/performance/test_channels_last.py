"""snippets/performance/channels_last.py, shown on docs/performance/channels_last.md."""

import re

import pytest
import torch

from harness.launch import run
from harness.outputs import Tolerance, check_output
from tests.performance.reference import assert_state_close, full_batch_reference

SNIPPET = "performance/channels_last.py"
RANKS = 2
#: Varies from run to run: the timing ratio and the rounding difference between formats.
SUMMATION = Tolerance(atol=1e-5, why="the two formats add the same products in another order")


def flags(stdout, fmt):
    row = next(line for line in stdout.splitlines() if line.startswith(fmt))
    return row.split()[-3:]


def check_run(workdir, device):
    result = run(SNIPPET, launcher="torchrun", nproc=RANKS, workdir=workdir)
    assert flags(result.stdout, "contiguous_format") == ["no", "no", "no"]
    # weight, activation and gradient
    assert flags(result.stdout, "channels_last") == ["yes", "yes", "yes"]
    state = torch.load(workdir / "channels_last.pt", map_location="cpu", weights_only=True)
    assert state["0.weight"].is_contiguous(memory_format=torch.channels_last)
    reference = full_batch_reference(  # contiguous, one process, full batches
        SNIPPET,
        loss_fn=torch.nn.functional.cross_entropy,
        batch_size=16 * RANKS,
        epochs=3,
        make_optimizer=lambda p: torch.optim.SGD(p, lr=0.05),
    )
    assert_state_close(state, reference, atol=1e-5 if device == "cpu" else 1e-2)  # GPUs: TF32
    return result


def test_channels_last_trains_the_same_model_in_another_layout(tmp_path):
    result = check_run(tmp_path, "cpu")
    check_output(result, tolerance=SUMMATION)
    # The page says that on a CPU the two formats take about the same (CPU) time.
    ratio = float(re.search(r"speed-up of channels_last: ([\d.]+)x", result.stdout).group(1))
    assert 0.75 < ratio < 1.33


@pytest.mark.multigpu(2)
def test_on_gpus(tmp_path):
    assert "on cuda" in check_run(tmp_path, "cuda").stdout


def test_converting_after_wrapping_makes_ddp_warn(exercise_checks):
    """The page's exercise: DDP's buckets keep the layout the parameters had when wrapped."""
    warned = exercise_checks["channels_last_after_wrapping"]
    assert any("Grad strides do not match bucket view strides" in w for w in warned)
