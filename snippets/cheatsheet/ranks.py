"""Every process says who it is, on stdout and on stderr.

    torchrun --standalone --nproc_per_node=4 ranks.py
"""

import os
import sys
import time

import torch
import torch.distributed as dist

local_rank = int(os.environ["LOCAL_RANK"])
if torch.cuda.is_available():
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
else:
    dist.init_process_group("gloo")
rank, world_size = dist.get_rank(), dist.get_world_size()
print(f"rank {rank} of {world_size} (local rank {local_rank}): training")
print(f"rank {rank}: a warning", file=sys.stderr)
dist.barrier(device_ids=[local_rank] if torch.cuda.is_available() else None)
dist.destroy_process_group()
time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits
