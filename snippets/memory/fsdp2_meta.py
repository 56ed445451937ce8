"""FSDP2 for a model too large for one device: build on `meta`, shard, load, train.

  python fsdp2_meta.py --pretrain                       # writes pretrained.pt
  torchrun --standalone --nproc_per_node=2 fsdp2_meta.py

--pretrain stands in for the checkpoint you start from: one process trains the
model for one epoch and saves its weights and Adam state as full tensors.
Without it, every rank builds the model on the meta device (no memory), shards
it, allocates its own shards only, and receives the checkpoint from rank 0, one
tensor at a time. Each rank counts the bytes it holds at its peak; then training
goes on for one more epoch, and rank 0 saves the full weights to fsdp2_meta.pt.
"""

import argparse
import os
import sys
import time
import weakref

import torch

NEEDS = "2.10"  # FSDP2 on CPUs: 2.6 lacks what it needs, 2.8 sums gradients
if torch.__version__ < f"{NEEDS}.0a0":  # NVIDIA's 2.N.0a0 builds count as 2.N
    print(f"this script needs PyTorch >= {NEEDS} (found {torch.__version__})",
          file=sys.stderr)
    sys.exit(2)

import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.checkpoint.state_dict import (StateDictOptions,
                                                     get_model_state_dict,
                                                     get_optimizer_state_dict,
                                                     set_model_state_dict,
                                                     set_optimizer_state_dict)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from torch.utils.weak import WeakIdKeyDictionary

WIDTH, DEPTH = 64, 16
GLOBAL_BATCH, LR = 64, 1e-3
CHECKPOINT = "pretrained.pt"


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


def train_epoch(model, optimizer, dataset, epoch, device, rank=0, world_size=1):
    sampler = DistributedSampler(dataset, world_size, rank, shuffle=True, seed=0)
    sampler.set_epoch(epoch)
    loader = DataLoader(dataset, batch_size=GLOBAL_BATCH // world_size, sampler=sampler)
    for x, y in loader:
        optimizer.zero_grad(set_to_none=True)
        F.mse_loss(model(x.to(device)), y.to(device)).backward()
        optimizer.step()


class PeakBytes(TorchDispatchMode):
    """Bytes of the tensors that PyTorch operations create while it is active, until
    they are freed; ``peak`` is the most at any moment. For CPU-only machines: on
    GPUs, torch.cuda.max_memory_allocated() counts the same for the whole process."""

    def __init__(self):
        super().__init__()
        self.live = self.peak = 0
        self.seen = WeakIdKeyDictionary()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in self.tensors((args, kwargs))}
        for t in self.tensors(out):
            storage = t.untyped_storage()
            # new memory only: not a view of an input (detach, slicing), not in place
            if storage.data_ptr() not in inputs and storage not in self.seen:
                self.seen[storage] = True
                self.live += storage.nbytes()
                self.peak = max(self.peak, self.live)
                # subtract the bytes again when the storage is freed
                weakref.finalize(storage, self._free, storage.nbytes())
        return out

    @staticmethod
    def tensors(tree):
        for t in tree_flatten(tree)[0]:
            if isinstance(t, DTensor):
                t = t.to_local()  # the part this rank stores
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                yield t

    def _free(self, nbytes):
        self.live -= nbytes


def pretrain(device):
    """One process, one epoch: the full checkpoint that a real run would start from."""
    torch.manual_seed(0)
    model = Net().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    train_epoch(model, optimizer, make_dataset(), 0, device)
    # names as keys of the optimiser state, as set_optimizer_state_dict takes them
    torch.save({"model": get_model_state_dict(model),
                "optimizer": get_optimizer_state_dict(model, optimizer)},
               CHECKPOINT)
    count = sum(p.numel() for p in model.parameters())
    print(f"saved {CHECKPOINT}: {count:,} parameters, weights and Adam state "
          f"({os.path.getsize(CHECKPOINT) / 2**20:.2f} MiB)")


def build_sharded(device):
    """Build on meta, shard, then allocate this rank's shards and initialise them."""
    with torch.device("meta"):
        model = Net()  # shapes only: no memory, however large the model
    # All ranks, on this device. Without mesh=, fully_shard takes the accelerator
    # PyTorch was built for (CUDA, say), even where no GPU is visible.
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model.to_empty(device=device)  # allocates this rank's shards, uninitialised
    torch.manual_seed(0)  # the same seed on every rank
    for module in model.modules():
        if hasattr(module, "reset_parameters"):  # nn.Linear, nn.LayerNorm...
            module.reset_parameters()
    return model


def max_difference(model, optimizer):
    """Rank 0: largest difference between the loaded model and the checkpoint, gathering
    one tensor at a time. Every rank must call it: full_tensor() is a collective."""
    worst = 0.0
    if dist.get_rank() == 0:
        full = torch.load(CHECKPOINT, map_location="cpu", mmap=True, weights_only=True)
    state = get_optimizer_state_dict(model, optimizer)["state"]
    pairs = [(p, "model", name) for name, p in model.named_parameters()]
    pairs += [(t, "optimizer", (name, key)) for name, s in state.items()
              for key, t in s.items() if t.dim() > 0]
    for tensor, part, key in pairs:
        whole = tensor.full_tensor().cpu()
        if dist.get_rank() == 0:
            expected = (full["model"][key] if part == "model"
                        else full["optimizer"]["state"][key[0]][key[1]])
            worst = max(worst, (whole - expected).abs().max().item())
    return worst


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--pretrain", action="store_true",
                        help="one process: write the full checkpoint to start from")
    args = parser.parse_args()
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if args.pretrain:
        return pretrain(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    try:
        rank, world_size = dist.get_rank(), dist.get_world_size()
        full = {}
        if rank == 0:  # mmap: each tensor is read from the file when it is sent
            full = torch.load(CHECKPOINT, map_location="cpu", mmap=True,
                              weights_only=True)
        with PeakBytes() as counter:
            model = build_sharded(device)
            optimizer = torch.optim.Adam(model.parameters(), lr=LR)
            options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
            set_model_state_dict(model, full.get("model", {}), options=options)
            set_optimizer_state_dict(model, optimizer, full.get("optimizer", {}),
                                     options=options)
        peak = counter.peak
        if device.type == "cuda":
            peak = torch.cuda.max_memory_allocated(device)
        count = sum(p.numel() for p in model.parameters())  # DTensors: full sizes
        whole = 16 * count  # fp32 weights, gradients and Adam's two moments
        largest = max(p.numel() * p.element_size() for p in model.parameters())
        everyone = [None] * world_size
        dist.all_gather_object(everyone, peak)
        if rank == 0:
            print(f"world size {world_size}, {count:,} parameters; weights, gradients "
                  f"and Adam state of the whole model: {whole / 2**20:.2f} MiB")
            print(f"largest single tensor: {largest / 2**10:.1f} KiB")
            print("Peak memory each rank held while building and loading:")
            for r, held in enumerate(everyone):
                print(f"  rank {r}: {held / 2**20:.3f} MiB = {held / whole:.4f} of the "
                      f"whole model (1/N = {1 / world_size:.4f})")
        worst = max_difference(model, optimizer)
        if rank == 0:
            print(f"loaded weights and Adam state differ from {CHECKPOINT} by at most "
                  f"{worst:.1e}")

        epoch = 1  # the second: the checkpoint holds one epoch of training
        train_epoch(model, optimizer, make_dataset(), epoch, device, rank, world_size)
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        weights = get_model_state_dict(model, options=options)
        if rank == 0:
            torch.save(weights, "fsdp2_meta.pt")
            print("trained one more epoch; saved fsdp2_meta.pt")
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
