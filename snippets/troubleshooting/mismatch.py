"""A job that hangs because only rank 0 evaluates, and evaluating is a collective.

    torchrun --standalone --nproc_per_node=2 mismatch.py --timeout 5
    TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun --standalone --nproc_per_node=2 mismatch.py
    torchrun --standalone --nproc_per_node=2 mismatch.py --fix

--timeout turns the hang into an error after that many seconds.
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
from torch.utils.data.distributed import DistributedSampler


def setup(timeout):
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    # How long a rank waits in a collective for the others before it fails.
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout))
    return device


def make_data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    return TensorDataset(x, x.sum(dim=1, keepdim=True))


def evaluate(model, loader, device):
    """Mean loss over the validation samples of every rank: a collective."""
    total = torch.zeros(2, device=device)  # sum of losses, number of samples
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            total[0] += nn.functional.mse_loss(model(x), y, reduction="sum")
            total[1] += len(x)
    dist.all_reduce(total)  # waits until every rank has called it
    return (total[0] / total[1]).item()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fix", action="store_true", help="every rank evaluates")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()
    device = setup(args.timeout)
    rank = dist.get_rank()
    try:
        torch.manual_seed(0)
        model = DDP(nn.Linear(8, 1).to(device))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        train, val = make_data(256, seed=1), make_data(64, seed=2)
        train_sampler = DistributedSampler(train, shuffle=True)
        train_loader = DataLoader(train, batch_size=16, sampler=train_sampler)
        val_loader = DataLoader(val, batch_size=16,
                                sampler=DistributedSampler(val, shuffle=False))
        for epoch in range(3):
            train_sampler.set_epoch(epoch)
            for x, y in train_loader:
                x, y = x.to(device), y.to(device)
                loss = nn.functional.mse_loss(model(x), y)
                optimizer.zero_grad()
                loss.backward()  # all-reduces the gradients: a collective
                optimizer.step()
            if args.fix:
                val_loss = evaluate(model, val_loader, device)  # every rank
            if rank == 0:
                if not args.fix:  # the bug: only rank 0 calls a collective
                    val_loss = evaluate(model, val_loader, device)
                print(f"epoch {epoch}: validation loss {val_loss:.4f}")
                torch.save(model.module.state_dict(), "checkpoint.pt")
            # nobody goes on before the checkpoint is written; NCCL's barrier runs on
            # a GPU, this process's own
            dist.barrier(device_ids=[device.index] if device.type == "cuda" else None)
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
