"""All-reduce bandwidth, as nccl-tests reports it: algbw and busbw.

Every process all-reduces a float32 tensor of each size a few times; rank 0
prints, per size, the time of one all-reduce and two bandwidths:

    algbw = size / time                 (what your code sees)
    busbw = algbw * 2(n - 1) / n        (what each link carried, n processes)

A ring all-reduce sends and receives 2(n - 1)/n times the tensor over each
process's link, so busbw is comparable across numbers of processes, and with
the link's peak bandwidth. Start one process per GPU, with srun or torchrun.

    srun python allreduce_bw.py --mib 1 16 256
"""

import argparse
import os
import socket
import sys
import time

import torch
import torch.distributed as dist


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, nargs="+", default=[1, 16, 256],
                        help="tensor sizes in MiB")
    parser.add_argument("--iters", type=int, default=10,
                        help="timed all-reduces per size")
    parser.add_argument("--warmup", type=int, default=3)
    return parser.parse_args()


def setup():
    """Rank from torchrun (RANK) or srun (SLURM_PROCID); NCCL on GPUs, else gloo."""
    env = os.environ
    if "RANK" in env:  # torchrun
        names = "RANK", "WORLD_SIZE", "LOCAL_RANK"
    elif "SLURM_STEP_ID" in env:  # a task of srun (srun runs its tasks in a job step)
        names = "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"
    else:  # no launcher, or the job script itself (its SLURM_PROCID is 0, always)
        sys.exit("allreduce_bw.py: no launcher started it; start it with srun or "
                 "torchrun (in a job script: srun python allreduce_bw.py)")
    rank, world_size, local_rank = (int(env[name]) for name in names)
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", rank=rank, world_size=world_size,
                                device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
    return device


def seconds_per_all_reduce(tensor, iters, warmup):
    for _ in range(warmup):
        dist.all_reduce(tensor)
    if tensor.is_cuda:
        torch.cuda.synchronize()
    dist.barrier()  # start together
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(tensor)
    if tensor.is_cuda:
        torch.cuda.synchronize()
    elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64,
                           device=tensor.device)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the slowest rank's time
    return elapsed.item() / iters


def main():
    args = parse_args()
    device = setup()
    n = dist.get_world_size()
    nodes = [None] * n
    node = os.environ.get("SLURMD_NODENAME", socket.gethostname())
    dist.all_gather_object(nodes, node)
    factor = 2 * (n - 1) / n
    if dist.get_rank() == 0:
        count = len(set(nodes))
        print(f"all_reduce, {n} processes on {count} node{'s' * (count > 1)}, "
              f"{dist.get_backend()} on {device.type}: busbw = algbw x {factor:g}")
        print(f"{'bytes':>11} {'time':>10} {'algbw':>13} {'busbw':>13}")
    for mib in args.mib:
        tensor = torch.ones(mib * 2**20 // 4, dtype=torch.float32, device=device)
        seconds = seconds_per_all_reduce(tensor, args.iters, args.warmup)
        size = tensor.numel() * tensor.element_size()
        algbw = size / seconds / 1e9  # GB/s, as nccl-tests counts them
        busbw = algbw * factor
        if dist.get_rank() == 0:
            print(f"{size:>11} {seconds * 1e3:>7.3f} ms {algbw:>8.4f} GB/s "
                  f"{busbw:>8.4f} GB/s", flush=True)
    dist.destroy_process_group()
    time.sleep(0.1)  # gloo's threads finish before Python exits (crashes.md)


if __name__ == "__main__":
    main()
