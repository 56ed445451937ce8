"""snippets/performance/ddp_knobs.py, shown on docs/performance/ddp_knobs.md."""

import re

import pytest

from harness.launch import run
from tests.devices import on_each_device
from tests.performance.reference import snippet_code

SNIPPET = "performance/ddp_knobs.py"
RANKS = 2
MiB = 2**20


@pytest.fixture(scope="module")
def model_bytes():
    net = snippet_code(SNIPPET)["Net"]()
    return sum(p.numel() * p.element_size() for p in net.parameters())


def expand(term):
    """'7 x 263,168' -> [263168] * 7; '264,196' -> [264196]"""
    count, _, size = term.rpartition(" x ")
    return [int(size.replace(",", ""))] * int(count or 1)


def bucket_rows(stdout):
    """{cap: (all-reduces in step 1, later, [bytes of each later all-reduce])}"""
    rows = {}
    for line in stdout.splitlines():
        match = re.match(r"(25 \(default\)|[\d.]+)\s+(\d+)\s+(\d+)\s+([\dx, +]+)$", line)
        if match:
            cap, first, later, sizes = match.groups()
            rows[cap] = (
                int(first),
                int(later),
                [size for term in sizes.split(" + ") for size in expand(term)],
            )
    return rows


def check_run(stdout, stderr, model_bytes):
    rows = bucket_rows(stdout)
    largest_param = 256 * 256 * 4
    for cap, cap_bytes, count in (
        ("25 (default)", 25 * MiB, 2),
        ("1", MiB, 2),
        ("0.25", MiB // 4, 8),
    ):
        first, later, sizes = rows[cap]
        assert first == 1  # step 1: one bucket holding everything, in the order of registration
        assert later == len(sizes) == count  # then rebuilt in the order gradients became ready
        assert sum(sizes) == model_bytes
        # A bucket closes once it passes the cap (the first at 1 MiB when the cap is the default).
        assert all(size < min(cap_bytes, MiB) + largest_param for size in sizes)
    assert re.search(rf"^False +0 of 18 +{model_bytes:,}$", stdout, re.M)
    assert re.search(r"^True +18 of 18 +0$", stdout, re.M)
    assert "largest difference between these 5 runs: 0.0e+00" in stdout
    assert "(no argument)                 fails: Expected to have finished reduction" in stdout
    everything = f"trains; 2 all-reduces, {model_bytes:,} bytes per step"
    assert stdout.count(everything) == 3  # unused gradients are all-reduced too (as zeros)
    assert "extra traversal of the autograd graph every iteration" in stderr


@on_each_device(gpus=RANKS, one_gpu=True)
def test_knobs_change_buckets_and_memory_not_results(model_bytes, device):
    """DDP buckets gradients and all-reduces them at any world size, 1 included."""
    ranks = device.ranks(RANKS)
    result = run(SNIPPET, launcher="torchrun", nproc=ranks, env=device.env())
    device.assert_ran(ranks, result=result)  # on GPUs the buckets are NCCL's all-reduces
    device.check_output(result)
    check_run(result.stdout, result.text, model_bytes)


def test_half_a_mebibyte_cap_gives_four_buckets(exercise_checks):
    """The page's exercise: two layers per bucket, so 4 all-reduces per step."""
    assert exercise_checks["buckets_at_half_a_mebibyte"] == [1, 4]
