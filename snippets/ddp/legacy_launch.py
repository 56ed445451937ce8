"""A script written for the old launcher, python -m torch.distributed.launch.

    python -m torch.distributed.launch --nproc_per_node=2 legacy_launch.py

It reads its local rank from a --local_rank argument, as that launcher's
documentation once told everyone to do. See migrating.md for what goes wrong.
"""

import argparse
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=0)  # the old launcher passed it
args = parser.parse_args()

if torch.cuda.is_available():
    device = torch.device("cuda", args.local_rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl")
else:
    device = torch.device("cpu")
    dist.init_process_group("gloo")
try:
    model = DDP(nn.Linear(8, 2).to(device),
                device_ids=[device.index] if device.type == "cuda" else None)
    local_ranks = [None] * dist.get_world_size()
    dist.all_gather_object(local_ranks, args.local_rank)
    if dist.get_rank() == 0:
        print(f"the processes think their local ranks are {local_ranks}")
finally:
    dist.destroy_process_group()
    time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits
