"""snippets/memory/memory_breakdown.py, shown on docs/memory/where_memory_goes.md."""

import re

import pytest

from harness.launch import run
from harness.outputs import check_output

SNIPPET = "memory/memory_breakdown.py"


def rows(stdout):
    """{set-up: (weights, grads, optimiser, total, activations KiB, weight copies KiB)}."""
    found = {}
    for line in stdout.splitlines():
        if m := re.match(r"^(\S.*?)\s+((?:\d+\.\d+\s+){5}\d+\.\d+)$", line):
            found[m[1]] = tuple(float(v) for v in m[2].split())
    return found


def test_sixteen_bytes_per_parameter_with_adam_in_fp32_and_in_mixed_precision():
    result = run(SNIPPET)
    check_output(result)
    got = rows(result.stdout)
    assert got["fp32, Adam"][:4] == (4.0, 4.0, 8.0, 16.0)
    assert got["fp32, SGD with momentum"][:4] == (4.0, 4.0, 4.0, 12.0)
    assert got["bf16 autocast, fp32 weights, Adam"][:4] == (4.0, 4.0, 8.0, 16.0)
    assert got["bf16 weights, fp32 master copy, Adam"][:4] == (2.0, 2.0, 12.0, 16.0)
    fp32, autocast = got["fp32, Adam"][4], got["bf16 autocast, fp32 weights, Adam"][4]
    bf16 = got["bf16 weights, fp32 master copy, Adam"][4]
    assert bf16 == pytest.approx(fp32 / 2, rel=1e-3)  # every activation in half the bytes
    assert bf16 < autocast < fp32  # autocast keeps some activations in fp32
    assert got["bf16 autocast, fp32 weights, Adam"][5] == pytest.approx(132_929 * 2 / 1024, rel=0.05)
    assert re.search(r"batch of 1024: [\d.]+ KiB, 2\.00 times those of 512", result.stdout)


@pytest.mark.multigpu(1)
def test_on_a_gpu_node_the_counts_are_the_same():
    """The snippet counts bytes on the CPU: a GPU node gives the page's figures too."""
    check_output(run(SNIPPET))
