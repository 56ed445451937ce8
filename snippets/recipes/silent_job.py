"""A training script that says where it is: a start-up line per rank, flushed.

Every process prints one line, with its node and the time, before and after
init_process_group, and flushes it: a job that stops there shows which ranks got
that far. Rank 0 then logs each step with a plain print(). With --wait-for FILE,
every rank then waits for FILE, as a job waits for data that another job writes,
outside any collective: no collective timeout ends that wait, the time limit does.

    srun python silent_job.py      # from a job script: see silent_job.sbatch
"""

import argparse
import os
import socket
import sys
import time
from datetime import datetime, timedelta

import torch
import torch.distributed as dist


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--wait-for", metavar="FILE",
                        help="after the steps, wait until FILE exists")
    parser.add_argument("--timeout", type=float, default=600,
                        help="collective timeout in seconds")
    return parser.parse_args()


def started(rank, what):
    """One line, flushed at once: rank, node, time, and how far it got."""
    node = os.environ.get("SLURMD_NODENAME", socket.gethostname())
    now = datetime.now().strftime("%H:%M:%S")
    print(f"rank {rank} on {node} at {now}: {what}", flush=True)


def setup(timeout):
    """Rank from torchrun (RANK) or srun (SLURM_PROCID); NCCL on GPUs, else gloo."""
    env = os.environ
    if "RANK" in env:  # torchrun
        names = "RANK", "WORLD_SIZE", "LOCAL_RANK"
    elif "SLURM_STEP_ID" in env:  # a task of srun (srun runs its tasks in a job step)
        names = "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"
    else:  # no launcher, or the job script itself (its SLURM_PROCID is 0, always)
        sys.exit("silent_job.py: no launcher started it; start it with srun or "
                 "torchrun (in a job script: srun python silent_job.py)")
    rank, world_size, local_rank = (int(env[name]) for name in names)
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    started(rank, "before init_process_group")
    dist.init_process_group(backend, rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=timeout))
    started(rank, f"after init_process_group, world size {world_size}")
    return rank, device


def main():
    args = parse_args()
    rank, device = setup(args.timeout)
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1).to(device)
    model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(args.steps):
        x = torch.randn(16, 8, device=device)
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()  # DDP's all-reduce of the gradients: a collective
        optimizer.step()
        if rank == 0:
            print(f"step {step}: loss {loss.item():.4f}")  # not flushed
    if args.wait_for:
        if rank == 0:
            print(f"waiting for {args.wait_for}")
        while not os.path.exists(args.wait_for):  # outside any collective
            time.sleep(1)
    if rank == 0:
        print("done")
    dist.destroy_process_group()
    time.sleep(0.1)  # gloo's threads finish before Python exits (crashes.md)


if __name__ == "__main__":
    main()
