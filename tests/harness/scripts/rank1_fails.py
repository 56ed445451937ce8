import os

import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 1:
    raise RuntimeError("rank 1 gives up here")
print("rank 0 waits for rank 1 forever", flush=True)
dist.barrier()
