"""snippets/ddp/set_epoch.py, shown on docs/ddp/code_changes.md."""

import re

from harness.launch import run
from harness.outputs import check_output
from tests.devices import on_each_device
from tests.on_gpus import assert_saw_gpus, run_seeing_gpus

SNIPPET = "ddp/set_epoch.py"


def shares(section: str) -> list[tuple[list[int], list[int]]]:
    """(rank 0's indices, rank 1's indices) for every epoch printed in a section."""
    return [tuple(list(map(int, re.findall(r"\d+", part))) for part in m.groups())
            for m in re.finditer(r"rank 0 gets \[(.*?)\]\s+rank 1 gets \[(.*?)\]", section)]


@on_each_device(gpus=1)
def test_without_set_epoch_every_epoch_repeats_the_first_shuffle(device):
    """The sampler never touches a GPU: on a GPU node the shares are the same, the output
    the page shows; the run's process saw the GPUs, which changed nothing."""
    result = run_seeing_gpus(SNIPPET) if device.cuda else run(SNIPPET)
    check_output(result)  # on GPUs too: the indices do not depend on the machine
    if device.cuda:
        assert_saw_gpus(result, 1)  # the GPUs were there, and changed nothing
    without, with_set_epoch = result.stdout.split("with sampler.set_epoch(epoch):")
    for epochs in (shares(without), shares(with_set_epoch)):
        assert len(epochs) == 3
        for rank0, rank1 in epochs:  # disjoint halves that together cover the data set
            assert len(rank0) == len(rank1) == 6 and sorted(rank0 + rank1) == list(range(12))
    assert all(epoch == shares(without)[0] for epoch in shares(without))
    assert len({tuple(rank0) for rank0, _ in shares(with_set_epoch)}) == 3
    assert shares(with_set_epoch)[0] == shares(without)[0]  # epoch 0 is the same either way
