"""snippets/ddp/monitoring.py, shown on docs/ddp/monitoring.md."""

import pytest

from harness.launch import run, shared
from harness.outputs import check_output
from tests.devices import on_each_device

SNIPPET = "ddp/monitoring.py"


def monitor(*args, nproc=2, env=None):
    """torchrun monitoring.py on ``nproc`` ranks: the result and
    {rank: (device, alone, training, MiB)}."""
    result = run(SNIPPET, *args, launcher="torchrun", nproc=nproc, timeout=120, env=env)
    rows = {}
    for line in result.stdout.splitlines():
        fields = line.split()
        if fields and fields[0].isdigit():  # rank device N samples/s N samples/s N MiB
            rows[int(fields[0])] = (fields[1], *map(float, (fields[2], fields[4], fields[6])))
    return result, rows


def assert_one_row_per_rank(rows, devices=("cpu", "cpu")):
    assert sorted(rows) == list(range(len(devices)))
    assert [rows[rank][0] for rank in sorted(rows)] == list(devices)
    for _, alone, training, memory in rows.values():
        assert alone > 0 and training > 0 and memory > 0


@shared
def normal(device):
    result, rows = monitor(nproc=device.ranks(2), env=device.env())
    device.assert_ran(device.ranks(2), result=result)
    return result, rows


@pytest.fixture(scope="module")
@shared
def slow():
    return monitor("--slow-rank", "1")


@on_each_device(gpus=2, one_gpu=True)
def test_every_rank_reports_its_speed_and_memory(device):
    """On GPUs memory is measured per device: torch.cuda.max_memory_allocated(), not the
    process's size."""
    result, rows = normal(device)
    device.check_output(result)
    ranks = device.ranks(2)
    assert_one_row_per_rank(rows, devices=[device.pick("cpu", f"cuda:{r}") for r in range(ranks)])
    if device.cuda:
        assert "torch.cuda.max_memory_allocated()" in result.stdout  # not the process's size
    else:
        assert "no rank is much slower than the others" in result.stdout


def test_a_slow_rank_is_flagged_and_slows_everybody_in_training(slow):
    result, rows = slow
    check_output(result, "slow")
    assert_one_row_per_rank(rows)
    flagged = [line for line in result.stdout.splitlines() if "SLOW" in line]
    assert flagged == ["rank 1 is SLOW: under a third of the speed of the fastest rank"]
    (_, alone0, training0, _), (_, alone1, training1, _) = rows[0], rows[1]
    assert alone1 < alone0 / 3  # on its own, rank 1 is much slower
    # In training rank 0 waits for rank 1 at every step: no faster than rank 1 on its own.
    assert training0 == pytest.approx(training1, rel=0.2)
    assert training0 < 1.2 * alone1
