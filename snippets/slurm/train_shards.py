"""Train with DistributedDataParallel on a data set kept as a few large shard files.

Each process reads whole shard files, one after the other, from the folder given
with --data: the copy of the data set on its own node's local disk. Shard i goes to
rank i modulo the world size, so every process reads different samples and no
sample is read twice. Started by srun (one task per GPU) or by torchrun.

    python train_shards.py --make-shards DIR   # write the example data set (16 shards)
"""

import argparse
import os
import socket
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

FEATURES, CLASSES = 20, 4


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="folder of shard-*.pt files to train from")
    parser.add_argument("--make-shards", metavar="DIR",
                        help="write the example data set into DIR and exit")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32,
                        help="samples per step and process")
    parser.add_argument("--checkpoint", default="checkpoint.pt",
                        help="where rank 0 saves the model: on the shared file system")
    args = parser.parse_args()
    if not (args.data or args.make_shards):
        parser.error("give --data DIR (or --make-shards DIR to write the example data)")
    return args


def make_shards(folder, shards=16, per_shard=64):
    """An example data set: 16 files of 64 labelled samples each (16 shares out evenly
    among 1, 2, 4, 8 or 16 processes)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator().manual_seed(0)
    weights = torch.randn(FEATURES, CLASSES, generator=generator)
    for i in range(shards):
        x = torch.randn(per_shard, FEATURES, generator=generator)
        y = (x @ weights).argmax(dim=1)
        torch.save({"x": x, "y": y}, folder / f"shard-{i:05d}.pt")
    print(f"wrote {shards} shards of {per_shard} samples to {folder}")


def launcher_env():
    """Rank, world size and local rank, from torchrun's or srun's variables."""
    env = os.environ
    if "RANK" in env:  # torchrun
        names = "RANK", "WORLD_SIZE", "LOCAL_RANK"
    elif "SLURM_STEP_ID" in env:  # a task of srun (srun runs its tasks in a job step)
        names = "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"
    else:  # no launcher, or the job script itself (its SLURM_PROCID is 0, always)
        sys.exit("train_shards.py: no launcher started it; start it with srun or "
                 "torchrun (in a job script: srun python train_shards.py)")
    return [int(env[name]) for name in names]


def setup():
    """Join the other processes; return this process's device."""
    rank, world_size, local_rank = launcher_env()
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)  # one GPU per process
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend, rank=rank, world_size=world_size,
                            timeout=timedelta(minutes=5))
    return device


def load_my_shards(folder):
    """This rank's shards, each file read whole and in order; and their names."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    shards = sorted(Path(folder).glob("shard-*.pt"))
    if not shards or len(shards) % world_size:
        sys.exit(f"train_shards.py: {len(shards)} shards in {folder} do not share "
                 f"out evenly among {world_size} processes")
    mine = shards[rank::world_size]
    parts = [torch.load(path, weights_only=True) for path in mine]
    x = torch.cat([part["x"] for part in parts])
    y = torch.cat([part["y"] for part in parts])
    return x, y, [path.name for path in mine]


def report_reads(folder, names, samples):
    """Rank 0 prints, for every rank, its node, the folder it read and what it read."""
    node = os.environ.get("SLURMD_NODENAME", socket.gethostname())  # Slurm's name
    reads = [None] * dist.get_world_size()
    dist.all_gather_object(reads, (node, str(Path(folder).resolve()), names, samples))
    if dist.get_rank() == 0:
        for rank, (node, where, names, samples) in enumerate(reads):
            print(f"rank {rank} on {node}: {samples} samples from "
                  f"{', '.join(names)} in {where}")


def main():
    args = parse_args()
    if args.make_shards:
        make_shards(args.make_shards)
        return
    device = setup()
    x, y, names = load_my_shards(args.data)
    report_reads(args.data, names, len(x))
    torch.manual_seed(0)  # the same initial weights on every rank
    model = nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, CLASSES))
    ids = [device.index] if device.type == "cuda" else None
    model = DDP(model.to(device), device_ids=ids)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = x.to(device), y.to(device)
    shuffle = torch.Generator().manual_seed(dist.get_rank())
    for epoch in range(args.epochs):
        order = torch.randperm(len(x), generator=shuffle).to(device)
        total = torch.zeros(2, device=device)  # loss sum and sample count
        for start in range(0, len(x), args.batch_size):
            batch = order[start:start + args.batch_size]
            loss = nn.functional.cross_entropy(model(x[batch]), y[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += torch.stack([loss.detach() * len(batch), torch.tensor(
                float(len(batch)), device=device)])
        dist.all_reduce(total)  # over every rank's samples
        if dist.get_rank() == 0:
            print(f"epoch {epoch}: loss {total[0].item() / total[1].item():.4f} "
                  f"over {int(total[1].item())} samples")
    if dist.get_rank() == 0:
        torch.save(model.module.state_dict(), f"{args.checkpoint}.tmp")
        # atomic: a job killed while saving keeps the previous checkpoint
        os.replace(f"{args.checkpoint}.tmp", args.checkpoint)
        print(f"saved {args.checkpoint}")
    dist.destroy_process_group()
    time.sleep(0.1)  # let gloo's threads finish (docs/troubleshooting/crashes.md)


if __name__ == "__main__":
    main()
