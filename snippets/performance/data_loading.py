"""Data loading under DDP: one shard per process; how num_workers changes throughput.

  torchrun --standalone --nproc_per_node=2 data_loading.py

The dataset waits --wait-ms per sample, as reading from a network filesystem might.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class SlowDataset(Dataset):
    """Sample i is a 3x32x32 image filled with i; each read waits first."""

    def __init__(self, n, wait_ms):
        self.n, self.wait = n, wait_ms / 1000

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.wait)
        return torch.full((3, 32, 32), float(i)), i


def make_loader(dataset, sampler, num_workers, persistent, batch_size=16):
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        num_workers=num_workers,
        persistent_workers=persistent
        and num_workers > 0,  # keep workers between epochs
        pin_memory=torch.cuda.is_available(),  # page-locked: faster copies to a GPU
    )


def epoch_stats(loader, sampler, epoch, device):
    """Indices seen, samples per second, seconds to the first batch."""
    sampler.set_epoch(epoch)  # a new shuffle every epoch, the same on every process
    start = time.perf_counter()
    seen, first = [], None
    for x, i in loader:
        x = x.to(device, non_blocking=True)
        first = first or time.perf_counter() - start
        seen += i.tolist()
    return seen, len(seen) / (time.perf_counter() - start), first


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=128)
    parser.add_argument(
        "--wait-ms", type=float, default=5.0, help="wait per sample read"
    )
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2, 4])
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
        dataset = SlowDataset(args.samples, args.wait_ms)
        # Shuffles all indices, the same way on every rank, then deals them out.
        sampler = DistributedSampler(dataset, seed=0)
        cpus = len(
            os.sched_getaffinity(0)
        )  # what Slurm's --cpus-per-task allows this process
        if rank == 0:
            print(
                f"{world} processes, {len(sampler)} of {len(dataset)} samples each "
                f"per epoch, "
                f"{cpus} CPUs usable by each process"
            )

        # 1. Sharding: which samples does each process read?
        loader = make_loader(dataset, sampler, num_workers=0, persistent=False)
        for epoch in range(2):
            seen, _, _ = epoch_stats(loader, sampler, epoch, device)
            shards = [None] * world
            dist.all_gather_object(shards, seen)
            if rank == 0:
                for r, shard in enumerate(shards):
                    print(
                        f"epoch {epoch}, rank {r}: {len(shard)} samples, "
                        f"first {shard[:6]}"
                    )
                once = sorted(i for shard in shards for i in shard) == list(
                    range(len(dataset))
                )
                print(f"epoch {epoch}: every sample exactly once: {once}")

        # 2. Throughput per process against num_workers (second epoch: workers running).
        if rank == 0:
            device_kind = "GPU" if device.type == "cuda" else "CPU-only"
            print(f"\n{device_kind} figures, {args.wait_ms:g} ms wait per sample")
            print(f"{'num_workers':>11}  {'samples/s per process':>22}")
        for workers in args.workers:
            loader = make_loader(dataset, sampler, workers, persistent=True)
            epoch_stats(loader, sampler, 0, device)
            _, rate, _ = epoch_stats(loader, sampler, 1, device)
            if rank == 0:
                print(f"{workers:>11}  {rate:>12.0f} samples/s")
            del loader  # stops its workers

        # 3. persistent_workers: how long until the second epoch's first batch?
        for persistent in (False, True):
            loader = make_loader(dataset, sampler, max(args.workers), persistent)
            epoch_stats(loader, sampler, 0, device)
            _, _, first = epoch_stats(loader, sampler, 1, device)
            if rank == 0:
                print(
                    f"persistent_workers={persistent}: "
                    f"first batch of epoch 2 after {first * 1e3:.0f} ms"
                )
            del loader
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
