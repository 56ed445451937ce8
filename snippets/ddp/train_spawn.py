"""train.py's training, started by the script itself with torch.multiprocessing.spawn.

    python train_spawn.py --nprocs 2

One process per GPU (or --nprocs processes on the CPU), on this machine only.
The processes meet at MASTER_ADDR:MASTER_PORT, 127.0.0.1:29500 unless those
variables are set.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from sklearn.datasets import load_digits
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nprocs", type=int, default=torch.cuda.device_count() or 2,
                        help="processes to start (default: one per GPU, or 2)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32,
                        help="samples per step and process")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", default="checkpoint.pt",
                        help="where rank 0 saves the result")
    parser.add_argument("--log-every", type=int, default=10,
                        help="print the loss every this many steps")
    return parser.parse_args()


def make_datasets(train_size=1024):
    """scikit-learn's 1797 handwritten digits, 8 × 8 pixels (shipped inside the
    package: nothing to download). 1024 images to train on, the other 773 held out."""
    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16  # pixels 0-16 to 0-1
    y = torch.tensor(digits.target)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(1234))
    x, y = x[order], y[order]
    return (TensorDataset(x[:train_size], y[:train_size]),
            TensorDataset(x[train_size:], y[train_size:]))


def make_model(features=64, classes=10):
    return nn.Sequential(nn.Linear(features, 64), nn.ReLU(), nn.Linear(64, 64),
                         nn.ReLU(), nn.Linear(64, classes))


def accuracy(model, dataset, device):
    """The share of ``dataset`` that ``model`` classifies right."""
    x, y = (t.to(device) for t in dataset.tensors)
    with torch.no_grad():
        return (model(x).argmax(dim=1) == y).float().mean().item()


def worker(rank, args):
    """What every process runs; spawn passes the rank, 0 to nprocs - 1."""
    if torch.cuda.is_available():
        device = torch.device("cuda", rank)  # one machine: the rank is the local rank
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    dist.init_process_group(backend, rank=rank, world_size=args.nprocs)
    try:
        train(args, device)
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


def train(args, device):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    dataset, held_out = make_datasets()
    sampler = DistributedSampler(dataset, shuffle=True, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler,
                        drop_last=True)
    model = make_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)

    total_steps = args.epochs * len(loader)
    if rank == 0:
        print(f"world size {world_size} ({dist.get_backend()}, {device.type}), "
              f"started by mp.spawn: {world_size * args.batch_size} samples per step")
    step = 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)  # a new shuffle every epoch
        totals = torch.zeros(3, device=device)  # summed loss, correct answers, samples
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            logits = model(x)
            loss = nn.functional.cross_entropy(logits, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            totals[0] += loss.detach() * len(y)
            totals[1] += (logits.argmax(dim=1) == y).sum()
            totals[2] += len(y)
            if step % args.log_every == 0:
                average = loss.detach().clone()
                dist.all_reduce(average)  # the sum over all ranks, on every rank
                average /= world_size  # their mean
                if rank == 0:
                    print(f"epoch {epoch + 1}/{args.epochs}  "
                          f"step {step}/{total_steps}  loss {average.item():.4f}")
        dist.all_reduce(totals)
        if rank == 0:
            loss_sum, correct, samples = totals.tolist()
            print(f"epoch {epoch + 1}/{args.epochs} done: "
                  f"loss {loss_sum / samples:.4f}, "
                  f"accuracy {correct / samples:.1%} on {samples:.0f} samples")
    if rank == 0:
        print(f"held-out accuracy {accuracy(model.module, held_out, device):.1%} "
              f"on {len(held_out)} images")
        state = {"model": model.module.state_dict(),
                 "optimizer": optimizer.state_dict(), "step": step}
        torch.save(state, f"{args.checkpoint}.tmp")
        os.replace(f"{args.checkpoint}.tmp", args.checkpoint)
        print(f"saved {args.checkpoint}")
    dist.barrier(device_ids=model.device_ids)  # on this process's GPU under NCCL


def main():
    args = parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")  # every process inherits these
    os.environ.setdefault("MASTER_PORT", "29500")
    mp.spawn(worker, args=(args,), nprocs=args.nprocs)  # waits; fails if any fails


if __name__ == "__main__":
    main()
