"""The same training with FSDP1, the FullyShardedDataParallel class, for comparison.

  torchrun --standalone --nproc_per_node=2 fsdp1.py

FSDP1 wraps the model in a new module and flattens each wrapped block's
parameters into one sharded FlatParameter. New code should use fully_shard
(fsdp2.py); this file is here to show what changes when you migrate.
"""

import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.checkpoint.state_dict import (StateDictOptions,
                                                     get_model_state_dict)
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import ModuleWrapPolicy
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


def shard(model, device):
    """Wrap each block in its own FSDP unit, and the rest in the outer one."""
    # device_id: the device FSDP computes on; on a CPU-only machine it must be the CPU
    return FSDP(model, auto_wrap_policy=ModuleWrapPolicy({Block}), device_id=device)


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


def kib(tensors):
    return sum(t.numel() * t.element_size() for t in tensors if t is not None) / 1024


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
        rank, world_size = dist.get_rank(), dist.get_world_size()
        torch.manual_seed(0)
        model = shard(Net().to(device), device)
        # Create the optimiser after wrapping, so that it holds the shards
        optimizer = torch.optim.Adam(model.parameters(), lr=LR)
        if rank == 0:
            print(f"world size {world_size}; the model is now a "
                  f"{type(model).__name__}, and so is each block")
            for name, p in model.named_parameters():  # one flat shard per FSDP unit
                print(f"  {name}: {type(p).__name__} {tuple(p.shape)} on rank 0")

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
        mine = [kib(params), kib(p.grad for p in params), kib(state)]
        everyone = [None] * world_size
        dist.all_gather_object(everyone, mine)
        if rank == 0:
            print(f"last-epoch loss {loss.item():.5f}")
            print("What each rank holds after training, in KiB:")
            print(f"{'rank':>4} {'parameters':>10} {'gradients':>10} "
                  f"{'optimiser state':>15}")
            for r, (p, g, s) in enumerate(everyone):
                print(f"{r:>4} {p:>10.1f} {g:>10.1f} {s:>15.1f}")

        # Every rank takes part in gathering the full weights. cpu_offload=True copies
        # them to the CPU on rank 0 only; with FSDP1 on a CPU-only machine that frees
        # the weights it copies (PyTorch issue 188989), so there every rank keeps them.
        options = StateDictOptions(full_state_dict=True,
                                   cpu_offload=device.type == "cuda")
        full = get_model_state_dict(model, options=options)
        if rank == 0:
            torch.save(full, "fsdp1.pt")
            print(f"saved fsdp1.pt: {len(full)} full tensors, loadable without FSDP")
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
