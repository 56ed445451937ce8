"""FSDP2's knobs, counted: collectives, prefetching, clipping, activation checkpointing.

  torchrun --standalone --nproc_per_node=2 fsdp2_tuning.py

Runs one training step at a time on the same model and batch, and prints what
each knob changes in numbers: how many all-gathers and reduce-scatters a step
makes and how many bytes they move, how early prefetching issues them, the
gradient norm that clip_grad_norm_ computes from the shards, and the bytes
saved for the backward pass with and without activation checkpointing.
"""

import collections
import os
import sys
import time

import torch

NEEDS = "2.10"  # FSDP2 on CPUs: 2.6 lacks what it needs, 2.8 sums gradients
if torch.__version__ < f"{NEEDS}.0a0":  # NVIDIA's 2.N.0a0 builds count as 2.N
    print(f"this script needs PyTorch >= {NEEDS} (found {torch.__version__})",
          file=sys.stderr)
    sys.exit(2)

import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import \
    checkpoint_wrapper
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.data import TensorDataset
from torch.utils.flop_counter import FlopCounterMode

WIDTH, DEPTH = 64, 4
GLOBAL_BATCH = 64


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.ff = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                nn.Linear(4 * width, width))

    def forward(self, x):
        return x + self.ff(self.norm(x))


class Net(nn.Module):
    def __init__(self, width=WIDTH, depth=DEPTH):
        super().__init__()
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.head = nn.Linear(width, 1)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def make_dataset():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(512, WIDTH, generator=g)
    noise = 0.1 * torch.randn(512, 1, generator=g)
    y = torch.tanh(x[:, :8].sum(dim=1, keepdim=True)) + noise
    return TensorDataset(x, y)


def build(device, prefetch=False, checkpointing=False):
    torch.manual_seed(0)
    model = Net().to(device)
    if checkpointing:  # recompute each block's activations in the backward pass
        for i, block in enumerate(model.blocks):
            model.blocks[i] = checkpoint_wrapper(block)
    # All ranks, on this device. Without mesh=, fully_shard takes the accelerator
    # PyTorch was built for (CUDA, say), even where no GPU is visible.
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    if prefetch:  # issue the next block's all-gather before this block computes
        blocks = list(model.blocks)
        for i, block in enumerate(blocks):
            block.set_modules_to_forward_prefetch(blocks[i + 1:i + 2])
            block.set_modules_to_backward_prefetch(blocks[i - 1:i] if i else [])
    return model


class Collectives(TorchDispatchMode):
    """Counts the all-gathers and reduce-scatters that run while it is active."""
    NAMES = {"_allgather_base_": "all-gather", "allgather_": "all-gather",
             "_reduce_scatter_base_": "reduce-scatter",
             "reduce_scatter_": "reduce-scatter"}

    def __init__(self):
        super().__init__()
        self.count = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "c10d" and func._opname in self.NAMES:
            self.count[self.NAMES[func._opname]] += 1
        return func(*args, **(kwargs or {}))


def one_step(model, x, y, clip=None):
    """Forward, backward (and clipping): what was communicated and saved."""
    started, saved = [], {}
    comm = Collectives()

    def note_start(module, args):  # runs after FSDP's own hook has issued its gather
        started.append(comm.count["all-gather"])

    def pack(t):  # every tensor autograd keeps for the backward pass
        base = t if t._base is None else t._base  # a weight.t() is a view of a weight
        if not isinstance(base, nn.Parameter):  # activations only, each one once
            saved[(t.data_ptr(), t.shape)] = t.numel() * t.element_size()
        return t

    hooks = [block.register_forward_pre_hook(note_start) for block in model.blocks]
    with comm:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = F.mse_loss(model(x), y)
        loss.backward()
    for hook in hooks:
        hook.remove()
    norm = None
    if clip is not None:  # the gradients are DTensors: the norm of the whole model's
        norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm=clip)
        norm = norm.full_tensor().item()
    return dict(gathers=comm.count["all-gather"], scatters=comm.count["reduce-scatter"],
                started=started, saved=sum(saved.values()), norm=norm)


def flops_per_step(x, y, checkpointing=False):
    """Floating-point operations of one step, and of one block in it, counted on an
    unsharded copy of the model (sharding moves weights, not the arithmetic)."""
    model = Net().to(x.device)
    if checkpointing:
        for i, block in enumerate(model.blocks):
            model.blocks[i] = checkpoint_wrapper(block)
    counter = FlopCounterMode(display=False)
    with counter:
        F.mse_loss(model(x), y).backward()
    per_block = sum(counter.get_flop_counts()["Net.blocks.0"].values())
    return counter.get_total_flops(), per_block


def main():
    if int(os.environ["WORLD_SIZE"]) < 2:  # one rank holds everything: nothing to count
        sys.exit("fsdp2_tuning.py needs at least 2 processes")
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    try:
        rank, n = dist.get_rank(), dist.get_world_size()
        x, y = make_dataset()[:GLOBAL_BATCH]  # the first global batch
        local = GLOBAL_BATCH // n
        x = x[rank * local:(rank + 1) * local].to(device)
        y = y[rank * local:(rank + 1) * local].to(device)

        plain = one_step(build(device), x, y, clip=1.0)
        ahead = one_step(build(device, prefetch=True), x, y)
        ac = one_step(build(device, checkpointing=True), x, y)

        flops, per_block = flops_per_step(x, y)
        ac_flops, _ = flops_per_step(x, y, checkpointing=True)
        block = sum(p.numel() for p in Net().blocks[0].parameters())
        gathered = block * 4 * (n - 1) // n  # bytes a rank receives per all-gather
        if rank == 0:
            print(f"world size {n}, batch {local} per rank; "
                  f"{DEPTH} blocks of {block:,} fp32 parameters")
            print(f"one step: {plain['gathers']} all-gathers, "
                  f"{plain['scatters']} reduce-scatters")
            print(f"per block and step: 2 all-gathers x {gathered:,} bytes received, "
                  f"1 reduce-scatter of {gathered:,} bytes sent")
            print(f"per block and step: {per_block:,} FLOPs computed, "
                  f"{per_block / (3 * gathered):.1f} FLOPs per byte communicated")
            print("all-gathers issued when each block starts its forward pass:")
            print("  default:     " + " ".join(map(str, plain["started"])))
            print("  prefetching: " + " ".join(map(str, ahead["started"])))
            print(f"gradient norm before clipping to 1.0: {plain['norm']:.6f}")
            print(f"saved for the backward pass: {plain['saved'] / 1024:.1f} KiB; "
                  f"with activation checkpointing {ac['saved'] / 1024:.1f} KiB")
            print(f"FLOPs per step: {flops:,}; with activation checkpointing "
                  f"{ac_flops:,} ({ac_flops / flops:.2f}x)")
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
