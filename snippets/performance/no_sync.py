"""Gradient accumulation under DDP, with and without no_sync(), counting all-reduces.

  torchrun --standalone --nproc_per_node=2 no_sync.py --accumulate 4

A communication hook wraps DDP's own all-reduce and counts its calls and bytes.
"""

import argparse
import contextlib
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 1))


def make_dataset(n=256):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 32, generator=g)
    return TensorDataset(x, x[:, :4].sum(1, keepdim=True).sin())


def counting_allreduce(counter, bucket):
    """DDP's default all-reduce, plus a count of calls and bytes."""
    counter["calls"] += 1
    counter["bytes"] += bucket.buffer().numel() * bucket.buffer().element_size()
    return default_hooks.allreduce_hook(None, bucket)  # None: the default process group


def train(use_no_sync, accumulate, device, dataset, batch_size, epochs=2):
    model = DDP(make_model().to(device))
    counter = {"calls": 0, "bytes": 0}
    model.register_comm_hook(state=counter, hook=counting_allreduce)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    sampler = DistributedSampler(dataset, seed=0)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)
    windows = 0
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for i, (x, y) in enumerate(loader):
            x, y = x.to(device), y.to(device)
            last = (i + 1) % accumulate == 0  # the last micro-batch of a window
            # Inside no_sync(), backward only adds to .grad; the all-reduce waits.
            skip = (
                model.no_sync()
                if use_no_sync and not last
                else contextlib.nullcontext()
            )
            with skip:
                loss = (
                    nn.functional.mse_loss(model(x), y) / accumulate
                )  # mean over the window
                loss.backward()
            if last:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                windows += 1
    return model.module, counter["calls"] / windows, counter["bytes"] / windows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--accumulate", type=int, default=4, help="micro-batches per optimiser step"
    )
    parser.add_argument(
        "--batch-size", type=int, default=8, help="per micro-batch and process"
    )
    args = parser.parse_args()

    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl")
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        dataset = make_dataset()
        runs = {
            flag: train(flag, args.accumulate, device, dataset, args.batch_size)
            for flag in (False, True)
        }
        (plain, *_), (synced_once, *_) = runs.values()
        diff = max(
            (a - b).abs().max().item()
            for a, b in zip(plain.parameters(), synced_once.parameters())
        )
        if rank == 0:
            print(
                f"{world} processes, {args.accumulate} micro-batches of "
                f"{args.batch_size} samples per optimiser step: "
                f"{world * args.accumulate * args.batch_size} samples"
            )
            print(f"{'':<16}{'all-reduces per step':>22}{'bytes per step':>16}")
            for flag, (_, calls, nbytes) in runs.items():
                print(
                    f"{'with no_sync()' if flag else 'without':<16}"
                    f"{calls:>22g}{nbytes:>16,.0f}"
                )
            print(f"largest difference between the trained models: {diff:.1e}")
            torch.save(synced_once.state_dict(), "no_sync.pt")
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
