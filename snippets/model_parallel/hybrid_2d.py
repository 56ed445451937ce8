"""Hybrid 2-D parallelism: tensor parallel within groups of ranks, FSDP across them.

Run it with 4 processes, a 2 x 2 mesh:
  torchrun --standalone --nproc_per_node=4 hybrid_2d.py
On 2 nodes with 4 GPUs each use --dp 2 --tp 4: tensor parallelism inside each
node, where GPUs are joined by fast links, and FSDP across the nodes
(hybrid_2d.sbatch).
"""

import argparse
import os
import socket
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
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)

DIM, HEADS = 16, 8  # 8 heads: tensor parallelism over up to 8 GPUs
STEPS = 3


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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dp", type=int, default=2, help="data-parallel size (FSDP)")
    parser.add_argument("--tp", type=int, default=2, help="tensor-parallel size")
    args = parser.parse_args()
    world = int(os.environ["WORLD_SIZE"])  # the sizes must fit the processes, the model
    if args.dp * args.tp != world:         # and the batch: stop with one line if not
        parser.error(f"--dp x --tp is {args.dp * args.tp}, "
                     f"but torchrun started {world} processes")
    sequences = len(make_batch()[0])
    if HEADS % args.tp or sequences % args.dp:
        parser.error(f"--tp must divide {HEADS} heads, and --dp {sequences} sequences")
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
        rank = dist.get_rank()
        # The ranks in a grid: each row holds one copy of the model (data parallel),
        # split over the row's columns (tensor parallel). A row is consecutive ranks,
        # which sit on the same node.
        mesh = init_device_mesh(device.type, (args.dp, args.tp),
                                mesh_dim_names=("dp", "tp"))
        dp, tp = mesh["dp"].get_local_rank(), mesh["tp"].get_local_rank()

        torch.manual_seed(0)
        model = Net().to(device)
        parallelize_module(model, mesh["tp"], TP_PLAN)  # split matrices along "tp",
        fully_shard(model.block, mesh=mesh["dp"])  # then shard the pieces along "dp"
        fully_shard(model, mesh=mesh["dp"])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

        # Each row of the mesh trains on its own share of the batch; a row shares it.
        x, y = make_batch()
        rows = len(x) // args.dp
        x, y = (t[dp * rows:(dp + 1) * rows].to(device) for t in (x, y))

        wq = model.block.attn.wq.weight
        node = os.environ.get("SLURMD_NODENAME", socket.gethostname())  # Slurm's name
        seqs = f"{dp * rows}-{(dp + 1) * rows - 1}"
        me = (rank, dp, tp, node, seqs, wq.to_local().shape)
        everyone = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, me)
        if rank == 0:
            print(f"mesh {tuple(mesh.shape)} {mesh.mesh_dim_names}; "
                  f"block.attn.wq.weight {tuple(wq.shape)} is {wq.placements}")
            print("rank  dp  tp  node  sequences  wq rows x columns on this rank")
            for r, d, t, n, seqs, shape in everyone:
                print(f"{r:>4}  {d:>2}  {t:>2}  {n:>4}  {seqs:>9}  "
                      f"{shape[0]} x {shape[1]}")

        history = []
        for step in range(STEPS):
            optimizer.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()  # FSDP averages the gradients of the rows of the mesh
            if step == 0:  # keep the first gradients, to compare with one process
                first_grads = {n: full(p.grad) for n, p in model.named_parameters()}
            optimizer.step()
            loss = loss.detach()
            dist.all_reduce(loss, group=mesh["dp"].get_group())  # sum over the dp ranks
            loss /= mesh["dp"].size()  # their mean
            history.append(loss.item())
            if rank == 0:
                print(f"step {step}: loss {loss.item():.6f} "
                      f"(mean over all {len(x) * args.dp} sequences)")

        state = {name: full(value) for name, value in model.state_dict().items()}
        if rank == 0:
            torch.save({"model": state, "first_grads": first_grads, "losses": history},
                       "hybrid_2d.pt")
            print("saved hybrid_2d.pt")
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
