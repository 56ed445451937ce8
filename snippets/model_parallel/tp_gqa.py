"""Tensor-parallel grouped-query attention, with fewer key/value heads than ranks.

Run it with one process per GPU, for example two:
  torchrun --standalone --nproc_per_node=2 tp_gqa.py

The attention has 4 query heads. With 2 key/value heads, wk and wv are split like wq;
with 1, they are whole on every rank. It trains 3 steps of each and compares them with
the same model trained in one process.
"""

import os
import time
from collections import Counter
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)

DIM, HEADS, HEAD_DIM, STEPS = 16, 4, 4, 3


def sum_gradient(t, mesh):
    """t, unchanged, as the same tensor on every rank; its gradient is summed over the
    ranks in the backward pass (each rank's gradient is only a part of it)."""
    replicated = DTensor.from_local(t, mesh, [Replicate()])
    return replicated.to_local(grad_placements=[Partial()])


class Attention(nn.Module):
    def __init__(self, kv_heads):
        super().__init__()
        self.wq = nn.Linear(DIM, HEADS * HEAD_DIM)
        self.wk = nn.Linear(DIM, kv_heads * HEAD_DIM)  # fewer key/value heads...
        self.wv = nn.Linear(DIM, kv_heads * HEAD_DIM)
        self.wo = nn.Linear(HEADS * HEAD_DIM, DIM)
        # ...each shared by HEADS // kv_heads query heads: the key/value head of
        # each query head, counted among the key/value heads this rank computes
        self.kv_of_q = [h * kv_heads // HEADS for h in range(HEADS)]
        self.mesh = None  # set where wk and wv are whole on every rank

    def forward(self, x):
        batch, seq, _ = x.shape
        q, k, v = (w(x).view(batch, seq, -1, HEAD_DIM).transpose(1, 2)
                   for w in (self.wq, self.wk, self.wv))
        if self.mesh is not None:  # each rank uses k and v for its query heads only
            k, v = sum_gradient(k, self.mesh), sum_gradient(v, self.mesh)
        k, v = k[:, self.kv_of_q], v[:, self.kv_of_q]  # one per query head of this rank
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(batch, seq, -1))


class Net(nn.Module):
    def __init__(self, kv_heads):
        super().__init__()
        self.embed = nn.Linear(8, DIM)
        self.attn = Attention(kv_heads)
        self.head = nn.Linear(DIM, 1)

    def forward(self, x):
        return self.head(self.attn(self.embed(x)))


def parallelize(model, mesh, kv_heads, sum_kv_gradients=True):
    """Split wq by columns, wo by rows; wk and wv too if there are enough KV heads."""
    tp, rank = mesh.size(), mesh.get_local_rank()
    split_kv = kv_heads % tp == 0  # every rank gets whole key/value heads
    plan = {"attn.wq": ColwiseParallel(), "attn.wo": RowwiseParallel()}
    if split_kv:
        plan |= {"attn.wk": ColwiseParallel(), "attn.wv": ColwiseParallel()}
    parallelize_module(model, mesh, plan)
    q_heads = range(rank * HEADS // tp, (rank + 1) * HEADS // tp)  # this rank's
    first_kv = rank * kv_heads // tp if split_kv else 0  # its first key/value head
    model.attn.kv_of_q = [h * kv_heads // HEADS - first_kv for h in q_heads]
    if not split_kv and sum_kv_gradients:
        model.attn.mesh = mesh
    return list(q_heads), sorted({h * kv_heads // HEADS for h in q_heads})


def make_batch():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 8, 8, generator=g)  # 4 sequences of 8 tokens
    y = torch.randn(4, 8, 1, generator=g)
    return x, y


def collectives(mode):
    """'all_reduce 3' from a CommDebugMode's counts."""
    counts = Counter(str(op).split(".")[-1] for op, n in mode.get_comm_counts().items()
                     for _ in range(n))
    return ", ".join(f"{op} {n}" for op, n in sorted(counts.items())) or "-"


def full(tensor):
    """The whole tensor, gathered from its pieces on every rank."""
    return (tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor).cpu()


def train(kv_heads, mesh, device, sum_kv_gradients=True):
    torch.manual_seed(0)  # the same full model on every rank, before it is split
    model = Net(kv_heads).to(device)
    heads = parallelize(model, mesh, kv_heads, sum_kv_gradients) if mesh else None
    # foreach=False: the model mixes DTensors and plain tensors (see tensor_parallel.py)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
    x, y = (t.to(device) for t in make_batch())  # every rank gets the SAME batch
    losses, first_grads, comms = [], None, {}
    for step in range(STEPS):
        optimizer.zero_grad()
        with CommDebugMode() as forward:
            loss = F.mse_loss(model(x), y)
        with CommDebugMode() as backward:
            loss.backward()
        if step == 0:
            first_grads = {n: full(p.grad) for n, p in model.named_parameters()}
            comms = {"forward": collectives(forward), "backward": collectives(backward)}
        optimizer.step()
        losses.append(loss.item())
    held = {n: (tuple(p.to_local().shape), repr(p.placements[0]))
            if isinstance(p, DTensor) else (tuple(p.shape), "whole")
            for n, p in model.attn.named_parameters() if n.endswith("weight")}
    return {"losses": losses, "first_grads": first_grads,
            "model": {n: full(p.detach()) for n, p in model.state_dict().items()},
            "heads": heads, "held": held, "comms": comms}


#: The runs: (key/value heads, whether their gradients are summed over the ranks)
RUNS = {"2 KV heads, split": (2, True),
        "1 KV head, whole": (1, True),
        "1 KV head, whole, not summed": (1, False)}


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
        rank, world_size = dist.get_rank(), dist.get_world_size()
        mesh = init_device_mesh(device.type, (world_size,))  # one row
        results = {name: train(kv, mesh, device, summed)
                   for name, (kv, summed) in RUNS.items()}
        per_rank = [None] * world_size  # what each rank held, for rank 0 to print
        dist.all_gather_object(per_rank, {n: r["heads"] for n, r in results.items()})
        if rank == 0:
            one = {kv: train(kv, None, device) for kv in (1, 2)}  # one process
            for name, result in list(results.items())[:2]:
                print(f"{name}:")
                for weight, (shape, placement) in result["held"].items():
                    print(f"  {weight:10} on this rank {str(shape):9} {placement}")
                for r, heads in enumerate(per_rank):
                    q_heads, kv_heads = heads[name]
                    print(f"  rank {r}: query heads {q_heads}, "
                          f"key/value heads {kv_heads}")
            print(f"\n{'run':30}{'forward':16}{'backward':16}"
                  "losses, largest gradient difference from one process")
            for name, result in results.items():
                ref = one[RUNS[name][0]]
                diff = max((g - ref["first_grads"][n]).abs().max().item()
                           for n, g in result["first_grads"].items())
                losses = " ".join(f"{v:.6f}" for v in result["losses"])
                print(f"{name:30}{result['comms']['forward']:16}"
                      f"{result['comms']['backward']:16}{losses}, {diff:.1e}")
            torch.save({n: {k: r[k] for k in ("losses", "first_grads", "model")}
                        for n, r in results.items()}, "tp_gqa.pt")
            print("saved tp_gqa.pt")
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
