"""Save and resume FSDP2 training with distributed checkpoints (DCP), on any world size.

  torchrun --standalone --nproc_per_node=2 dcp_checkpoint.py --epochs 2
  torchrun --standalone --nproc_per_node=4 dcp_checkpoint.py --epochs 4   # 2 more

Every rank writes its own shards into one checkpoint folder, all at the same
time; loading gives each rank the pieces its new shards need, however many
ranks saved them.
"""

import argparse
import os
import sys
import time
from pathlib import Path

import torch

NEEDS = "2.10"  # FSDP2 on CPUs: 2.6 lacks what it needs, 2.8 sums gradients
if torch.__version__ < f"{NEEDS}.0a0":  # NVIDIA's 2.N.0a0 builds count as 2.N
    print(f"this script needs PyTorch >= {NEEDS} (found {torch.__version__})",
          file=sys.stderr)
    sys.exit(2)

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn.functional as F
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

WIDTH, DEPTH = 64, 4
GLOBAL_BATCH, LR = 64, 1e-3


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.ff = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                nn.Linear(4 * width, width))

    def forward(self, x):
        return x + self.ff(self.norm(x))


class Net(nn.Module):
    def __init__(self, width=WIDTH, depth=DEPTH):
        super().__init__()
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.head = nn.Linear(width, 1)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def make_dataset():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(512, WIDTH, generator=g)
    noise = 0.1 * torch.randn(512, 1, generator=g)
    y = torch.tanh(x[:, :8].sum(dim=1, keepdim=True)) + noise
    return TensorDataset(x, y)


class AppState(Stateful):
    """What a checkpoint holds. DCP calls state_dict() and load_state_dict() itself."""

    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer
        self.epoch, self.saved_by = 0, None

    def state_dict(self):
        # This rank's shards, as DTensors that know their place in the full tensors
        model_state, optimizer_state = get_state_dict(self.model, self.optimizer)
        return {"model": model_state, "optimizer": optimizer_state,
                "epoch": self.epoch, "world_size": dist.get_world_size()}

    def load_state_dict(self, state):
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optimizer"])
        self.epoch, self.saved_by = state["epoch"], state["world_size"]


def latest_checkpoint(folder):
    """The newest complete checkpoint (DCP writes .metadata last, when all are done)."""
    done = [p.parent for p in folder.glob("epoch_*/.metadata")]
    return max(done, key=lambda p: int(p.name.split("_")[1]), default=None)


def train_one_epoch(model, optimizer, loader, sampler, epoch, device):
    sampler.set_epoch(epoch)
    total = 0.0
    for x, y in loader:
        optimizer.zero_grad(set_to_none=True)
        loss = F.mse_loss(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
        total += loss.item()
    return total / len(loader)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=4,
                        help="train until this many epochs are done")
    parser.add_argument("--checkpoints", type=Path, default=Path("checkpoints"))
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
        rank, world_size = dist.get_rank(), dist.get_world_size()
        # All ranks, on this device. Without mesh=, fully_shard takes the accelerator
        # PyTorch was built for (CUDA, say), even where no GPU is visible.
        mesh = init_device_mesh(device.type, (world_size,))
        torch.manual_seed(0)
        model = Net().to(device)
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        optimizer = torch.optim.Adam(model.parameters(), lr=LR)
        state = AppState(model, optimizer)

        last = latest_checkpoint(args.checkpoints)
        if last is not None:  # every rank loads: each reads the pieces it needs
            dcp.load({"app": state}, checkpoint_id=last)
            if rank == 0:
                print(f"resumed from {last} after epoch {state.epoch}: "
                      f"saved by {state.saved_by} ranks, loaded by {world_size}")
        elif rank == 0:
            print(f"no checkpoint in {args.checkpoints}: "
                  f"starting from scratch on {world_size} ranks")

        dataset = make_dataset()
        sampler = DistributedSampler(dataset, shuffle=True, seed=0)
        batch = GLOBAL_BATCH // world_size  # each rank's share of the global batch
        loader = DataLoader(dataset, batch_size=batch, sampler=sampler)
        for epoch in range(state.epoch, args.epochs):
            loss = train_one_epoch(model, optimizer, loader, sampler, epoch, device)
            loss = torch.tensor(loss, device=device)
            dist.all_reduce(loss)  # the sum over all ranks, on every rank
            loss /= world_size  # their mean
            state.epoch = epoch + 1
            path = args.checkpoints / f"epoch_{state.epoch}"
            dcp.save({"app": state}, checkpoint_id=path)  # every rank writes its shards
            if rank == 0:
                print(f"epoch {state.epoch}: loss {loss.item():.5f}, saved {path}")
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
