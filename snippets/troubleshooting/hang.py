"""A job that hangs on purpose: one rank skips a collective.

Every process takes a few training steps and adds up the loss of every rank
with an all-reduce, then waits at a barrier while rank 0 saves the model (the
barrier runs in a gloo group of its own, as checkpointing code often does).
Rank 1 (--skip-rank) skips the all-reduce of the last step, as a rank does that
takes the other branch of an `if`: it waits at the barrier, the others wait in
the all-reduce, and nothing moves until the collective timeout (--timeout
seconds). Every process prints one line when it starts: rank, node, process id.
With --monitored-barrier SECONDS, rank 0 names the rank that is missing instead.

    srun --label python hang.py      # from a job script: see hang.sbatch
"""

import argparse
import os
import socket
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--skip-rank", type=int, default=1,
                        help="the rank that skips the last all-reduce")
    parser.add_argument("--timeout", type=float, default=600,
                        help="collective timeout in seconds")
    parser.add_argument("--monitored-barrier", type=float, metavar="SECONDS",
                        help="before each all-reduce, a monitored barrier with this "
                             "timeout: rank 0 names the ranks that do not arrive")
    return parser.parse_args()


def setup(timeout):
    """Rank from torchrun (RANK) or srun (SLURM_PROCID); NCCL on GPUs, else gloo."""
    env = os.environ
    if "RANK" in env:  # torchrun
        names = "RANK", "WORLD_SIZE", "LOCAL_RANK"
    elif "SLURM_STEP_ID" in env:  # a task of srun (srun runs its tasks in a job step)
        names = "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"
    else:  # no launcher, or the job script itself (its SLURM_PROCID is 0, always)
        sys.exit("hang.py: no launcher started it; start it with srun or torchrun "
                 "(in a job script: srun python hang.py)")
    rank, world_size, local_rank = (int(env[name]) for name in names)
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend, rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=timeout))
    checkpoint_group = dist.new_group(backend="gloo")  # CPU-side coordination
    return device, checkpoint_group


def average_loss(loss, monitor=None):
    """The mean of every rank's loss: a collective, so every rank must call it."""
    if monitor:  # (group, timeout): rank 0 fails, naming the ranks that are missing
        dist.monitored_barrier(monitor[0], timeout=monitor[1], wait_all_ranks=True)
    total = loss.detach().clone()
    dist.all_reduce(total)
    return total.item() / dist.get_world_size()


def save_checkpoint(model, group):
    """Rank 0 saves; every rank waits at the barrier until it has."""
    if dist.get_rank() == 0:
        torch.save(model.state_dict(), "hang.pt")
    dist.barrier(group=group)


def main():
    args = parse_args()
    device, checkpoint_group = setup(args.timeout)
    monitor = None
    if args.monitored_barrier:  # it needs gloo: a group of its own
        seconds = timedelta(seconds=args.monitored_barrier)
        monitor = (dist.new_group(backend="gloo"), seconds)
    rank = dist.get_rank()
    node = os.environ.get("SLURMD_NODENAME", socket.gethostname())
    print(f"rank {rank} of {dist.get_world_size()} on {node}, pid {os.getpid()}",
          flush=True)
    torch.manual_seed(rank)
    model = torch.nn.Linear(8, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(args.steps):
        x = torch.randn(16, 8, device=device)
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if rank == args.skip_rank and step == args.steps - 1:
            continue  # the bug: this rank does not report its last loss
        mean = average_loss(loss, monitor)
        if rank == 0:
            print(f"step {step}: mean loss {mean:.4f}", flush=True)
    save_checkpoint(model, checkpoint_group)
    if rank == 0:
        print("saved hang.pt")
    dist.destroy_process_group()
    time.sleep(0.1)  # gloo's threads finish before Python exits (crashes.md)


if __name__ == "__main__":
    main()
