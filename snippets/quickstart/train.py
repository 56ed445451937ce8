"""Quick start: train a small classifier on handwritten digits with DDP.

Start one process per GPU with torchrun (without GPUs, it trains on the CPU):
    torchrun --standalone --nproc_per_node=4 train.py
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

parser = argparse.ArgumentParser(description="DDP on scikit-learn's digits")
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--batch-size", type=int, default=32, help="per process and step")
parser.add_argument("--lr", type=float, default=0.002)
args = parser.parse_args()

# 1. Join the other processes: torchrun sets RANK, LOCAL_RANK, WORLD_SIZE,
#    MASTER_ADDR and MASTER_PORT in each. One GPU per process, or the CPU.
if torch.cuda.is_available():
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl")
else:
    device = torch.device("cpu")
    dist.init_process_group("gloo")
rank, world_size = dist.get_rank(), dist.get_world_size()

# 2. The data: 1797 images of 8 x 8 pixels that ship with scikit-learn. Every
#    process loads all of it; the sampler gives each process its own share.
digits = load_digits()
x = torch.tensor(digits.data, dtype=torch.float32) / 16
y = torch.tensor(digits.target)
order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
train_set = TensorDataset(x[order[:1536]], y[order[:1536]])
x_test, y_test = x[order[1536:]].to(device), y[order[1536:]].to(device)  # held out
sampler = DistributedSampler(train_set, shuffle=True, seed=0)
loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)

# 3. The model, wrapped in DDP: it averages the gradients of all processes.
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).to(device)
model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

if rank == 0:
    print(f"{world_size} processes ({dist.get_backend()} on {device.type}), "
          f"{world_size * args.batch_size} images per step")
for epoch in range(args.epochs):
    sampler.set_epoch(epoch)  # a new shuffle every epoch
    totals = torch.zeros(2, device=device)  # summed loss, images
    for xb, yb in loader:
        xb, yb = xb.to(device), yb.to(device)
        loss = nn.functional.cross_entropy(model(xb), yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        totals[0] += loss.detach() * len(yb)
        totals[1] += len(yb)
    dist.all_reduce(totals)  # add up over all processes
    if rank == 0:
        print(f"epoch {epoch + 1}: loss {totals[0] / totals[1]:.4f} "
              f"on {totals[1]:.0f} images")

# 4. Rank 0 tests the model on the held-out images and saves it; the others wait.
if rank == 0:
    with torch.no_grad():
        correct = (model.module(x_test).argmax(dim=1) == y_test).sum().item()
    print(f"held-out accuracy {correct / len(y_test):.1%} on {len(y_test)} images")
    torch.save(model.module.state_dict(), "model.pt")
    print("saved model.pt")
dist.barrier(device_ids=model.device_ids)
dist.destroy_process_group()
time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits
