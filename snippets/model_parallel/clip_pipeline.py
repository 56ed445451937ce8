"""Gradient clipping in a pipeline: every stage clips by the norm of the whole model.

Run it with one process per stage, two:
  torchrun --standalone --nproc_per_node=2 clip_pipeline.py

It trains the same model three ways, clipping the gradients at every step: in one
process, as a pipeline that clips by the norm of all the stages' gradients together,
and as a pipeline whose stages each clip by the norm of their own gradients.
"""

import math
import os
import sys
import time
from datetime import timedelta

import torch

NEEDS = "2.10"  # the oldest release this script was run with
if torch.__version__ < f"{NEEDS}.0a0":  # NVIDIA's 2.N.0a0 builds count as 2.N
    print(f"this script needs PyTorch >= {NEEDS} (found {torch.__version__})",
          file=sys.stderr)
    sys.exit(2)

import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe
from torch.nn.utils import clip_grads_with_norm_, get_total_norm

MICROBATCHES = 4
STEPS = 3
MAX_NORM = 0.1  # smaller than the gradients' norm, so that every step clips
SPLIT = 4  # stage 1 starts at layer 4


def build_model():
    torch.manual_seed(0)  # every rank builds the same model, then keeps its own slice
    return nn.Sequential(
        nn.Linear(16, 32), nn.Tanh(),  # layers 0 and 1
        nn.Linear(32, 32), nn.Tanh(),  # layers 2 and 3
        nn.Linear(32, 32), nn.Tanh(),  # layers 4 and 5
        nn.Linear(32, 1),              # layer 6
    )


def make_batch():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(32, 16, generator=g)
    y = torch.sin(x.sum(dim=1, keepdim=True))
    return x, y


def clip_grad_norm_pipeline(parameters, max_norm, norm_type=2.0, group=None):
    """clip_grad_norm_ over all the stages of a pipeline: every stage calls it with its
    own parameters. Returns this stage's own norm and the norm of the whole model."""
    parameters = list(parameters)
    own = get_total_norm([p.grad for p in parameters if p.grad is not None], norm_type)
    total = own.clone()
    if math.isinf(norm_type):  # the largest value of any stage
        dist.all_reduce(total, op=dist.ReduceOp.MAX, group=group)
    else:  # add up the stages' sums of p-th powers, then take the p-th root
        total **= norm_type
        dist.all_reduce(total, op=dist.ReduceOp.SUM, group=group)
        total **= 1.0 / norm_type
    clip_grads_with_norm_(parameters, max_norm, total)  # the same factor on every stage
    return own, total


def one_process(device):
    """The whole model and batch with clip_grad_norm_: what the pipelines must match."""
    model = build_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = (t.to(device) for t in make_batch())
    losses, norms = [], []
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
        optimizer.step()
        losses.append(loss.item())
        norms.append([norm.item()])
    return {"losses": losses, "norms": norms,
            "model": {k: v.cpu() for k, v in model.state_dict().items()}}


def pipeline(how, rank, world, device):
    """Train as a 2-stage pipeline; `how` stages clip: "global norm" or "per stage"."""
    bounds = [0, SPLIT, None]
    part = build_model()[bounds[rank]:bounds[rank + 1]].to(device)
    stage = PipelineStage(part, stage_index=rank, num_stages=world, device=device)
    schedule = ScheduleGPipe(stage, n_microbatches=MICROBATCHES,
                             loss_fn=nn.functional.mse_loss)
    optimizer = torch.optim.SGD(part.parameters(), lr=0.1)
    x, y = (t.to(device) for t in make_batch())
    losses, norms = [], []
    for _ in range(STEPS):
        optimizer.zero_grad()
        micro_losses = []  # filled on the last stage
        if rank == 0:
            schedule.step(x)
        else:
            schedule.step(target=y, losses=micro_losses)
        if how == "global norm":
            own, used = clip_grad_norm_pipeline(part.parameters(), MAX_NORM)
        else:  # each stage alone, as if it were the whole model
            used = torch.nn.utils.clip_grad_norm_(part.parameters(), MAX_NORM)
        optimizer.step()
        loss = torch.stack(micro_losses).mean() if micro_losses else torch.zeros(
            (), device=device)
        dist.broadcast(loss, src=world - 1)  # the loss lives on the last stage
        seen = [torch.zeros_like(used) for _ in range(world)]
        dist.all_gather(seen, used)  # the norm each stage clipped by
        losses.append(loss.item())
        norms.append([n.item() for n in seen])
    # the whole model, gathered from the stages
    everyone = [None] * world
    dist.all_gather_object(everyone, {k: v.cpu() for k, v in part.state_dict().items()})
    return {"losses": losses, "norms": norms,
            "model": {k: v for state in everyone for k, v in state.items()}}


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    dist.init_process_group(backend, timeout=timedelta(seconds=60))
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        if world != 2:
            raise SystemExit("run it with 2 processes: 2 stages")
        runs = {"one process": one_process(device)}  # every rank; rank 0 prints it
        for how in ("global norm", "per stage"):
            runs[how] = pipeline(how, rank, world, device)
        if rank == 0:
            print(f"max_norm {MAX_NORM}")
            for how, run in runs.items():
                for step, (loss, norms) in enumerate(zip(run["losses"], run["norms"])):
                    used = ", ".join(f"{n:.6f}" for n in norms)
                    who = "" if how == "one process" else "stages "
                    print(f"{how:12} step {step}: loss {loss:.6f}, "
                          f"{who}clipped by {used}")
            one = runs["one process"]["model"]
            for how in ("global norm", "per stage"):
                diff = max((runs[how]["model"][k] - v).abs().max().item()
                           for k, v in one.items())
                print(f"{how}: largest weight difference from one process {diff:.1e}")
            torch.save(runs, "clip_pipeline.pt")
            print("saved clip_pipeline.pt")
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
