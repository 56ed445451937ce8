"""snippets/memory/memory_breakdown.py, shown on docs/memory/where_memory_goes.md."""

import re

import pytest

from harness.launch import run, snippet
from harness.outputs import check_output
from tests.on_gpus import assert_gpu_path

SNIPPET = "memory/memory_breakdown.py"
#: The script as a reader runs it to count on a GPU: every tensor it makes (the model,
#: the batch, the master copy) on the GPU, and its autocast on the GPU's.
ON_THE_GPU = """import runpy
import torch
torch.set_default_device({device!r})
autocast = torch.autocast
torch.autocast = lambda device_type, **options: autocast({device!r}, **options)
runpy.run_path({script!r}, run_name="__main__")
print("counted on", torch.empty(0).device)
"""


def rows(stdout):
    """{set-up: (weights, grads, optimiser, total, activations KiB, weight copies KiB)}."""
    found = {}
    for line in stdout.splitlines():
        if m := re.match(r"^(\S.*?)\s+((?:\d+\.\d+\s+){5}\d+\.\d+)$", line):
            found[m[1]] = tuple(float(v) for v in m[2].split())
    return found


def check_counts(stdout, halves=1e-3):
    """The page's claims: 16 bytes per parameter with Adam, in fp32 and in both kinds of
    mixed precision; bf16 weights halve the activations (within ``halves``), autocast's
    lie between and keep bf16 copies of the weights; activations double with the batch."""
    got = rows(stdout)
    assert got["fp32, Adam"][:4] == (4.0, 4.0, 8.0, 16.0)
    assert got["fp32, SGD with momentum"][:4] == (4.0, 4.0, 4.0, 12.0)
    assert got["bf16 autocast, fp32 weights, Adam"][:4] == (4.0, 4.0, 8.0, 16.0)
    assert got["bf16 weights, fp32 master copy, Adam"][:4] == (2.0, 2.0, 12.0, 16.0)
    fp32, autocast = got["fp32, Adam"][4], got["bf16 autocast, fp32 weights, Adam"][4]
    bf16 = got["bf16 weights, fp32 master copy, Adam"][4]
    assert bf16 == pytest.approx(fp32 / 2, rel=halves)  # every activation in half the bytes
    assert bf16 < autocast < fp32  # autocast keeps some activations in fp32
    assert got["bf16 autocast, fp32 weights, Adam"][5] == pytest.approx(132_929 * 2 / 1024, rel=0.05)
    assert re.search(r"batch of 1024: [\d.]+ KiB, 2\.00 times those of 512", stdout)


def test_sixteen_bytes_per_parameter_with_adam_in_fp32_and_in_mixed_precision():
    result = run(SNIPPET)
    check_output(result)
    check_counts(result.stdout)


@pytest.mark.multigpu(1)
def test_on_a_gpu_the_model_states_are_the_same_and_bf16_halves_the_activations(tmp_path):
    """The page's counts, made on a GPU, where the page tells readers to measure: the
    same claims hold, the activations of bf16 weights half those of fp32 give or take
    LayerNorm's statistics, which CUDA keeps in fp32 (its accumulate type)."""
    script = tmp_path / "on_the_gpu.py"
    script.write_text(ON_THE_GPU.format(device="cuda", script=str(snippet(SNIPPET))))
    result = run(script, workdir=tmp_path)
    assert_gpu_path(result.stdout, r"^counted on (?P<device>\S+)$")
    check_counts(result.stdout, halves=0.01)
