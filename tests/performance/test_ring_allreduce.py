"""snippets/performance/ring_allreduce.py, shown on docs/performance/ring_allreduce.md."""

import re

import pytest

from harness.launch import run
from harness.outputs import Tolerance, check_output

SNIPPET = "performance/ring_allreduce.py"
RANKS = 4
NUMEL = 2**20
SUMMATION = Tolerance(atol=1e-5, why="the ring adds the same numbers as all_reduce in another order")


def check_run(stdout):
    size = NUMEL * 4
    counts = re.findall(r"^ +(\d) +([\d,]+) +([\d,]+) +([\d,]+)$", stdout, re.M)
    assert [int(rank) for rank, *_ in counts] == list(range(RANKS))
    for _, sent, received, formula in counts:
        sent, received, formula = (int(v.replace(",", "")) for v in (sent, received, formula))
        # every rank sends and receives 2(N-1) chunks of size/N: 2(N-1)/N x size
        assert sent == received == formula == 2 * (RANKS - 1) * size // RANKS
    diff = float(
        re.search(r"largest difference from dist.all_reduce on any rank: (\S+)", stdout).group(1)
    )
    assert diff < 1e-5  # the same sums, added in another order


def test_ring_all_reduce_equals_all_reduce_and_sends_2_n_minus_1_over_n():
    result = run(SNIPPET, launcher="torchrun", nproc=RANKS)
    check_output(result, tolerance=SUMMATION)
    check_run(result.stdout)


@pytest.mark.multigpu(4)
def test_on_gpus():
    check_run(run(SNIPPET, launcher="torchrun", nproc=RANKS).stdout)
