"""Why ranks report different numbers, and how to tell a harmless cause from a bug.

    torchrun --standalone --nproc_per_node=2 divergence.py
    torchrun --standalone --nproc_per_node=2 divergence.py --bug

With --bug the training step calls model.module(x), the model inside DDP, instead of
model(x): DDP never sees the forward pass and never averages the gradients.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def setup():
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    dist.init_process_group(backend)
    return device


def make_data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 10, generator=g)
    teacher = torch.randn(10, 3, generator=torch.Generator().manual_seed(0))
    return TensorDataset(x, (x @ teacher).argmax(dim=1))


def parameter_checksums(model):
    """One number per rank, from every parameter: equal replicas give equal numbers."""
    flat = torch.cat([p.detach().flatten() for p in model.parameters()]).double()
    mine = (flat * torch.arange(1, len(flat) + 1, device=flat.device)).sum()
    everyone = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    return [c.item() for c in everyone]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bug", action="store_true", help="train through model.module")
    args = parser.parse_args()
    device = setup()
    rank, world_size = dist.get_rank(), dist.get_world_size()
    try:
        torch.manual_seed(0)
        model = DDP(nn.Linear(10, 3).to(device))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        train, val = make_data(512, seed=1), make_data(256, seed=2)
        sampler = DistributedSampler(train)
        loader = DataLoader(train, batch_size=32, sampler=sampler)
        for epoch in range(2):
            sampler.set_epoch(epoch)
            for x, y in loader:
                x, y = x.to(device), y.to(device)
                forward = model.module if args.bug else model
                loss = nn.functional.cross_entropy(forward(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()

        # Each rank evaluates its own share of the validation set.
        val_loader = DataLoader(val, batch_size=64,
                                sampler=DistributedSampler(val, shuffle=False))
        counts = torch.zeros(2, device=device)  # correct answers, samples
        with torch.no_grad():
            for x, y in val_loader:
                x, y = x.to(device), y.to(device)
                counts += torch.tensor([(model(x).argmax(dim=1) == y).sum(), len(y)],
                                       device=device)
        local = [torch.empty_like(counts) for _ in range(world_size)]
        dist.all_gather(local, counts)  # only to print every rank's own accuracy
        dist.all_reduce(counts)  # the accuracy over the whole validation set
        checksums = parameter_checksums(model)
        if rank == 0:
            print("rank  accuracy on its own share  parameter checksum")
            for r, (c, checksum) in enumerate(zip(local, checksums)):
                print(f"{r:>4}  {(c[0] / c[1]).item():>25.4f}  {checksum:>18.6f}")
            accuracy = (counts[0] / counts[1]).item()
            print(f"accuracy on the whole validation set: {accuracy:.4f}")
            same = len(set(checksums)) == 1
            print("replicas identical:",
                  "yes" if same else "NO, the ranks trained apart")
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
