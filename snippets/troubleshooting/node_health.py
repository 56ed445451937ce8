"""Check one node: its GPUs, a collective among them, and their memory.

One torchrun per node starts one process per GPU, in a process group of that
node alone, so that every node is checked on its own. Each process writes a
pattern into a buffer and reads it back (the memory test), then all the node's
processes add up a tensor with an all-reduce (the collective). The node's rank 0
prints one line: "<node>: OK ..." or "<node>: FAIL ..." and the reasons.

A node fails at once if it sees fewer GPUs than Slurm gave it (SLURM_GPUS_ON_NODE)
or than it has processes: a GPU that fell off the bus, a driver that does not load.
--cpu runs the same checks on the CPU with gloo instead, to try the script on a
machine without GPUs. --simulate-fault-on NODE flips one value of the memory test
on the last GPU of that node, to see what a failing node looks like.

    srun --ntasks-per-node=1 torchrun --standalone --nproc_per_node=4 node_health.py
"""

import argparse
import os
import socket
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

PATTERNS = (0x55555555, -0x55555556)  # 0101... and 1010...: every bit both ways
# A collective that hangs on a broken node ends with an error after this, not never.
TIMEOUT = timedelta(minutes=2)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mebibytes", type=int, default=64,
                        help="memory tested per GPU")
    parser.add_argument("--cpu", action="store_true",
                        help="check the CPU with gloo instead of the GPUs")
    parser.add_argument("--simulate-fault-on", metavar="NODE",
                        help="pretend this node's last GPU has a bad memory cell")
    return parser.parse_args()


def memory_errors(device, mebibytes, fault):
    """Values read back wrong, after writing each pattern into the whole buffer."""
    buffer = torch.empty(mebibytes * 2**20 // 4, dtype=torch.int32, device=device)
    wrong = 0
    for pattern in PATTERNS:
        buffer.fill_(pattern)
        if fault:  # the simulated bad cell: one value that does not hold its bits
            buffer[len(buffer) // 2] ^= 1
        wrong += int((buffer != pattern).sum())
    return wrong


def collective_errors(device, elements=2**20):
    """Elements that the node's all-reduce of ones did not add up to its size."""
    ones = torch.ones(elements, device=device)
    dist.all_reduce(ones)
    return int((ones != dist.get_world_size()).sum())


def main():
    args = parse_args()
    node = os.environ.get("SLURMD_NODENAME", socket.gethostname())
    local_rank = int(os.environ["LOCAL_RANK"])
    if args.cpu:
        device = torch.device("cpu")
        dist.init_process_group("gloo", timeout=TIMEOUT)
    else:  # every GPU that Slurm gave this node, and one for each process
        processes = int(os.environ["LOCAL_WORLD_SIZE"])
        wanted = max(int(os.environ.get("SLURM_GPUS_ON_NODE", 0)), processes)
        cuda = torch.cuda.is_available()
        visible = torch.cuda.device_count() if cuda else 0
        if visible < wanted:  # some processes have no GPU to test: stop here
            reason = f"{visible} of {wanted} GPUs visible"
            if not cuda:
                reason = f"CUDA unavailable, {reason}"
            # One line per node, and only its writer fails: torchrun stops the others
            # when one fails, which could stop the writer before it printed.
            if local_rank == 0:
                print(f"{node}: FAIL ({processes} processes, nothing tested): {reason}",
                      flush=True)
            sys.exit(1 if local_rank == 0 else 0)
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device, timeout=TIMEOUT)
    problems = []
    size = dist.get_world_size()
    fault = args.simulate_fault_on == node and local_rank == size - 1
    wrong = memory_errors(device, args.mebibytes, fault)
    if wrong:
        problems.append(f"memory test: {wrong} wrong values on {device}")
    wrong = collective_errors(device)
    if wrong:
        problems.append(f"all-reduce: {wrong} wrong sums on {device}")
    everyone = [None] * size
    dist.all_gather_object(everyone, problems)
    if dist.get_rank() == 0:
        found = [problem for rank_problems in everyone for problem in rank_problems]
        checked = (f"{size} processes on {device.type}, all-reduce, "
                   f"{args.mebibytes} MiB memory test each")
        if found:
            print(f"{node}: FAIL ({checked}): {'; '.join(found)}", flush=True)
        else:
            print(f"{node}: OK ({checked})", flush=True)
    dist.destroy_process_group()
    time.sleep(0.1)  # gloo's threads finish before Python exits (crashes.md)
    sys.exit(1 if any(everyone) else 0)


if __name__ == "__main__":
    main()
