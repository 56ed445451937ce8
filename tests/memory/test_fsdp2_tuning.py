"""snippets/memory/fsdp2_tuning.py, shown on docs/memory/fsdp2_tuning.md."""

import re

import pytest
import torch

from harness.launch import run, snippet_code
from tests.devices import on_each_device
from tests.memory.runs import torchrun_on

SNIPPET = "memory/fsdp2_tuning.py"
WIDTH, DEPTH, BATCH = 64, 4, 64
BLOCK = 2 * WIDTH * 4 * WIDTH + 4 * WIDTH + WIDTH + 2 * WIDTH  # two Linear, LayerNorm


def one_process_norm():
    """The gradient norm of the first full batch in one process, without sharding."""
    c = snippet_code(SNIPPET)
    x, y = c["make_dataset"]()[:BATCH]
    torch.manual_seed(0)
    model = c["Net"]()
    torch.nn.functional.mse_loss(model(x), y).backward()
    return torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0).item()


def number(pattern, text):
    return float(re.search(pattern, text)[1].replace(",", ""))


def expected_lines(ranks):
    """What the page's arithmetic says, for a batch of B rows per rank."""
    b = BATCH // ranks
    gathered = BLOCK * 4 * (ranks - 1) // ranks
    linear = 2 * b * WIDTH * 4 * WIDTH  # forward FLOPs of one of a block's two layers
    flops = 3 * DEPTH * 2 * linear + 3 * 2 * b * WIDTH  # forward + backward (2x), head
    # per block: input and output of the norm, the norm's mean and 1/std, both layers'
    # inputs: the first is the norm's output, the second 4x wider, and GELU's input
    saved = DEPTH * 4 * (2 * b * WIDTH + 2 * b + 2 * b * 4 * WIDTH) + 4 * b * WIDTH + 8 * b
    saved_ac = DEPTH * 4 * b * WIDTH + 4 * b * WIDTH + 8 * b  # the blocks' inputs only
    # checkpointing recomputes each block's first layer; the early stop skips the second
    flops_ac = flops + DEPTH * linear
    return [
        f"one step: {2 * DEPTH + 1} all-gathers, {DEPTH + 1} reduce-scatters",
        f"per block and step: 2 all-gathers x {gathered:,} bytes received, "
        f"1 reduce-scatter of {gathered:,} bytes sent",
        f"per block and step: {6 * linear:,} FLOPs computed, "
        f"{6 * linear / (3 * gathered):.1f} FLOPs per byte communicated",
        "  default:     " + " ".join(str(i + 2) for i in range(DEPTH)),
        "  prefetching: " + " ".join(str(min(i + 3, DEPTH + 1)) for i in range(DEPTH)),
        f"saved for the backward pass: {saved / 1024:.1f} KiB; "
        f"with activation checkpointing {saved_ac / 1024:.1f} KiB",
        f"FLOPs per step: {flops:,}; with activation checkpointing {flops_ac:,} "
        f"({flops_ac / flops:.2f}x)",
    ]


def check_counts(result, ranks, rel=1e-5):
    for line in expected_lines(ranks):
        assert line in result.stdout, line
    norm = number(r"gradient norm before clipping to 1.0: ([\d.]+)", result.stdout)
    assert norm == pytest.approx(one_process_norm(), rel=rel)


@pytest.mark.parametrize("ranks", [2, 4])
@on_each_device(gpus=2)
def test_each_knob_changes_the_counts_the_page_computes(device, ranks):
    if device.gpus and ranks != device.gpus:
        pytest.skip(f"on GPUs the suite runs {device.gpus} ranks")
    # on GPUs: NCCL's all-gathers and reduce-scatters, counted as the page counts gloo's
    result = torchrun_on(device, SNIPPET, ranks)
    device.check_output(result, variant=None if ranks == 2 else "4ranks")
    # the norm: on GPUs the same maths in other kernels
    check_counts(result, ranks, rel=device.pick(1e-5, 1e-4))


def test_one_process_stops_at_once_with_one_line():
    result = run(SNIPPET, launcher="torchrun", nproc=1, world_size=0, check=False)
    assert result.returncode != 0
    assert "fsdp2_tuning.py needs at least 2 processes" in result.text
