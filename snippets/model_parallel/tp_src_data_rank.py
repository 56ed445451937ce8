"""Where the weights of a split model come from: rank 0, or each rank's own copy.

Run it with one process per GPU, for example two:
  torchrun --standalone --nproc_per_node=2 tp_src_data_rank.py

Each rank builds the model from a DIFFERENT seed. The script splits it with
parallelize_module, sending rank 0's weights (src_data_rank=0, the default) or not
(src_data_rank=None), and shards it with FSDP's fully_shard, and says whose weights each
rank then holds.
"""

import os
import time
from collections import Counter
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)


def build_model():
    return nn.Sequential(nn.Linear(8, 32),  # "0": split column-wise
                         nn.GELU(),
                         nn.Linear(32, 8),  # "2": split row-wise
                         nn.Linear(8, 4))  # "3": not in the plan


PLAN = {"0": ColwiseParallel(), "2": RowwiseParallel()}


def collectives(mode):
    """'broadcast 1, scatter 3' from a CommDebugMode's counts."""
    counts = Counter(str(op).split(".")[-1].rstrip("_")
                     for op, n in mode.get_comm_counts().items() for _ in range(n))
    return ", ".join(f"{op} {n}" for op, n in sorted(counts.items())) or "-"


def whose(model, built):
    """Per parameter: the ranks whose model, as built, it now equals ('-': none)."""
    found = {}
    for name, p in model.named_parameters():
        # the whole parameter as the model now holds it (a DTensor: gathered)
        now = p.full_tensor() if hasattr(p, "full_tensor") else p
        found[name] = [r for r, b in enumerate(built)
                       if torch.equal(now.cpu(), b[name])]
    return found


def split(how, mesh, device):
    torch.manual_seed(dist.get_rank())  # a DIFFERENT model on every rank
    model = build_model().to(device)
    with CommDebugMode() as comms:
        if how == "fully_shard":
            fully_shard(model, mesh=mesh)
        else:
            parallelize_module(model, mesh, PLAN, src_data_rank=how)
    return model, collectives(comms)


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    dist.init_process_group(backend, timeout=timedelta(seconds=60))
    try:
        rank, world_size = dist.get_rank(), dist.get_world_size()
        mesh = init_device_mesh(device.type, (world_size,))  # one row
        # every rank's model as built, to compare with (for this demonstration only)
        torch.manual_seed(rank)
        mine = {n: p.detach().cpu() for n, p in build_model().named_parameters()}
        built = [None] * world_size
        dist.all_gather_object(built, mine)
        for how in (0, None, "fully_shard"):
            model, comms = split(how, mesh, device)
            per_rank = [None] * world_size  # whose weights every rank holds
            dist.all_gather_object(per_rank, whose(model, built))
            if rank == 0:
                label = how if how == "fully_shard" else f"src_data_rank={how}"
                print(f"{label} ({comms})")
                print(f"  {'':9}" + "".join(f"{f'rank {r} holds':16}"
                                            for r in range(world_size)).rstrip())
                for name in per_rank[0]:
                    cells = [" and ".join(f"rank {r}'s" for r in found[name]) or "a mix"
                             for found in per_rank]
                    row = "".join(f"{cell:16}" for cell in cells)
                    print(f"  {name:9}" + row.rstrip())
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
