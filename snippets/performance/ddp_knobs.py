"""Measure what DDP's arguments change: all-reduce calls, bytes, gradient memory.

  torchrun --standalone --nproc_per_node=2 ddp_knobs.py

A communication hook wraps DDP's own all-reduce and records every bucket it is given.
"""

import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(nn.Module):
    """Eight 256x256 linear layers (2 MB of gradients) and a head forward() may skip."""

    def __init__(self, use_aux=True):
        super().__init__()
        self.body = nn.Sequential(*[nn.Linear(256, 256) for _ in range(8)])
        self.aux = nn.Linear(256, 1)
        self.use_aux = use_aux

    def forward(self, x):
        y = self.body(x).sum(1)
        return y + self.aux(x).squeeze(1) if self.use_aux else y


def recording_allreduce(state, bucket):
    """DDP's default all-reduce; also records the bucket's size and memory address."""
    buffer = bucket.buffer()
    state.append(
        (buffer.numel() * buffer.element_size(), buffer.untyped_storage().data_ptr())
    )
    return default_hooks.allreduce_hook(None, bucket)


def steps(device, steps=3, use_aux=True, **ddp_args):
    """Train a few steps; return DDP and each step's (bytes, storage) per all-reduce."""
    torch.manual_seed(0)
    model = DDP(Net(use_aux).to(device), **ddp_args)
    buckets = []
    model.register_comm_hook(state=buckets, hook=recording_allreduce)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    per_step = []
    for _ in range(steps):
        buckets.clear()
        model(torch.randn(16, 256, device=device)).pow(2).mean().backward()
        per_step.append(list(buckets))
        optimizer.step()
        optimizer.zero_grad()
    return model, per_step


def summarise_sizes(sizes):
    """'264,196 + 7 x 263,168' for [264196, 263168, ..., 263168]."""
    runs = []
    for size in sizes:
        if runs and runs[-1][1] == size:
            runs[-1][0] += 1
        else:
            runs.append([1, size])
    return " + ".join(f"{size:,}" if n == 1 else f"{n} x {size:,}" for n, size in runs)


def bucket_sizes(device, rank):
    if rank == 0:
        print(
            f"{'bucket_cap_mb':<14}{'all-reduces: step 1':>20}{'later':>6}"
            "   bytes per all-reduce"
        )
    models = []
    for cap in (None, 1, 0.25):
        model, per_step = steps(device, bucket_cap_mb=cap)
        models.append(model)
        if rank == 0:
            name = "25 (default)" if cap is None else str(cap)
            print(
                f"{name:<14}{len(per_step[0]):>20}{len(per_step[-1]):>6}   "
                + summarise_sizes([size for size, _ in per_step[-1]])
            )
    return models


def bucket_views(device, rank):
    models = []
    if rank == 0:
        print(
            f"\n{'gradient_as_bucket_view':<25}{'gradients inside buckets':>26}"
            f"{'extra gradient bytes':>22}"
        )
    for view in (False, True):
        model, per_step = steps(device, gradient_as_bucket_view=view)
        models.append(model)
        model(torch.randn(16, 256, device=device)).pow(
            2
        ).mean().backward()  # gradients to inspect
        bucket_memory = {storage for _, storage in per_step[-1]}
        grads = [p.grad for p in model.parameters()]
        inside = [g.untyped_storage().data_ptr() in bucket_memory for g in grads]
        extra = sum(
            g.numel() * g.element_size() for g, ok in zip(grads, inside) if not ok
        )
        if rank == 0:
            print(f"{str(view):<25}{f'{sum(inside)} of {len(grads)}':>26}{extra:>22,}")
    return models


def unused_parameters(device, rank):
    cases = [
        (False, {}),
        (False, {"find_unused_parameters": True}),
        (False, {"static_graph": True}),
        (True, {"find_unused_parameters": True}),
    ]  # PyTorch warns: nothing is unused
    for use_aux, args in cases:
        name = ", ".join(f"{k}=True" for k in args) or "(no argument)"
        try:
            _, per_step = steps(device, use_aux=use_aux, **args)
            outcome = (
                f"trains; {len(per_step[-1])} all-reduces, "
                f"{sum(size for size, _ in per_step[-1]):,} bytes per step"
            )
        except RuntimeError as error:  # raised by the NEXT forward, on every rank
            outcome = "fails: " + str(error).split(". ")[0]
        if rank == 0:
            if args == {}:
                print("\nforward() skips a head of 257 parameters (1,028 bytes):")
            if use_aux:
                print("forward() uses every parameter:")
            print(f"  {name:<30}{outcome}")


def main():
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl")
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    rank = dist.get_rank()
    try:
        models = bucket_sizes(device, rank) + bucket_views(device, rank)
        diff = max(
            (a - b).abs().max().item()
            for m in models[1:]
            for a, b in zip(models[0].parameters(), m.parameters())
        )
        if rank == 0:
            print(
                f"weights after 3 steps, largest difference between these "
                f"{len(models)} runs: {diff:.1e}"
            )
        unused_parameters(device, rank)
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
