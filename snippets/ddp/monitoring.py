"""Measure each rank's speed and peak memory; name any rank much slower than the rest.

  torchrun --standalone --nproc_per_node=4 monitoring.py
  torchrun --standalone --nproc_per_node=4 monitoring.py --slow-rank 1

--slow-rank R makes rank R wait 30 ms before every batch, as a rank with slow data
loading or a slower GPU would, so that you can see how a straggler shows up.
"""

import argparse
import os
import resource
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def sync(device):
    """GPUs work asynchronously: wait until they are done before reading a clock."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_memory_mib(device):
    if device.type == "cuda":  # the most memory tensors held at once since the reset
        return torch.cuda.max_memory_allocated(device) / 2**20
    # On the CPU: the most memory the whole process held (Linux reports KiB).
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def train_epoch(ddp, loader, optimizer, device, delay):
    """One epoch of ordinary DDP training; returns this rank's samples per second."""
    samples = 0
    sync(device)
    start = time.perf_counter()
    for x, y in loader:
        time.sleep(delay)  # 0 except on the --slow-rank
        x, y = x.to(device), y.to(device)
        loss = F.cross_entropy(ddp(x), y)
        optimizer.zero_grad()
        # The all-reduce of the gradients: with gloo, backward() waits here for every
        # rank. NCCL only queues it on the GPU: the process waits for it later, where it
        # next waits for the GPU (in sync() at the latest).
        loss.backward()
        optimizer.step()
        samples += len(x)
    sync(device)
    return samples / (time.perf_counter() - start)


def speed_alone(ddp, loader, device, delay):
    """Samples per second of this rank on its own, without exchanging gradients.

    Only the fastest batch counts, as with timeit: slower ones were disturbed by other
    programs. A rank that is slow at every batch is slow in this figure too.
    """
    seconds = []
    for x, y in loader:
        start = time.perf_counter()
        time.sleep(delay)
        x, y = x.to(device), y.to(device)
        with ddp.no_sync():  # no all-reduce in backward(): nobody waits for anybody
            F.cross_entropy(ddp(x), y).backward()
        sync(device)
        seconds.append(time.perf_counter() - start)
    ddp.zero_grad()  # these gradients were only for the measurement
    return loader.batch_size / min(seconds)


def report(rows, device):
    """Rank 0 prints one row per rank and names the ranks that are much slower."""
    print(f"{'rank':>4}  {'device':<7}  {'on its own':>16}  {'in training':>16}  "
          "peak memory")
    for r in rows:
        print(f"{r['rank']:>4}  {r['device']:<7}  {r['alone']:>6.0f} samples/s  "
              f"{r['training']:>6.0f} samples/s  {r['memory']:>7.1f} MiB")
    print(f"whole job in training: {sum(r['training'] for r in rows):.0f} samples/s")
    if device.type == "cuda":
        print("peak memory: torch.cuda.max_memory_allocated(), tensors only")
    else:
        print("peak memory: largest resident size of the whole process (ru_maxrss)")
    fastest = max(r["alone"] for r in rows)
    slow = [r["rank"] for r in rows if r["alone"] < fastest / 3]
    for rank in slow:
        print(f"rank {rank} is SLOW: under a third of the speed of the fastest rank")
    if not slow:
        print("no rank is much slower than the others")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--slow-rank", type=int, default=None)
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
        rank = dist.get_rank()
        delay = 0.030 if rank == args.slow_rank else 0.0
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        torch.manual_seed(0)
        dataset = TensorDataset(torch.randn(2048, 64), torch.randint(0, 10, (2048,)))
        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, batch_size=64, sampler=sampler)
        model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
        model = model.to(device)
        ddp = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
        for epoch in range(args.epochs):
            sampler.set_epoch(epoch)
            training = train_epoch(ddp, loader, optimizer, device, delay)  # keep last
        alone = speed_alone(ddp, loader, device, delay)
        me = {"rank": rank, "device": str(device), "alone": alone, "training": training,
              "memory": peak_memory_mib(device)}
        rows = [None] * dist.get_world_size()
        dist.all_gather_object(rows, me)  # every rank's figures, in rank order
        if rank == 0:
            report(rows, device)
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
