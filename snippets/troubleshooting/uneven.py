"""A job that hangs because its ranks do not have the same number of batches.

    torchrun --standalone --nproc_per_node=2 uneven.py --timeout 5
    torchrun --standalone --nproc_per_node=2 uneven.py --fix

Each rank reads its own shard of the data, as when every process streams its own
files, and the shards differ in size: 64 samples on rank 0, 96 on rank 1, ...
DistributedSampler cannot cause this: it gives every rank the same number of samples.
"""

import argparse
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset


def setup(timeout):
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout))
    return device


def my_shard(rank):
    """This rank's own data: 64 samples on rank 0, 32 more on each further rank."""
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(64 + 32 * rank, 8, generator=g)
    return TensorDataset(x, x.sum(dim=1, keepdim=True))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fix", action="store_true", help="train inside model.join()")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()
    device = setup(args.timeout)
    rank = dist.get_rank()
    try:
        torch.manual_seed(0)
        model = DDP(nn.Linear(8, 1).to(device))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        loader = DataLoader(my_shard(rank), batch_size=16, shuffle=True)

        def train():
            steps = 0
            for x, y in loader:
                x, y = x.to(device), y.to(device)
                loss = nn.functional.mse_loss(model(x), y)
                optimizer.zero_grad()
                loss.backward()  # all-reduces the gradients with every rank
                optimizer.step()
                steps += 1
            return steps

        if args.fix:
            # A rank that runs out of batches stays in join() and stands in for the
            # missing ranks in the others' all-reduces, with zero gradients.
            with model.join():
                steps = train()
        else:
            steps = train()
        counts = [None] * dist.get_world_size()
        dist.all_gather_object(counts, steps)
        flat = torch.cat([p.detach().flatten() for p in model.parameters()])
        replicas = [torch.empty_like(flat) for _ in counts]
        dist.all_gather(replicas, flat)
        if rank == 0:
            print("steps per rank:", counts)
            same = all(torch.equal(r, replicas[0]) for r in replicas)
            print("parameters identical on all ranks:", same)
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
