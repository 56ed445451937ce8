"""Gradient clipping with FSDP and tensor parallelism: the norm of the whole model.

Run it with 4 processes, a 2 x 2 mesh:
  torchrun --standalone --nproc_per_node=4 clip_2d.py
With --plain it calls torch.nn.utils.clip_grad_norm_ on all the parameters at once,
which stops with an error on this model: its parameters live on two device meshes.
"""

import argparse
import os
import sys
import time
from datetime import timedelta

import torch

NEEDS = "2.10"  # FSDP2 on CPUs: 2.6 lacks what it needs, 2.8 sums gradients
if torch.__version__ < f"{NEEDS}.0a0":  # NVIDIA's 2.N.0a0 builds count as 2.N
    print(f"this script needs PyTorch >= {NEEDS} (found {torch.__version__})",
          file=sys.stderr)
    sys.exit(2)

import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)
from torch.nn.utils import clip_grads_with_norm_, get_total_norm

DIM, HEADS = 16, 4
STEPS = 3
MAX_NORM = 0.5  # smaller than the gradients' norm, so that every step clips


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.head_dim = DIM // HEADS
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(DIM, DIM) for _ in range(4))

    def forward(self, x):
        batch, seq, _ = x.shape
        q, k, v = (w(x).view(batch, seq, -1, self.head_dim).transpose(1, 2)
                   for w in (self.wq, self.wk, self.wv))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(batch, seq, -1))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(DIM, 4 * DIM)
        self.down = nn.Linear(4 * DIM, DIM)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_norm, self.attn = nn.LayerNorm(DIM), Attention()
        self.mlp_norm, self.mlp = nn.LayerNorm(DIM), MLP()

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(8, DIM)
        self.block = Block()
        self.head = nn.Linear(DIM, 1)

    def forward(self, x):
        return self.head(self.block(self.embed(x)))


TP_PLAN = {
    "block.attn.wq": ColwiseParallel(),
    "block.attn.wk": ColwiseParallel(),
    "block.attn.wv": ColwiseParallel(),
    "block.attn.wo": RowwiseParallel(),
    "block.mlp.up": ColwiseParallel(),
    "block.mlp.down": RowwiseParallel(),
}


def make_batch():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(8, 8, 8, generator=g)  # 8 sequences of 8 tokens
    y = torch.randn(8, 8, 1, generator=g)
    return x, y


def full(tensor):
    """The whole tensor, gathered from its pieces (every rank must call this)."""
    return (tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor).cpu()


def by_mesh(parameters):
    """The parameters that have a gradient, grouped by the device mesh they live on."""
    groups = {}
    for p in parameters:
        if p.grad is not None:
            groups.setdefault(getattr(p, "device_mesh", None), []).append(p)
    return groups


def value(norm):
    """A norm as a plain tensor (a DTensor norm is already the same on every rank)."""
    return norm.full_tensor() if hasattr(norm, "full_tensor") else norm


def clip_grad_norm(parameters, max_norm):
    """clip_grad_norm_ for parameters on several device meshes. Returns the norm of all
    the gradients, a plain tensor, and the norm of each mesh's gradients."""
    groups = by_mesh(parameters)
    # one norm per mesh, of all its gradients (for DTensor gradients a DTensor)
    norms = {mesh: get_total_norm([p.grad for p in params])
             for mesh, params in groups.items()}
    total = torch.linalg.vector_norm(torch.stack([value(n) for n in norms.values()]))
    for params in groups.values():
        clip_grads_with_norm_(params, max_norm, total)  # the same factor everywhere
    return total, norms


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--plain", action="store_true",
                        help="call torch.nn.utils.clip_grad_norm_ on all parameters")
    args = parser.parse_args()
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
        rank = dist.get_rank()
        mesh = init_device_mesh(device.type, (2, 2), mesh_dim_names=("dp", "tp"))
        dp = mesh["dp"].get_local_rank()

        torch.manual_seed(0)
        model = Net().to(device)
        parallelize_module(model, mesh["tp"], TP_PLAN)  # as in hybrid_2d.py
        fully_shard(model.block, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

        x, y = make_batch()
        rows = len(x) // 2  # each row of the mesh takes its share of the batch
        x, y = (t[dp * rows:(dp + 1) * rows].to(device) for t in (x, y))

        history, norms = [], []
        for step in range(STEPS):
            optimizer.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            if args.plain:  # stops with an error on this model (see the page)
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
                total = value(norm)
                per_mesh = {}
            else:
                total, per_mesh = clip_grad_norm(model.parameters(), MAX_NORM)
            if step == 0 and rank == 0:
                for m, params in by_mesh(model.parameters()).items():
                    if m in per_mesh:
                        norm = per_mesh[m]
                        print(f"{len(params):2} parameters on mesh {m.mesh_dim_names}: "
                              f"norm {type(norm).__name__} {norm.placements}")
            optimizer.step()
            loss = loss.detach()
            dist.all_reduce(loss, group=mesh["dp"].get_group())  # sum over the dp ranks
            loss /= mesh["dp"].size()  # their mean
            history.append(loss.item())
            norms.append(total.item())
            if rank == 0:
                parts = ", ".join(f"{m.mesh_dim_names} {value(n).item():.6f}"
                                  for m, n in per_mesh.items())
                print(f"step {step}: loss {loss.item():.6f}, "
                      f"norm {total.item():.6f} ({parts})")

        state = {name: full(value) for name, value in model.state_dict().items()}
        if rank == 0:
            saved = {"model": state, "losses": history, "norms": norms}
            torch.save(saved, "clip_2d.pt")
            print("saved clip_2d.pt")
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
