"""Tensor parallelism: split the matrices of attention and an MLP between ranks.

Run it with one process per GPU, for example two:
  torchrun --standalone --nproc_per_node=2 tensor_parallel.py

It trains one step with plain tensor parallelism, then one with sequence
parallelism added, and counts the collectives of each phase.
"""

import os
import sys
import time
from collections import Counter

import torch

NEEDS = "2.8"  # 2.6 has no PrepareModuleInputOutput
if torch.__version__ < f"{NEEDS}.0a0":  # NVIDIA's 2.N.0a0 builds count as 2.N
    print(f"this script needs PyTorch >= {NEEDS} (found {torch.__version__})",
          file=sys.stderr)
    sys.exit(2)

import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    PrepareModuleInputOutput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

DIM, HEADS = 16, 4


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.head_dim = DIM // HEADS
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(DIM, DIM) for _ in range(4))

    def forward(self, x):
        batch, seq, _ = x.shape
        # -1, not HEADS: with tensor parallelism each rank has only some of the heads.
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
    """A transformer block: attention, then an MLP, each after a LayerNorm."""

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
        self.embed = nn.Linear(8, DIM)  # small layers around the block stay whole
        self.block = Block()
        self.head = nn.Linear(DIM, 1)

    def forward(self, x):
        return self.head(self.block(self.embed(x)))


def tensor_parallel_plan():
    """Megatron-style: the first matrix of a pair split by columns, the next by rows."""
    return {
        "block.attn.wq": ColwiseParallel(),  # each rank computes its own heads...
        "block.attn.wk": ColwiseParallel(),
        "block.attn.wv": ColwiseParallel(),
        "block.attn.wo": RowwiseParallel(),  # ...and the partial outputs are summed
        "block.mlp.up": ColwiseParallel(),  # each rank has some of the hidden units
        "block.mlp.down": RowwiseParallel(),
    }


def sequence_parallel_plan():
    """As above; between the matrices each rank keeps only its part of the sequence."""
    seq = Shard(1)  # activations split along dimension 1, the sequence
    gather = PrepareModuleInput(input_layouts=seq, desired_input_layouts=Replicate())
    return {
        "block": PrepareModuleInputOutput(
            input_layouts=Replicate(), desired_input_layouts=seq, use_local_input=True,
            output_layouts=seq, desired_output_layouts=Replicate()),
        "block.attn_norm": SequenceParallel(),  # LayerNorm of this rank's tokens only
        "block.attn": gather,  # all-gather the sequence before the matrices
        "block.attn.wq": ColwiseParallel(),
        "block.attn.wk": ColwiseParallel(),
        "block.attn.wv": ColwiseParallel(),
        "block.attn.wo": RowwiseParallel(output_layouts=seq),  # reduce-scatter
        "block.mlp_norm": SequenceParallel(),
        "block.mlp": gather,
        "block.mlp.up": ColwiseParallel(),
        "block.mlp.down": RowwiseParallel(output_layouts=seq),
    }


def make_batch():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 8, 8, generator=g)  # 4 sequences of 8 tokens
    y = torch.randn(4, 8, 1, generator=g)
    return x, y


def collectives(mode):
    """'all_reduce 2' from a CommDebugMode's counts."""
    counts = Counter()
    for op, n in mode.get_comm_counts().items():
        name = str(op).split(".")[-1]  # c10d_functional.all_gather_into_tensor
        counts[name.removesuffix("_into_tensor").removesuffix("_tensor")] += n
    return ", ".join(f"{op} {n}" for op, n in sorted(counts.items())) or "-"


def full(tensor):
    """The whole tensor, gathered from its pieces on every rank."""
    return (tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor).cpu()


def train_step(plan, mesh, device):
    torch.manual_seed(0)  # the same full model on every rank, before it is split
    model = parallelize_module(Net().to(device), mesh, plan)
    # foreach=False: the model mixes DTensors and plain tensors (the whole layers).
    # On GPUs the default (foreach) puts both in one call, which DTensor refuses.
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
    x, y = (t.to(device) for t in make_batch())  # every rank gets the SAME batch
    phases = {name: CommDebugMode() for name in ("forward", "backward", "step")}
    with phases["forward"]:
        loss = F.mse_loss(model(x), y)
    with phases["backward"]:
        loss.backward()
    grads = {name: full(p.grad) for name, p in model.named_parameters()}
    with phases["step"]:
        optimizer.step()
    comms = {name: collectives(mode) for name, mode in phases.items()}
    return model, loss.item(), grads, comms


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
        rank = dist.get_rank()
        mesh = init_device_mesh(device.type, (dist.get_world_size(),))  # one row
        results = {}
        for name, plan in [("tensor parallel", tensor_parallel_plan()),
                           ("+ sequence parallel", sequence_parallel_plan())]:
            model, loss, grads, comms = train_step(plan, mesh, device)
            results[name] = {"loss": loss, "grads": grads}
            if rank == 0 and name == "tensor parallel":
                for layer in ("attn.wq", "attn.wo", "mlp.up", "mlp.down"):
                    w = model.block.get_submodule(layer).weight
                    print(f"{layer}.weight: full {tuple(w.shape)}, on this rank "
                          f"{tuple(w.to_local().shape)}, {w.placements[0]!r}")
                print(f"\n{'collectives':21}{'forward':32}{'backward':32}"
                      "optimizer step")
            if rank == 0:
                print(f"{name:21}{comms['forward']:32}{comms['backward']:32}"
                      f"{comms['step']}")
        if rank == 0:
            print()
            for name, result in results.items():
                print(f"{name}: loss {result['loss']:.6f}")
            torch.save(results, "tensor_parallel.pt")
            print("saved tensor_parallel.pt")
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
