"""snippets/memory/memory_snapshot.py, shown on docs/memory/memory_tools.md."""

import pickle
import re

import pytest

from harness.launch import run
from tests.devices import on_each_device
from tests.memory.runs import torchrun_on

SNIPPET = "memory/memory_snapshot.py"
WIDTH, DEPTH, BATCH, STEPS = 64, 4, 32, 3
#: (inputs, outputs) of every nn.Linear in the model
LINEARS = [(WIDTH, 4 * WIDTH), (4 * WIDTH, WIDTH)] * DEPTH + [(WIDTH, 1)]


def tables(text):
    """{rank: {operator: (calls, KiB)}} from the printed tables."""
    found = {}
    for block in re.split(r"^(?=rank \d+:)", text, flags=re.M)[1:]:
        rank = int(re.match(r"rank (\d+)", block)[1])
        found[rank] = {m[1]: (int(m[2]), float(m[3])) for m in
                       re.finditer(r"^  (\S+) +(\d+) calls +([\d.]+)$", block, re.M)}
    return found


@on_each_device(gpus=2, one_gpu=True)
def test_each_rank_shows_what_allocated_its_memory(device, tmp_path):
    """On the CPU, 2 ranks profile what each operator allocated; on GPUs (on one GPU, at
    world size 1), each rank records the CUDA allocator's history instead and writes its
    snapshot, whose segments are expandable under PYTORCH_CUDA_ALLOC_CONF's
    expandable_segments:True."""
    ranks = device.ranks(2)
    result = torchrun_on(device, SNIPPET, ranks)  # on GPUs: NCCL ran in every process
    device.check_output(result)
    if device.cuda:
        for rank, snapshot in enumerate(snapshots(result, ranks)):
            allocations = assert_allocations_recorded(snapshot)
            assert re.search(rf"^snapshot_rank{rank}\.pickle: {len(allocations)} allocations "
                             rf"recorded, {len(snapshot['segments'])} segments, expandable "
                             r"False, peak allocated [\d.]+ MiB$", result.stdout, re.M), \
                result.stdout
        assert "expandable False" in result.stdout
        result = run(SNIPPET, launcher="torchrun", nproc=ranks, workdir=tmp_path / "expandable",
                     env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
        assert all(s["is_expandable"] for snap in snapshots(result, ranks)
                   for s in snap["segments"])
        assert "expandable True" in result.stdout
        return
    found = tables(result.stdout)
    assert sorted(found) == list(range(ranks))
    # aten::mm runs in the backward pass of each Linear layer: twice, for the gradient
    # of its input (batch x inputs) and of its weight (outputs x inputs), 4 bytes each
    if ranks > 1:
        # the same batch size on every rank: the same activations and full gradients
        assert found[0]["aten::mm"] == found[1]["aten::mm"]
        calls, kib = found[0]["aten::mm"]
        assert calls == 2 * len(LINEARS) * STEPS
    else:  # Adam's whole tensors push aten::mm out of the six shown: the backward of each
        calls, kib = found[0]["AddmmBackward0"]  # layer, with what its mm calls allocated
        assert calls == len(LINEARS) * STEPS
    expected = STEPS * sum(4 * (BATCH * i + o * i) for i, o in LINEARS) / 1024
    assert kib == pytest.approx(expected, abs=0.1)


def assert_allocations_recorded(snapshot):
    """A rank's snapshot holds its CUDA allocations, each with its stack, and the segments
    they lie in; returns the allocations."""
    events = [e for trace in snapshot["device_traces"] for e in trace]
    allocations = [e for e in events if e["action"] == "alloc"]
    assert allocations and all(e["frames"] for e in allocations)  # with stacks
    # the largest: a gathered 256 x 64 weight or its gradient, 64 KiB (and more)
    assert max(e["size"] for e in allocations) >= 256 * 64 * 4
    assert snapshot["segments"]
    return allocations


def snapshots(result, ranks):
    """The snapshot each rank of the run wrote, in the order of the ranks."""
    return [pickle.loads((result.workdir / f"snapshot_rank{rank}.pickle").read_bytes())
            for rank in range(ranks)]
