"""Profile DDP training on every rank: a trace file per rank; communication vs compute.

  torchrun --standalone --nproc_per_node=2 profiling.py

Writes trace_rank<N>.json (open it in https://ui.perfetto.dev or chrome://tracing) and
prints, for every rank, the time of each phase and of the all-reduces, and how much of
the all-reduce time overlapped with the backward pass.
"""

import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import (
    DeviceType,
    ProfilerActivity,
    profile,
    record_function,
    schedule,
)

#: Names of the events that are communication: gloo's own, and NCCL's GPU kernels.
COMMUNICATION = ("gloo:", "ncclDevKernel", "ncclKernel")
#: The profiler's own range around each step, and the ranges the loop names.
STEP, PHASES = "ProfilerStep*", ("forward", "backward", "optimizer")


def merged(spans):
    """The union of (start, end) spans, as disjoint spans: when any one was running."""
    union = []
    for start, end in sorted(spans):
        if union and start <= union[-1][1]:
            union[-1][1] = max(union[-1][1], end)
        else:
            union.append([start, end])
    return union


def summarise(events):
    """Milliseconds of the steps and of each phase, all-reduce count and time (when at
    least one was running), and the share of that time inside the backward pass.

    Ranges are counted once, on the CPU side: as the training thread ran them. On GPUs
    the profiler also records a copy of each range on the GPU (device_type CUDA), which
    spans the kernels launched inside it; counting both would count every range twice.
    """
    spans = {}
    for e in events:
        if e.device_type == DeviceType.CPU or e.name.startswith(COMMUNICATION):
            spans.setdefault(e.name, []).append((e.time_range.start, e.time_range.end))
    calls = [
        span
        for name, s in spans.items()
        if name.startswith(COMMUNICATION)
        for span in s
    ]
    comm = merged(calls)  # all-reduces can run at the same time: count that time once
    backward = spans.get("backward", [])
    overlap = sum(
        max(0, min(end, b_end) - max(start, b_start))
        for start, end in comm
        for b_start, b_end in backward
    )
    total = {
        name: sum(end - start for start, end in spans.get(name, [])) / 1e3
        for name in (STEP, *PHASES)
    }
    comm_time = sum(end - start for start, end in comm)
    return {
        **total,
        "calls": len(calls),
        "comm": comm_time / 1e3,
        "overlap": overlap / comm_time if comm_time else 0.0,
    }


def main():
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl")
        activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
        activities = [ProfilerActivity.CPU]
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        torch.manual_seed(0)
        model = DDP(nn.Sequential(*[nn.Linear(512, 512) for _ in range(4)]).to(device))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        trace = f"trace_rank{rank}.json"  # one file per rank, named by rank
        steps = schedule(wait=1, warmup=1, active=3)  # skip 1 step, warm up 1, record 3
        with profile(
            activities=activities,
            schedule=steps,
            on_trace_ready=lambda prof: prof.export_chrome_trace(trace),
        ) as prof:
            for _ in range(5):
                x = torch.randn(64, 512, device=device)
                with record_function("forward"):  # named spans make the trace readable
                    loss = model(x).pow(2).mean()
                with record_function("backward"):
                    loss.backward()
                with record_function("optimizer"):
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                prof.step()  # tell the schedule that a step ended
        rows = [None] * world
        dist.all_gather_object(rows, summarise(prof.events()))
        if rank == 0:
            print(
                f"3 steps recorded on each of {world} ranks; "
                f"traces trace_rank0.json ... trace_rank{world - 1}.json"
            )
            print(
                f"{'rank':>4}{'3 steps':>11}{'forward':>11}{'backward':>11}"
                f"{'optimizer':>11}{'all-reduces':>13}{'their time':>12}"
                "  during backward"
            )
            for r, s in enumerate(rows):
                print(
                    f"{r:>4}{s[STEP]:>8.1f} ms{s['forward']:>8.1f} ms"
                    f"{s['backward']:>8.1f} ms{s['optimizer']:>8.1f} ms"
                    f"{s['calls']:>13}{s['comm']:>9.1f} ms  {s['overlap']:>6.0%}"
                )
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
