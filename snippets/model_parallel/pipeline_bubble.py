"""Measure the pipeline bubble of GPipe and 1F1B, and draw what every rank did.

Run it with one process per stage:
  torchrun --standalone --nproc_per_node=2 pipeline_bubble.py

Each stage's work takes a fixed time: it sleeps FORWARD_SECONDS in its forward
pass and twice that in its backward pass, like a layer whose backward costs
twice its forward. The sleeps stand in for real computation, so the timings
show the schedule, not the speed or the noise of the machine. On GPUs, each
stage first waits until its input has arrived on the GPU (see wait_for_input).
"""

import os
import sys
import time

import torch

NEEDS = "2.8"  # before 2.8 a schedule sums the micro-batches' gradients
if torch.__version__ < f"{NEEDS}.0a0":  # NVIDIA's 2.N.0a0 builds count as 2.N
    print(f"this script needs PyTorch >= {NEEDS} (found {torch.__version__})",
          file=sys.stderr)
    sys.exit(2)

import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

FORWARD_SECONDS = 0.025
ROWS_PER_MICROBATCH = 4
MICROBATCHES = [2, 4, 8]
DRAW_MICROBATCHES = 4
TRIES = 3  # steps timed for each schedule and number of micro-batches
SCHEDULES = {"GPipe": ScheduleGPipe, "1F1B": Schedule1F1B}

events = []  # ("F" or "B", start, end) of every forward and backward this rank ran


def wait_for_input(t):
    """Block this process until ``t`` holds its value.

    With gloo, wait() on a receive returns once the data is there. With NCCL it
    returns at once, having only told the GPU to wait: without this, a stage would
    start its work (a sleep, on the CPU) before its input had arrived, and never look
    idle.
    """
    if t.is_cuda:
        torch.cuda.current_stream(t.device).synchronize()


class Work(torch.autograd.Function):
    """Pass the input on, taking a fixed time forward and twice as long backward."""

    @staticmethod
    def forward(ctx, x):
        wait_for_input(x)  # the activation from the previous stage
        start = time.perf_counter()
        time.sleep(FORWARD_SECONDS)
        events.append(("F", start, time.perf_counter()))
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        wait_for_input(grad)  # the gradient from the next stage
        start = time.perf_counter()
        time.sleep(2 * FORWARD_SECONDS)
        events.append(("B", start, time.perf_counter()))
        return grad


class Stage(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(16, 16)

    def forward(self, x):
        return Work.apply(self.linear(x))


def barrier(device):
    """Wait for every rank. On GPUs, name this process's GPU: NCCL would guess it."""
    dist.barrier(device_ids=[device.index] if device.type == "cuda" else None)


def timed_step(schedule_cls, microbatches, device):
    """One training step: this rank's step time, and its events timed from the start."""
    rank, world = dist.get_rank(), dist.get_world_size()
    # Examples of a micro-batch's input and output spare the stage a trial run; they
    # must require grad, or no gradient is sent back through them.
    example = torch.zeros(ROWS_PER_MICROBATCH, 16, device=device, requires_grad=True)
    stage = PipelineStage(Stage().to(device), stage_index=rank, num_stages=world,
                          device=device, input_args=example, output_args=example)
    schedule = schedule_cls(stage, n_microbatches=microbatches,
                            loss_fn=nn.functional.mse_loss)
    x = torch.randn(microbatches * ROWS_PER_MICROBATCH, 16, device=device)
    events.clear()
    barrier(device)  # start together
    start = time.perf_counter()
    if rank == 0:
        schedule.step(x)
    elif rank == world - 1:
        schedule.step(target=torch.zeros_like(x))
    else:
        schedule.step()
    barrier(device)  # the step ends when the last rank is done
    seconds = time.perf_counter() - start
    return seconds, [(kind, t0 - start, t1 - start) for kind, t0, t1 in events]


def label(events):
    """Name the events F0, F1, ..., B0, ...: schedules run micro-batches in order."""
    seen = {"F": 0, "B": 0}
    names = []
    for kind, _, _ in sorted(events, key=lambda e: e[1]):
        names.append(f"{kind}{seen[kind]}")
        seen[kind] += 1
    return names


def draw(order):
    """Lay each rank's recorded order on a clock: a forward takes 1 tick, a backward 2.

    An action starts when its rank is free and the other stage has finished the
    same micro-batch: the previous stage its forward, the next stage its backward.
    """
    world = len(order)
    queues = [list(names) for names in order]
    rows = [[] for _ in range(world)]
    finished = {}  # (rank, name) -> tick at which it ended
    while any(queues):
        progress = False
        for rank, queue in enumerate(queues):
            while queue:
                name = queue[0]
                needs = (rank - 1, name) if name[0] == "F" else (rank + 1, name)
                if 0 <= needs[0] < world and needs not in finished:
                    break  # wait for the other stage
                start = max(len(rows[rank]), finished.get(needs, 0))
                rows[rank] += [".."] * (start - len(rows[rank]))
                rows[rank] += [name.ljust(2)] * (1 if name[0] == "F" else 2)
                finished[(rank, name)] = len(rows[rank])
                queue.pop(0)
                progress = True
        if not progress:
            raise RuntimeError(f"the recorded orders cannot all have run: {order}")
    end = max(len(row) for row in rows)
    return [row + [".."] * (end - len(row)) for row in rows]


def peak_in_flight(names):
    """How many micro-batches' activations a rank holds at most: forwards not yet
    matched by their backward."""
    held = peak = 0
    for name in names:
        held += 1 if name[0] == "F" else -1
        peak = max(peak, held)
    return peak


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    dist.init_process_group(backend)
    try:
        world = dist.get_world_size()
        timed_step(ScheduleGPipe, 2, device)  # warm-up: the first step sets up links
        results = []
        for name, schedule_cls in SCHEDULES.items():
            for m in MICROBATCHES:
                tries = []
                for _ in range(TRIES):
                    seconds, mine = timed_step(schedule_cls, m, device)
                    everyone = [None] * world
                    dist.all_gather_object(everyone, (seconds, mine))
                    tries.append(everyone)
                # the quickest try: a busy machine only ever adds time
                quickest = min(tries, key=lambda e: max(seconds for seconds, _ in e))
                results.append((name, m, quickest))
        if dist.get_rank() != 0:
            return
        print(f"{world} stages; per micro-batch a forward takes {FORWARD_SECONDS} s, "
              "a backward twice that")
        print(f"{'schedule':<9}{'micro-batches':>14}{'step time':>11}"
              f"{'idle (measured)':>17}{'(p-1)/(m+p-1)':>15}{'held by rank 0':>16}")
        for name, m, everyone in results:
            step = max(seconds for seconds, _ in everyone)
            busy = sum(t1 - t0 for _, events in everyone for _, t0, t1 in events)
            idle = 1 - busy / (world * step)
            formula = (world - 1) / (m + world - 1)
            held = peak_in_flight(label(everyone[0][1]))
            print(f"{name:<9}{m:>14}{step:>9.2f} s"
                  f"{idle:>16.1%}{formula:>15.1%}{held:>16}")
        for name, m, everyone in results:
            if m == DRAW_MICROBATCHES:
                print(f"\n{name}, {m} micro-batches "
                      "(F3 = forward of micro-batch 3; .. = idle):")
                order = [label(events) for _, events in everyone]
                for rank, row in enumerate(draw(order)):
                    print(f"rank {rank} | {' '.join(row)}")
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
