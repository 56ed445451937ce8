"""legacy_launch.py fixed: runs under torchrun and the old torch.distributed.launch.

    torchrun --standalone --nproc_per_node=2 local_rank.py
    python -m torch.distributed.launch --nproc_per_node=2 local_rank.py   # also works
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
# torch.distributed.launch passes --local-rank=N (--local_rank=N before PyTorch 2.0):
# accept both spellings so that old job scripts still work, but ignore the value.
parser.add_argument("--local-rank", "--local_rank", type=int,
                    help="ignored: LOCAL_RANK is used")
args = parser.parse_args()
local_rank = int(os.environ["LOCAL_RANK"])  # torchrun and the old launcher set it

if torch.cuda.is_available():
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl")
else:
    device = torch.device("cpu")
    dist.init_process_group("gloo")
try:
    model = DDP(nn.Linear(8, 2).to(device),
                device_ids=[device.index] if device.type == "cuda" else None)
    local_ranks = [None] * dist.get_world_size()
    dist.all_gather_object(local_ranks, local_rank)
    if dist.get_rank() == 0:
        print(f"the processes think their local ranks are {local_ranks}")
finally:
    dist.destroy_process_group()
    time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits
