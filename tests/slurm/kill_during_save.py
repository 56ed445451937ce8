"""Save a checkpoint with train.py's save_checkpoint, then die half-way through the next.

Usage: python kill_during_save.py path/to/train.py
The second save writes the first half of its bytes, then the process kills itself with
SIGKILL, as the kernel's out-of-memory killer or the end of a job's grace period would.
"""

import io
import os
import runpy
import signal
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

train = runpy.run_path(sys.argv[1])  # the snippet's functions, without running main()
dist.init_process_group("gloo", rank=0, world_size=1)
model = DDP(train["make_model"]())
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
config, cpu = {"script": "train.py"}, torch.device("cpu")
train["save_checkpoint"]("checkpoint.pt", model, optimizer, 1, config, cpu)
print("saved step 1", flush=True)

with torch.no_grad():
    for p in model.parameters():
        p.add_(1.0)
real_save = torch.save


def save_half_then_die(obj, path):
    buffer = io.BytesIO()
    real_save(obj, buffer)
    with open(path, "wb") as f:
        f.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
    print(f"wrote half of {path}, killed", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


torch.save = save_half_then_die
train["save_checkpoint"]("checkpoint.pt", model, optimizer, 2, config, cpu)
