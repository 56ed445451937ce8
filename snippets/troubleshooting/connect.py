"""Check that every process of a job can reach the others, and nothing more.

Run it with the same launcher and the same settings as the training script, for
example on two nodes:
    torchrun --nnodes=2 --node_rank=0 --nproc_per_node=4 \
        --master_addr=NODE0 --master_port=29500 connect.py   # on the first node
    torchrun --nnodes=2 --node_rank=1 --nproc_per_node=4 \
        --master_addr=NODE0 --master_port=29500 connect.py   # on the second node
"""

import os
import socket
import time
from datetime import timedelta

import torch
import torch.distributed as dist


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
        me = torch.tensor([1.0], device=device)
        dist.all_reduce(me)  # every process adds 1: the sum is the world size
        hosts = [None] * world_size
        dist.all_gather_object(hosts, socket.gethostname())
        if rank == 0:
            print(f"{int(me.item())} of {world_size} processes answered, "
                  f"on {len(set(hosts))} host(s), using {backend}")
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
