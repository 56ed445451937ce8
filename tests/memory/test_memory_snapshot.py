"""snippets/memory/memory_snapshot.py, shown on docs/memory/memory_tools.md."""

import pickle
import re

import pytest

from harness.launch import run
from tests.devices import on_each_device
from tests.memory.runs import torchrun_on
from tests.on_gpus import NcclLogs

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


@on_each_device(gpus=1)
def test_each_rank_shows_what_allocated_its_memory(device):
    """On the CPU, 2 ranks profile what each operator allocated; on one GPU, at world size
    1, the rank records the CUDA allocator's history instead and writes its snapshot."""
    ranks = device.ranks(2)
    result = torchrun_on(device, SNIPPET, ranks)  # on GPUs: NCCL ran in every process
    device.check_output(result)
    if device.cuda:
        snapshot = pickle.loads((result.workdir / "snapshot_rank0.pickle").read_bytes())
        allocations = assert_allocations_recorded(snapshot)
        assert re.search(rf"^snapshot_rank0\.pickle: {len(allocations)} allocations recorded, "
                         rf"{len(snapshot['segments'])} segments, expandable False, "
                         r"peak allocated [\d.]+ MiB$", result.stdout, re.M), result.stdout
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


def gpu_snapshots(tmp_path, env=None):
    result = run(SNIPPET, launcher="torchrun", nproc=2, workdir=tmp_path, env=env)
    snapshots = []
    for rank in range(2):
        with open(tmp_path / f"snapshot_rank{rank}.pickle", "rb") as f:
            snapshots.append(pickle.load(f))
    return result, snapshots


@pytest.mark.multigpu(2)
def test_on_two_gpus_each_rank_writes_a_snapshot_of_its_allocations(tmp_path):
    logs = NcclLogs()
    result, snapshots = gpu_snapshots(tmp_path / "default", env=logs.env)
    logs.assert_nccl_ran(2)
    for rank, snapshot in enumerate(snapshots):
        allocations = assert_allocations_recorded(snapshot)
        line = f"snapshot_rank{rank}.pickle: {len(allocations)} allocations recorded"
        assert line in result.stdout
    assert "expandable False" in result.stdout
    result, snapshots = gpu_snapshots(
        tmp_path / "expandable", env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    assert all(s["is_expandable"] for snap in snapshots for s in snap["segments"])
    assert "expandable True" in result.stdout
