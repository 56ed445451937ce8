"""snippets/performance/ring_allreduce.py, shown on docs/performance/ring_allreduce.md."""

import re
import time

import torch

from harness.launch import run, snippet_code
from harness.outputs import BARRIER_WARNING, Tolerance
from tests.devices import on_each_device
from tests.performance.device_checks import check_barrier_names_the_gpu

SNIPPET = "performance/ring_allreduce.py"
RANKS = 4
NUMEL = 2**20
SUMMATION = Tolerance(atol=1e-5, why="the ring adds the same numbers as all_reduce in another order")


def check_run(stdout, ranks=RANKS):
    size = NUMEL * 4
    assert f"{ranks} processes, each with {NUMEL:,} float32 = {size:,} bytes" in stdout
    counts = re.findall(r"^ +(\d) +([\d,]+) +([\d,]+) +([\d,]+)$", stdout, re.M)
    assert [int(rank) for rank, *_ in counts] == list(range(ranks))
    for _, sent, received, formula in counts:
        sent, received, formula = (int(v.replace(",", "")) for v in (sent, received, formula))
        # every rank sends and receives 2(N-1) chunks of size/N: 2(N-1)/N x size (none at N=1)
        assert sent == received == formula == 2 * (ranks - 1) * size // ranks
    diff = float(
        re.search(r"largest difference from dist.all_reduce on any rank: (\S+)", stdout).group(1)
    )
    assert diff < 1e-5  # the same sums, added in another order
    ring, builtin = re.search(
        r"^median of 5: hand-written ring ([\d.]+) ms, dist.all_reduce ([\d.]+) ms$", stdout, re.M
    ).groups()
    assert float(ring) > 0 and float(builtin) > 0


@on_each_device(gpus=RANKS, one_gpu=True)
def test_ring_all_reduce_equals_all_reduce_and_sends_2_n_minus_1_over_n(device):
    """At world size 1 the ring has no neighbour and sends nothing; the one-GPU case checks
    the CUDA path around it: the GPU named to the barrier, the timing's synchronisation."""
    ranks = device.ranks(RANKS)
    result = run(SNIPPET, launcher="torchrun", nproc=ranks, env=device.env())
    device.assert_ran(ranks, result=result)  # the ring's sends and receives, and dist.all_reduce
    device.check_output(result, tolerance=SUMMATION)
    check_run(result.stdout, ranks)
    assert BARRIER_WARNING not in result.text


def test_timing_leaves_out_the_first_call_and_waits_for_the_gpu(monkeypatch):
    """Each timed call starts after the GPU is idle and every rank has arrived, and ends
    when the GPU is done (NCCL calls return once queued); the first call is not timed."""
    code = snippet_code(SNIPPET)
    log = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device: log.append(f"sync {device}"))
    monkeypatch.setattr(torch.distributed, "barrier", lambda **kwargs: log.append("barrier"))

    def all_reduce():
        log.append("call")
        if log.count("call") == 1:
            time.sleep(0.5)  # as a first call that sets up connections

    seconds = code["timed"](all_reduce, torch.device("cuda", 0))
    timed_call = ["sync cuda:0", "barrier", "call", "sync cuda:0"]
    assert log == ["call"] + timed_call * code["REPEATS"]
    assert seconds < 0.25


def test_barrier_names_the_gpu(monkeypatch):
    check_barrier_names_the_gpu(snippet_code(SNIPPET), monkeypatch)
