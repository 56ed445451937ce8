"""Which GPU each process uses, and what it allocated on every GPU it can see.

    torchrun --standalone --nproc_per_node=4 gpu_placement.py
    torchrun --standalone --nproc_per_node=4 gpu_placement.py --bug device
    torchrun --standalone --nproc_per_node=4 gpu_placement.py --bug load

--bug device uses torch.device("cuda"), which is cuda:0 in every process.
--bug load loads rank 0's checkpoint without map_location, onto the GPU it came from.
"""

import argparse
import os
import socket
import time

import torch
import torch.distributed as dist
from torch import nn


def pick_device(bug):
    if not torch.cuda.is_available():
        return torch.device("cpu")
    if bug == "device":
        return torch.device("cuda")  # the bug: cuda:0 in every process
    local_rank = int(os.environ["LOCAL_RANK"])
    visible = torch.cuda.device_count()
    if local_rank >= visible:  # e.g. srun gave each task its own GPU as cuda:0
        raise RuntimeError(
            f"LOCAL_RANK={local_rank} but this process sees {visible} GPU(s) "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')}): "
            "start one process per visible GPU, or use cuda:0 when each process "
            "is given exactly one GPU")
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    return device


def allocated_mib():
    """MiB this process allocated on each GPU it can see."""
    return [torch.cuda.memory_allocated(i) / 2**20
            for i in range(torch.cuda.device_count())]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bug", choices=["device", "load"])
    args = parser.parse_args()
    device = pick_device(args.bug)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    # The report travels over gloo, which works even when two processes share a GPU.
    report_group = dist.new_group(backend="gloo")
    rank = dist.get_rank()
    try:
        torch.manual_seed(0)
        model = nn.Linear(1024, 1024).to(device)  # 4 MiB of parameters
        if rank == 0:
            torch.save(model.state_dict(), "checkpoint.pt")
        dist.barrier(group=report_group)
        location = None if args.bug == "load" else device
        state = torch.load("checkpoint.pt", map_location=location, weights_only=True)
        model.load_state_dict(state)
        gpu = "-"
        if device.type == "cuda":
            gpu = str(torch.cuda.get_device_properties(device).uuid)[-8:]
        row = {"rank": rank, "host": socket.gethostname(), "device": str(device),
               "gpu": gpu,
               "visible": os.environ.get("CUDA_VISIBLE_DEVICES", "(all)"),
               "mib": allocated_mib() if device.type == "cuda" else [],
               "state on": str(next(iter(state.values())).device)}
        rows = [None] * dist.get_world_size()
        dist.all_gather_object(rows, row, group=report_group)
        if rank == 0:
            print("rank  device  GPU id    checkpoint loaded on  MiB allocated per GPU")
            for r in rows:
                mib = " ".join(f"{m:.0f}" for m in r["mib"]) or "-"
                print(f"{r['rank']:>4}  {r['device']:<6}  {r['gpu']:<8}  "
                      f"{r['state on']:<20}  {mib}")
            seen = {}
            for r in rows:
                if r["gpu"] != "-":
                    seen.setdefault((r["host"], r["gpu"]), []).append(r["rank"])
            shared = [ranks for ranks in seen.values() if len(ranks) > 1]
            print("GPUs shared by several processes:", shared or "none")
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
