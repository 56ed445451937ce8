"""FSDP2: shard parameters, gradients and optimiser state with fully_shard.

  torchrun --standalone --nproc_per_node=2 fsdp2.py
  torchrun --standalone --nproc_per_node=2 fsdp2.py --offload   # shards in CPU memory
  torchrun --standalone --nproc_per_node=2 fsdp2.py --bf16      # compute in bfloat16

Prints how the parameters are sharded and what each rank holds after
training, and saves the full (unsharded) weights from rank 0 to fsdp2.pt.
"""

import argparse
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
from torch.distributed.checkpoint.state_dict import (StateDictOptions,
                                                     get_model_state_dict)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import (CPUOffloadPolicy, MixedPrecisionPolicy,
                                    OffloadPolicy, fully_shard)
from torch.distributed.tensor import DTensor
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

WIDTH, DEPTH = 64, 4
GLOBAL_BATCH, EPOCHS, LR = 64, 3, 1e-3


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


def shard(model, mesh, bf16, offload):
    """Wrap each block, then the root: one all-gather per block, not one for all."""
    mp = MixedPrecisionPolicy()  # default: compute in the parameters' dtype
    if bf16:
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                  reduce_dtype=torch.float32)
    cpu = OffloadPolicy()  # default: no offloading
    if offload:
        cpu = CPUOffloadPolicy(pin_memory=torch.cuda.is_available())
    for block in model.blocks:
        # True: free the gathered block after forward, gather it again in backward
        fully_shard(block, mesh=mesh, mp_policy=mp, offload_policy=cpu,
                    reshard_after_forward=True)
    fully_shard(model, mesh=mesh, mp_policy=mp, offload_policy=cpu)  # the root
    return model


def train(model, optimizer, loader, sampler, device):
    """Train for EPOCHS; return the last epoch's mean loss on this rank."""
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        total = 0.0
        for x, y in loader:
            optimizer.zero_grad(set_to_none=True)
            loss = F.mse_loss(model(x.to(device)).float(), y.to(device))
            loss.backward()
            optimizer.step()
            total += loss.item()
    return total / len(loader)


def local_kib(tensors):
    """KiB of this rank's shards: to_local() is the part of a DTensor stored here."""
    local = [t.to_local() if isinstance(t, DTensor) else t
             for t in tensors if t is not None]
    return sum(t.numel() * t.element_size() for t in local) / 1024


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--offload", action="store_true",
                        help="keep the shards and Adam in CPU memory")
    parser.add_argument("--bf16", action="store_true",
                        help="gather and compute in bfloat16")
    args = parser.parse_args()
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
        rank, world_size = dist.get_rank(), dist.get_world_size()
        # All ranks, on the device chosen above. Without mesh=, fully_shard takes the
        # accelerator PyTorch was built for (CUDA, say), even where no GPU is visible.
        mesh = init_device_mesh(device.type, (world_size,))
        torch.manual_seed(0)
        model = shard(Net().to(device), mesh, args.bf16, args.offload)
        # Create the optimiser after sharding, so that it holds the shards
        optimizer = torch.optim.Adam(model.parameters(), lr=LR)
        weight = model.blocks[0].ff[0].weight
        if rank == 0:
            count = sum(p.numel() for p in model.parameters())  # a DTensor's: full size
            print(f"world size {world_size}, {count:,} parameters, "
                  f"offload {args.offload}, bf16 {args.bf16}")
            local = weight.to_local()  # the part of the DTensor that this rank stores
            print(f"blocks[0].ff[0].weight is a {type(weight).__name__} "
                  f"{tuple(weight.shape)} with placements {weight.placements}; "
                  f"rank 0 stores {tuple(local.shape)} on {local.device.type}")

        dataset = make_dataset()
        sampler = DistributedSampler(dataset, shuffle=True, seed=0)
        batch = GLOBAL_BATCH // world_size  # each rank's share of the global batch
        loader = DataLoader(dataset, batch_size=batch, sampler=sampler)
        loss = train(model, optimizer, loader, sampler, device)
        loss = torch.tensor(loss, device=device)
        dist.all_reduce(loss)  # the sum over all ranks, on every rank
        loss /= world_size  # their mean

        params = list(model.parameters())
        state = [t for s in optimizer.state.values() for t in s.values()
                 if torch.is_tensor(t)]
        mine = [local_kib(params), local_kib(p.grad for p in params), local_kib(state)]
        everyone = [None] * world_size
        dist.all_gather_object(everyone, mine)
        if rank == 0:
            print(f"last-epoch loss {loss.item():.5f}")
            print("What each rank holds after training, in KiB:")
            print(f"{'rank':>4} {'parameters':>10} {'gradients':>10} "
                  f"{'optimiser state':>15}")
            for r, (p, g, s) in enumerate(everyone):
                print(f"{r:>4} {p:>10.1f} {g:>10.1f} {s:>15.1f}")

        # Every rank takes part in gathering the full weights; only rank 0 keeps them.
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        full = get_model_state_dict(model, options=options)
        if rank == 0:
            torch.save(full, "fsdp2.pt")
            print(f"saved fsdp2.pt: {len(full)} full tensors, loadable without FSDP")
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
