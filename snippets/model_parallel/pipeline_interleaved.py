"""Interleaved and zero-bubble pipeline schedules: measure their bubble, then train.

Run it with one process per rank, two stages on each:
  torchrun --standalone --nproc_per_node=2 pipeline_interleaved.py

Part 1 times 1F1B (one stage per rank), Interleaved1F1B and ZBV (two stages per
rank). A rank's share of the model sleeps FORWARD_SECONDS per micro-batch in its
forward pass and twice that in its backward pass, split over its stages, so the
timings show the schedule, not the machine. Half of a backward pass is the
gradient for the input, half the gradient for the weights: zero-bubble schedules
run the two at different times. Part 2 trains a small model cut into four
stages with both multi-stage schedules, and saves the losses, gradients and
weights. Rank 0 also trains the unsplit model in one process, for comparison.
"""

import os
import sys
import time
from datetime import timedelta

import torch

NEEDS = "2.13"  # the oldest release tried; before 2.8 schedules sum the gradients
if torch.__version__ < f"{NEEDS}.0a0":  # NVIDIA's 2.N.0a0 builds count as 2.N
    print(f"this script needs PyTorch >= {NEEDS} (found {torch.__version__})",
          file=sys.stderr)
    sys.exit(2)

import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import (
    PipelineStage, Schedule1F1B, ScheduleInterleaved1F1B, ScheduleZBVZeroBubble)

FORWARD_SECONDS = 0.05  # one rank's share of the model, for one micro-batch
ROWS_PER_MICROBATCH = 4
MICROBATCHES = [2, 3, 4]
TRIES = 3  # steps timed for each schedule and number of micro-batches
#: name: (schedule, stages per rank)
SCHEDULES = {"1F1B": (Schedule1F1B, 1),
             "Interleaved1F1B": (ScheduleInterleaved1F1B, 2),
             "ZBV": (ScheduleZBVZeroBubble, 2)}
STEPS = 3  # training steps in part 2
BOUNDS = [0, 2, 4, 6, None]  # part 2: stage s holds layers BOUNDS[s] to BOUNDS[s + 1]

#: (kind, stage, start, end); kind: F forward, I input's gradient, W weights' gradient
events = []


def wait_for_input(t):
    """Block this process until ``t`` holds its value (NCCL only queues the receive)."""
    if t.is_cuda:
        torch.cuda.current_stream(t.device).synchronize()


class Work(torch.autograd.Function):
    """Pass the activation on; sleep forward, and again for the input's gradient."""

    @staticmethod
    def forward(ctx, x, stage, seconds):
        ctx.stage, ctx.seconds = stage, seconds
        wait_for_input(x)
        start = time.perf_counter()
        time.sleep(seconds)
        events.append(("F", stage, start, time.perf_counter()))
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        wait_for_input(grad)
        start = time.perf_counter()
        time.sleep(ctx.seconds)
        events.append(("I", ctx.stage, start, time.perf_counter()))
        return grad, None, None


class WeightWork(torch.autograd.Function):
    """Pass a weight on; sleep when its gradient is computed."""

    @staticmethod
    def forward(ctx, weight, stage, seconds):
        ctx.stage, ctx.seconds = stage, seconds
        return weight.view_as(weight)

    @staticmethod
    def backward(ctx, grad):
        start = time.perf_counter()
        time.sleep(ctx.seconds)
        events.append(("W", ctx.stage, start, time.perf_counter()))
        return grad, None, None


class TimedStage(nn.Module):
    def __init__(self, index, seconds):
        super().__init__()
        self.linear = nn.Linear(16, 16)
        self.index, self.seconds = index, seconds

    def forward(self, x):
        weight = WeightWork.apply(self.linear.weight, self.index, self.seconds)
        y = nn.functional.linear(x, weight, self.linear.bias)
        return Work.apply(y, self.index, self.seconds)


def my_stages(name, rank, world, per_rank):
    """The stage indices this rank holds. Interleaved: rank r holds r, r + world, ...
    ZBV (a "V"): rank 0 holds the first and the last stage, and so on inwards."""
    if name == "ZBV":
        return [rank, 2 * world - 1 - rank]
    return [rank + k * world for k in range(per_rank)]


def build_pipeline(name, model, device):
    """This rank's parts of ``model``, a stage for each, and the schedule."""
    rank, world = dist.get_rank(), dist.get_world_size()
    schedule_cls, per_rank = SCHEDULES[name]
    mine = my_stages(name, rank, world, per_rank)
    parts = [model[BOUNDS[i]:BOUNDS[i + 1]].to(device) for i in mine]
    stages = [PipelineStage(part, i, world * per_rank, device)
              for i, part in zip(mine, parts)]
    schedule = schedule_cls(stages, n_microbatches=4, loss_fn=nn.functional.mse_loss)
    return mine, parts, stages, schedule


def barrier(device):
    dist.barrier(device_ids=[device.index] if device.type == "cuda" else None)


def run_step(schedule, stages, x, y):
    """Every rank calls step(): the first stage's rank feeds the inputs, the last
    stage's rank the targets."""
    first = any(stage.is_first for stage in stages)
    last = any(stage.is_last for stage in stages)
    losses = []
    kwargs = {"target": y, "losses": losses} if last else {}
    if first:
        schedule.step(x, **kwargs)
    else:
        schedule.step(**kwargs)
    return losses


def timed_steps(name, microbatches, device):
    """TRIES timed steps of one schedule (after one untimed step that sets it up):
    [(this rank's step time, its events timed from the step's start)]."""
    rank, world = dist.get_rank(), dist.get_world_size()
    schedule_cls, per_rank = SCHEDULES[name]
    example = torch.zeros(ROWS_PER_MICROBATCH, 16, device=device, requires_grad=True)
    stages = [PipelineStage(TimedStage(i, FORWARD_SECONDS / per_rank).to(device), i,
                            world * per_rank, device,
                            input_args=example, output_args=example)
              for i in my_stages(name, rank, world, per_rank)]
    schedule = schedule_cls(stages if per_rank > 1 else stages[0],
                            n_microbatches=microbatches, loss_fn=nn.functional.mse_loss)
    x = torch.randn(microbatches * ROWS_PER_MICROBATCH, 16, device=device)
    tries = []
    for _ in range(1 + TRIES):
        events.clear()
        barrier(device)  # start together
        start = time.perf_counter()
        run_step(schedule, stages, x, torch.zeros_like(x))
        barrier(device)  # the step ends when the last rank is done
        seconds = time.perf_counter() - start
        mine = [(k, s, t0 - start, t1 - start) for k, s, t0, t1 in events]
        tries.append((seconds, mine))
    return tries[1:]


def labelled(events):
    """This rank's actions in the order it ran them: (kind, stage, micro-batch)."""
    seen = {}
    actions = []
    for kind, stage, _, _ in sorted(events, key=lambda e: e[2]):
        i = seen[(kind, stage)] = seen.get((kind, stage), -1) + 1
        actions.append((kind, stage, i))
    return actions


def planned_idle(orders, last_stage, split_backward):
    """The idle share of the orders the ranks ran, laid on a clock on which every
    forward, input gradient and weight gradient of a stage takes one tick.

    An action starts when its rank is free and what it needs is done: a forward
    needs the previous stage's forward, an input gradient the next stage's. Without
    split_backward, a stage sends its input gradient on only once its whole
    backward pass, weights included, is done."""
    queues = [list(order) for order in orders]
    clock = [0] * len(orders)
    finished = {}  # (kind, stage, micro-batch) -> tick at which it ended
    while any(queues):
        progress = False
        for rank, queue in enumerate(queues):
            while queue:
                kind, stage, i = queue[0]
                if kind == "F":
                    needs = [("F", stage - 1, i)] if stage > 0 else []
                elif kind == "W":
                    needs = [("I", stage, i)]
                elif stage == last_stage:
                    needs = [("F", stage, i)]
                elif split_backward:
                    needs = [("I", stage + 1, i)]
                else:  # the whole backward pass of the next stage
                    needs = [("I", stage + 1, i), ("W", stage + 1, i)]
                if any(need not in finished for need in needs):
                    break  # what it needs is not done yet
                ready = max([clock[rank], *(finished[need] for need in needs)])
                clock[rank] = ready + 1
                finished[queue.pop(0)] = clock[rank]
                progress = True
        if not progress:
            raise RuntimeError(f"the recorded orders cannot all have run: {orders}")
    busy = sum(len(order) for order in orders)
    return 1 - busy / (len(orders) * max(clock))


def build_model():
    torch.manual_seed(0)  # every rank builds the same model, then keeps its stages
    return nn.Sequential(
        nn.Linear(16, 32), nn.Tanh(),  # stage 0: layers 0 and 1
        nn.Linear(32, 32), nn.Tanh(),  # stage 1: layers 2 and 3
        nn.Linear(32, 32), nn.Tanh(),  # stage 2: layers 4 and 5
        nn.Linear(32, 1),              # stage 3: layer 6
    )


def make_batch():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(32, 16, generator=g)
    y = torch.sin(x.sum(dim=1, keepdim=True))
    return x, y


def train(name, device):
    """Train the four-stage model with a schedule of two stages per rank. Returns this
    rank's stage indices, weights and first gradients, and the losses (on the rank of
    the last stage)."""
    mine, parts, stages, schedule = build_pipeline(name, build_model(), device)
    params = [p for part in parts for p in part.parameters()]
    optimizer = torch.optim.SGD(params, lr=0.1)
    x, y = (t.to(device) for t in make_batch())
    history = []
    for step in range(STEPS):
        optimizer.zero_grad()
        losses = run_step(schedule, stages, x, y)
        if step == 0:
            grads = {n: p.grad.cpu()
                     for part in parts for n, p in part.named_parameters()}
        optimizer.step()
        if losses:
            history.append(torch.stack(losses).mean().item())
    state = {k: v.cpu() for part in parts for k, v in part.state_dict().items()}
    return mine, state, grads, history


def train_in_one_process():
    """The unsplit model, trained on the whole batch in one process on the CPU: the
    losses of each step."""
    model = build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = make_batch()
    history = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        history.append(loss.item())
    return history


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    # Give up after 2 minutes, not the default 10, if a rank never arrives.
    dist.init_process_group(backend, timeout=timedelta(minutes=2))
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        results = []
        for name, (_, per_rank) in SCHEDULES.items():
            for m in MICROBATCHES:
                everyone = [None] * world
                dist.all_gather_object(everyone, timed_steps(name, m, device))
                tries = list(zip(*everyone))  # per try: every rank's (seconds, events)
                # the quickest try: a busy machine only ever adds time
                quickest = min(tries, key=lambda e: max(seconds for seconds, _ in e))
                results.append((name, per_rank, m, quickest))
        trained = {}
        for name in ("Interleaved1F1B", "ZBV"):
            everyone = [None] * world
            dist.all_gather_object(everyone, train(name, device))
            trained[name] = everyone
        if rank != 0:
            return
        print(f"{world} ranks; per micro-batch a rank sleeps {FORWARD_SECONDS} s "
              "forward and twice that backward")
        print(f"{'schedule':<16}{'v':>2}{'m':>4}{'step time':>11}"
              f"{'idle (measured)':>17}{'planned':>9}{'(p-1)/(v*m+p-1)':>17}")
        for name, v, m, everyone in results:
            step = max(seconds for seconds, _ in everyone)
            busy = sum(t1 - t0 for _, events in everyone for *_, t0, t1 in events)
            idle = 1 - busy / (world * step)
            planned = planned_idle([labelled(events) for _, events in everyone],
                                   last_stage=world * v - 1,
                                   split_backward=name == "ZBV")
            formula = (world - 1) / (v * m + world - 1)
            print(f"{name:<16}{v:>2}{m:>4}{step:>9.2f} s"
                  f"{idle:>16.1%}{planned:>9.1%}{formula:>17.1%}")
        print("\nThe model of four stages, trained for "
              f"{STEPS} steps on the same batch (the loss of each step):")
        saved = {}
        for name, everyone in trained.items():
            held = "; ".join(f"rank {r}: {', '.join(map(str, mine))}"
                             for r, (mine, *_) in enumerate(everyone))
            losses = next(history for *_, history in everyone if history)
            print(f"{name:<16}{' '.join(f'{loss:.6f}' for loss in losses)}"
                  f"   (stages {held})")
            saved[name] = {"model": {}, "first_grads": {}, "losses": losses}
            for _, state, grads, _ in everyone:
                saved[name]["model"].update(state)
                saved[name]["first_grads"].update(grads)
        losses = train_in_one_process()
        print(f"{'one process':<16}{' '.join(f'{loss:.6f}' for loss in losses)}"
              "   (the unsplit model)")
        torch.save(saved, "pipeline_interleaved.pt")
        print("saved pipeline_interleaved.pt")
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
