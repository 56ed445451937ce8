"""snippets/performance/profiling.py, shown on docs/performance/profiling.md.

Run once with the debug variables the page suggests, so that their effect is checked too.
"""

import json
import re

import pytest
from torch.autograd.profiler_util import FunctionEvent
from torch.profiler import DeviceType

from harness.launch import run, snippet_code
from tests.devices import on_each_device

SNIPPET = "performance/profiling.py"
RANKS = 2
DEBUG = {"TORCH_DISTRIBUTED_DEBUG": "INFO", "TORCH_CPP_LOG_LEVEL": "INFO"}
ROW = re.compile(
    r"^ +(\d+) +([\d.]+) ms +([\d.]+) ms +([\d.]+) ms +([\d.]+) ms +(\d+) +([\d.]+) ms +(\d+)%$",
    re.M,
)


def rows(stdout):
    """{rank: (steps, forward, backward, optimizer, all-reduces, their ms, % in backward)}"""
    return {
        int(rank): (*(float(v) for v in ms[:4]), int(ms[4]), float(ms[5]), int(ms[6]))
        for rank, *ms in ROW.findall(stdout)
    }


def trace_events(path, prefix, category=None):
    events = json.loads(path.read_text())["traceEvents"]
    return [
        e
        for e in events
        if e.get("name", "").startswith(prefix) and category in (None, e.get("cat"))
    ]


def check_run(result, comm_prefix, ranks=RANKS, communicates=True):
    """``communicates``: the trace holds the all-reduces (not NCCL's at world size 1)."""
    assert f"3 steps recorded on each of {ranks} ranks" in result.stdout
    table = rows(result.stdout)
    assert sorted(table) == list(range(ranks))
    for rank, (steps, forward, backward, optimizer, count, comm, share) in table.items():
        trace = result.workdir / f"trace_rank{rank}.json"  # one trace per rank, named by rank
        assert len(trace_events(trace, "forward", "user_annotation")) == 3  # the 3 recorded steps
        assert len(trace_events(trace, comm_prefix)) == count  # the all-reduces it counted
        assert count % 3 == 0  # the same number of buckets in every step
        # Each range counted once: the phases lie inside the steps, the share is a share.
        assert min(forward, backward, optimizer) > 0
        if communicates:
            assert count > 0 and comm > 0
        assert forward + backward + optimizer <= steps + 0.15  # 0.05 ms of rounding each
        assert 0 <= share <= 100


def event(name, start, end, device=DeviceType.CPU):
    return FunctionEvent(id=0, name=name, thread=0, start_us=start, end_us=end, device_type=device)


def test_each_range_is_counted_once_though_the_gpu_holds_a_copy():
    """On GPUs, prof.events() holds each record_function range twice: on the CPU, and as
    a device-side copy (device_type CUDA) spanning the kernels launched inside it."""
    summarise = snippet_code(SNIPPET)["summarise"]
    events = []
    for step in range(3):  # µs: 100 per step, on the CPU; the GPU runs 5 µs behind
        t = 100 * step
        for name, start, end in (("ProfilerStep*", 0, 100), ("forward", 0, 20),
                                 ("backward", 20, 80), ("optimizer", 80, 90)):
            events.append(event(name, t + start, t + end))
            events.append(event(name, t + start + 5, t + end + 5, DeviceType.CUDA))
        # all-reduce kernels: two at the same time inside the backward pass, one half after it
        for start, end in ((40, 60), (50, 60), (70, 90)):
            events.append(event("ncclDevKernel_AllReduce_Sum_f32", t + start, t + end,
                                DeviceType.CUDA))
    s = summarise(events)
    assert (s["ProfilerStep*"], s["forward"], s["backward"], s["optimizer"]) == pytest.approx(
        (0.3, 0.06, 0.18, 0.03))
    assert (s["calls"], s["comm"]) == (9, pytest.approx(0.12))  # 40 µs per step with one running
    assert s["overlap"] == pytest.approx(0.75)  # (20 + 10) of those 40 µs


@on_each_device(gpus=RANKS, one_gpu=True)
def test_one_trace_per_rank_and_ddp_settings_logged(tmp_path, device):
    """On GPUs, run with NCCL's log instead: NCCL's kernels are traced, and the model's.
    At world size 1 NCCL launches no kernel for DDP's in-place all-reduce (nothing to add:
    ncclLaunchOneRank returns at once), so the trace holds none; gloo still records one."""
    ranks = device.ranks(RANKS)
    result = run(SNIPPET, launcher="torchrun", nproc=ranks, workdir=tmp_path,
                 env=device.pick(DEBUG, {"NCCL_DEBUG": "INFO"}))
    device.check_output(result)
    check_run(result, device.pick("gloo:all_reduce", ("ncclDevKernel", "ncclKernel")), ranks,
              communicates=ranks > 1 or not device.cuda)
    if device.cuda:
        assert "NCCL INFO" in result.text
        for rank in range(ranks):  # CUDA activity: the profiler traced the GPU's kernels
            assert trace_events(tmp_path / f"trace_rank{rank}.json", "", "kernel")
    else:
        for steps, *_, comm, _ in rows(result.stdout).values():
            assert comm <= steps + 0.1  # gloo's all-reduces run inside the steps, on the CPU
        assert "[c10d] The debug level is set to INFO." in result.text
        for rank in range(ranks):
            assert f"[Rank {rank}]: DDP Initialized with:" in result.text
        assert "bucket_cap_bytes: 26214400" in result.text
