"""Print which process is which: global rank, node, local rank and device.

Run it on every node with torchrun, for example on two nodes with two GPUs each:
  torchrun --nnodes=2 --node_rank=0 --nproc_per_node=2 \
      --master_addr=NODE0 --master_port=29500 ranks.py   # on the first node
  torchrun --nnodes=2 --node_rank=1 --nproc_per_node=2 \
      --master_addr=NODE0 --master_port=29500 ranks.py   # on the second node
"""

import os
import time

import torch
import torch.distributed as dist


def main():
    rank = int(os.environ["RANK"])  # 0 .. world size - 1, unique in the whole job
    local_rank = int(os.environ["LOCAL_RANK"])  # 0 .. processes per node - 1
    local_world_size = int(os.environ["LOCAL_WORLD_SIZE"])  # processes on this node
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)  # one GPU per process, by local rank
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    dist.init_process_group(backend)
    try:
        me = {"rank": rank, "node": rank // local_world_size, "local_rank": local_rank,
              "device": str(device)}
        everyone = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, me)  # every rank sends its row to every rank
        if rank == 0:  # only one process prints
            world_size = dist.get_world_size()
            print(f"world size {world_size}, {local_world_size} processes per node")
            print(f"{'rank':>4}  {'node':>4}  {'local rank':>10}  device")
            for row in everyone:
                print(f"{row['rank']:>4}  {row['node']:>4}  {row['local_rank']:>10}  "
                      f"{row['device']}")
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
