"""snippets/cheatsheet/ranks.py, which torchrun_logs.sh starts, shown on docs/cheatsheet.md."""

import re

from harness.launch import run
from tests.devices import on_each_device

SNIPPET = "cheatsheet/ranks.py"


def assert_every_rank_spoke(result, world_size: int) -> None:
    # not anchored at line starts: unbuffered, as the tests run it, each print writes its
    # text and its newline separately, and two ranks' lines may run into one
    said = sorted(re.findall(r"rank (\d+) of (\d+) \(local rank (\d+)\): training",
                             result.stdout))
    assert said == sorted((str(r), str(world_size), str(r)) for r in range(world_size))
    warned = re.findall(r"rank (\d+): a warning", result.text)  # stderr, or a job's file
    assert sorted(warned) == [str(r) for r in range(world_size)]


@on_each_device(gpus=2, one_gpu=True)
def test_every_process_prints_its_rank_on_stdout_and_stderr(device):
    """On GPUs each process sets its GPU, and its barrier runs over NCCL."""
    ranks = device.ranks(2)
    result = run(SNIPPET, launcher="torchrun", nproc=ranks, env=device.env())
    assert_every_rank_spoke(result, ranks)
    device.assert_ran(ranks, result=result)  # its barrier, over NCCL
