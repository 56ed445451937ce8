"""One rank crashes: rank 1 dies of a segmentation fault at step 3.

Each process trains a small model with DistributedDataParallel. At step 3, rank 1
(--crash-rank) reads memory it does not own, as a faulty C++ or CUDA extension
would, and the operating system kills it with SIGSEGV: no Python exception, no
traceback on the screen. Every process has turned on Python's fault handler,
writing to a file of its own, crash-rank<N>.log, so that the dead rank leaves
the Python stack it died in.

    torchrun --standalone --nproc_per_node=2 crash.py
"""

import argparse
import ctypes
import faulthandler
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crash-rank", type=int, default=1)
    parser.add_argument("--crash-step", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    return parser.parse_args()


def enable_faulthandler(rank):
    """On a fatal signal, write every thread's Python stack to crash-rank<N>.log."""
    log = open(f"crash-rank{rank}.log", "w")
    faulthandler.enable(file=log, all_threads=True)
    return log  # keep it open: the handler writes to it as the process dies


def faulty_extension():
    """Stands for compiled code with a bug: it reads address 0."""
    return ctypes.string_at(0)


def main():
    args = parse_args()
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    rank = dist.get_rank()
    log = enable_faulthandler(rank)
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(8, 1).to(device))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(args.steps):
        x = torch.randn(16, 8, device=device)
        if rank == args.crash_rank and step == args.crash_step:
            faulty_extension()
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()  # DDP's all-reduce of the gradients: every rank takes part
        optimizer.step()
        if rank == 0:
            print(f"step {step}: loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()
    time.sleep(0.1)  # gloo's threads finish before Python exits (crashes.md)
    log.close()


if __name__ == "__main__":
    main()
