"""Where the memory went: a snapshot of every allocation on GPUs, a profile on CPUs.

  torchrun --standalone --nproc_per_node=2 memory_snapshot.py
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \\
      torchrun --standalone --nproc_per_node=2 memory_snapshot.py

On GPUs, each rank records the history of PyTorch's CUDA memory allocator for a
few FSDP2 training steps and writes it to snapshot_rank<N>.pickle: drag that file
onto https://pytorch.org/memory_viz to see every allocation over time, with the
line of Python that made it. There is no such allocator on the CPU: there, each
rank profiles the same steps with torch.profiler(profile_memory=True) instead, and
rank 0 prints the operators that allocated the most memory.
"""

import os
import pickle
import sys
import time

import torch

NEEDS = "2.10"  # FSDP2 on CPUs: 2.6 lacks what it needs, 2.8 sums gradients
if torch.__version__ < f"{NEEDS}.0a0":  # NVIDIA's 2.N.0a0 builds count as 2.N
    print(f"this script needs PyTorch >= {NEEDS} (found {torch.__version__})",
          file=sys.stderr)
    sys.exit(2)

import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.profiler import ProfilerActivity, profile

WIDTH, DEPTH, BATCH, STEPS = 64, 4, 32, 3


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


def train(device):
    # All ranks, on this device. Without mesh=, fully_shard takes the accelerator
    # PyTorch was built for (CUDA, say), even where no GPU is visible.
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    torch.manual_seed(0)
    model = Net().to(device)
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(dist.get_rank())
    for _ in range(STEPS):
        x = torch.randn(BATCH, WIDTH, generator=g).to(device)
        optimizer.zero_grad(set_to_none=True)
        F.mse_loss(model(x), x[:, :1]).backward()
        optimizer.step()


def snapshot_on_gpu(device, rank):
    """Record every allocation and free, write them to a file, and summarise it."""
    torch.cuda.memory._record_memory_history(max_entries=100_000)
    train(device)
    name = f"snapshot_rank{rank}.pickle"
    torch.cuda.memory._dump_snapshot(name)
    torch.cuda.memory._record_memory_history(enabled=None)  # stop recording
    with open(name, "rb") as f:  # our own file: plain pickle
        snapshot = pickle.load(f)
    events = [e for trace in snapshot["device_traces"] for e in trace]
    segments = snapshot["segments"]
    return (f"{name}: {sum(e['action'] == 'alloc' for e in events)} allocations "
            f"recorded, {len(segments)} segments, expandable "
            f"{all(s.get('is_expandable', False) for s in segments)}, peak allocated "
            f"{torch.cuda.max_memory_allocated(device) / 2**20:.2f} MiB")


def profile_on_cpu(device, rank):
    """The CPU's nearest equivalent: memory allocated per operator, by the profiler."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        train(device)
    # Leave out the collectives: gloo allocates partly in threads of its own, which the
    # profiler attributes to them or not, depending on timing.
    rows = [e for e in prof.key_averages() if not e.key.startswith(("[", "c10d::"))]
    rows.sort(key=lambda e: (-e.cpu_memory_usage, e.key))
    lines = [f"rank {rank}: operators that allocated the most "
             f"(KiB, including what they called):"]
    lines += [f"  {e.key:<28} {e.count:>5} calls {e.cpu_memory_usage / 1024:>9.1f}"
              for e in rows[:6]]
    return "\n".join(lines)


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    try:
        rank = dist.get_rank()
        if device.type == "cuda":
            report = snapshot_on_gpu(device, rank)
        else:
            report = profile_on_cpu(device, rank)
        everyone = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, report)
        if rank == 0:
            print("\n".join(everyone))
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
