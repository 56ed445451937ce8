"""ZeRO-1 under DDP: shard Adam's state across the ranks with ZeroRedundancyOptimizer.

  torchrun --standalone --nproc_per_node=2 zero1.py

Trains the same model twice, with plain Adam and with ZeroRedundancyOptimizer,
prints what each rank holds after training, and saves the ZeRO-1 model with the
whole optimiser state, gathered on rank 0, to zero1.pt.
"""

import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP
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


def train(model, optimizer, loader, sampler, device):
    """Train for EPOCHS; return the last epoch's mean loss on this rank."""
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)  # a new shuffle every epoch, the same on every rank
        total = 0.0
        for x, y in loader:
            optimizer.zero_grad(set_to_none=True)
            loss = F.mse_loss(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
            total += loss.item()
    return total / len(loader)


def nbytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def held(model, optimizer_state):
    """KiB of parameters, gradients and optimiser state that this process holds."""
    params = list(model.parameters())
    state = [t for s in optimizer_state.values() for t in s.values()
             if torch.is_tensor(t)]
    grads = [p.grad for p in params]
    return [nbytes(params) / 1024, nbytes(grads) / 1024, nbytes(state) / 1024]


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
        dataset = make_dataset()
        sampler = DistributedSampler(dataset, shuffle=True, seed=0)
        batch = GLOBAL_BATCH // world_size  # each rank's share of the global batch
        loader = DataLoader(dataset, batch_size=batch, sampler=sampler)
        rows, losses = [], []
        for name in ("Adam", "ZeroRedundancyOptimizer"):
            torch.manual_seed(0)  # the same initial weights for both runs
            model = DDP(Net().to(device),
                        device_ids=[local_rank] if device.type == "cuda" else None,
                        gradient_as_bucket_view=True)  # no extra copy of gradients
            if name == "Adam":
                optimizer = torch.optim.Adam(model.parameters(), lr=LR)
                local_state = optimizer.state
            else:  # each rank keeps Adam's state for its share of the parameters only
                optimizer = ZeroRedundancyOptimizer(
                    model.parameters(), optimizer_class=torch.optim.Adam, lr=LR)
                local_state = optimizer.optim.state  # optim: Adam for this rank's share
            loss = train(model, optimizer, loader, sampler, device)
            loss = torch.tensor(loss, device=device)
            dist.all_reduce(loss)  # the sum over all ranks, on every rank
            loss /= world_size  # their mean
            losses.append(loss.item())
            mine = held(model, local_state)
            everyone = [None] * world_size
            dist.all_gather_object(everyone, mine)
            rows += [(name, r, kib) for r, kib in enumerate(everyone)]

        if rank == 0:
            count = sum(p.numel() for p in model.parameters())
            print(f"world size {world_size}, {count:,} parameters, last-epoch loss "
                  f"{losses[0]:.5f} (Adam) and {losses[1]:.5f} (ZeRO-1)")
            print("What each rank holds after training, in KiB:")
            print(f"{'optimiser':<24} {'rank':>4} {'parameters':>10} {'gradients':>10} "
                  f"{'optimiser state':>15}")
            for name, r, (p, g, s) in rows:
                print(f"{name:<24} {r:>4} {p:>10.1f} {g:>10.1f} {s:>15.1f}")
            adam, zero = rows[0][2][2], rows[world_size][2][2]
            print(f"ZeRO-1 optimiser state on rank 0: {zero / adam:.2f} of Adam's")

        # Saving: every rank sends its shard of the optimiser state to rank 0,
        # which alone writes the file. Without this, rank 0 only has its own shard.
        optimizer.consolidate_state_dict(to=0)
        if rank == 0:
            torch.save({"model": model.module.state_dict(),
                        "optimizer": optimizer.state_dict()}, "zero1.pt")
            print("saved zero1.pt with the optimiser state of all", world_size, "ranks")
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
