"""Where a training step's memory goes: weights, gradients, optimiser, activations.

  python memory_breakdown.py

Trains one step in four set-ups and counts, per parameter, the bytes of every
tensor the step keeps: fp32 with Adam, fp32 with SGD and momentum, bfloat16
autocast, and bfloat16 weights with an fp32 master copy (as ZeRO does it).
Then it counts the activations autograd saves for the backward pass.
"""

from contextlib import nullcontext

import torch
from torch import nn

WIDTH, DEPTH, BATCH = 64, 4, 512


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


def nbytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def optimiser_bytes(optimizer):
    return nbytes(t for s in optimizer.state.values() for t in s.values()
                  if torch.is_tensor(t))


def saved_for_backward(model, x, autocast=False):
    """Bytes autograd keeps for the backward pass: activations, and weight copies."""
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    shapes = {tuple(p.shape) for p in model.parameters()}
    seen = {"activations": {}, "weight copies": {}}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in weights:  # the weights themselves are counted already
            copy = tuple(t.shape) in shapes and t.dtype != torch.float32
            kind = "weight copies" if copy else "activations"
            seen[kind][ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=torch.bfloat16) if autocast else nullcontext():
            loss = model(x).float().pow(2).mean()
    loss.backward()
    return {kind: sum(sizes.values()) for kind, sizes in seen.items()}


def one_step(setup, x):
    """Take one step with a fresh model; return the bytes of what the step kept."""
    torch.manual_seed(0)
    model = Net()
    if setup == "bf16 weights, fp32 master copy, Adam":
        master = [p.detach().clone() for p in model.parameters()]  # fp32, for Adam
        model.to(torch.bfloat16)
        optimizer = torch.optim.Adam(master, lr=1e-3)
        saved = saved_for_backward(model, x.to(torch.bfloat16))
        for p, m in zip(model.parameters(), master):
            m.grad = p.grad.float()  # the optimiser steps in fp32 ...
        optimizer.step()
        for p, m in zip(model.parameters(), master):
            p.data.copy_(m)  # ... and the bf16 weights get the result
        optimizer_state = optimiser_bytes(optimizer) + nbytes(master)
    else:
        if "SGD" in setup:
            optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
        else:
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        saved = saved_for_backward(model, x, autocast="autocast" in setup)
        optimizer.step()
        optimizer_state = optimiser_bytes(optimizer)
    params = list(model.parameters())
    return nbytes(params), nbytes(p.grad for p in params), optimizer_state, saved


def main():
    count = sum(p.numel() for p in Net().parameters())
    x = torch.randn(BATCH, WIDTH)
    print(f"{count:,} parameters, batch of {BATCH} rows of {WIDTH}")
    print(f"{'set-up':<38} {'bytes per parameter':^34} "
          f"{'saved for backward (KiB)':>25}")
    print(f"{'':<38} {'weights':>8} {'grads':>8} {'optimiser':>9} {'total':>7} "
          f"{'activations':>14} {'weight copies':>14}")
    activations = {}
    for setup in ("fp32, Adam",
                  "fp32, SGD with momentum",
                  "bf16 autocast, fp32 weights, Adam",
                  "bf16 weights, fp32 master copy, Adam"):
        p, g, o, saved = one_step(setup, x)
        activations[setup] = saved["activations"]
        print(f"{setup:<38} {p / count:>8.2f} {g / count:>8.2f} {o / count:>9.2f} "
              f"{(p + g + o) / count:>7.2f} {saved['activations'] / 1024:>14.1f} "
              f"{saved['weight copies'] / 1024:>14.1f}")
    double = one_step("fp32, Adam", torch.randn(2 * BATCH, WIDTH))[3]["activations"]
    print(f"fp32 activations with a batch of {2 * BATCH}: {double / 1024:.1f} KiB, "
          f"{double / activations['fp32, Adam']:.2f} times those of {BATCH}")


if __name__ == "__main__":
    main()
