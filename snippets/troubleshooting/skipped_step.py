"""A job that hangs because one rank skips a training step the others take.

    torchrun --standalone --nproc_per_node=2 skipped_step.py --timeout 5
    torchrun --standalone --nproc_per_node=2 skipped_step.py --fix

One sample of rank 1's data is corrupt (NaN), so rank 1's loss is NaN at one step.
Skipping that step on rank 1 alone leaves the other ranks waiting for its gradients.
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
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout))
    return device


def make_data(n=128):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 8, generator=g)
    y = x.sum(dim=1, keepdim=True)
    x[37, 3] = float("nan")  # one corrupt sample
    return TensorDataset(x, y)


def all_ranks_agree(ok, device):
    """True on every rank if ok is True on every rank."""
    flag = torch.tensor(float(ok), device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)  # 0 if any rank said False
    return bool(flag.item())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fix", action="store_true",
                        help="decide together whether to skip a step")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()
    device = setup(args.timeout)
    rank = dist.get_rank()
    try:
        torch.manual_seed(0)
        model = DDP(nn.Linear(8, 1).to(device))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        data = make_data()
        sampler = DistributedSampler(data, shuffle=False)
        loader = DataLoader(data, batch_size=16, sampler=sampler)
        steps = skipped = 0
        for epoch in range(2):
            sampler.set_epoch(epoch)
            for x, y in loader:
                x, y = x.to(device), y.to(device)
                loss = nn.functional.mse_loss(model(x), y)
                finite = bool(torch.isfinite(loss))
                if args.fix:
                    finite = all_ranks_agree(finite, device)
                if not finite:  # without --fix, only the rank that saw the NaN skips
                    skipped += 1
                    continue
                optimizer.zero_grad()
                loss.backward()  # all-reduces the gradients: every rank must call it
                optimizer.step()
                steps += 1
        counts = [None] * dist.get_world_size()
        dist.all_gather_object(counts, (steps, skipped))
        if rank == 0:
            for r, (done, skip) in enumerate(counts):
                print(f"rank {r}: {done} steps taken, {skip} skipped")
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
