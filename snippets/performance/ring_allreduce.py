"""A ring all-reduce written with send and receive, checked against dist.all_reduce.

  torchrun --standalone --nproc_per_node=4 ring_allreduce.py

Counts the bytes each rank sends and receives, and compares them with 2(N-1)/N x size.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist


def exchange(send, recv, right, left, counter):
    """Send `send` to the right neighbour while receiving `recv` from the left one."""
    ops = [dist.P2POp(dist.isend, send, right), dist.P2POp(dist.irecv, recv, left)]
    for request in dist.batch_isend_irecv(ops):
        request.wait()
    counter["sent"] += send.numel() * send.element_size()
    counter["received"] += recv.numel() * recv.element_size()


def ring_all_reduce(tensor, counter):
    """Sum a 1-D tensor over all ranks, in place."""
    rank, world = dist.get_rank(), dist.get_world_size()
    right, left = (rank + 1) % world, (rank - 1) % world
    chunks = tensor.chunk(world)  # views: writing to a chunk writes to the tensor
    # 1. Reduce-scatter: N-1 steps. At step s, pass on chunk rank-s and add the incoming
    #    chunk rank-s-1 to your own. Afterwards rank r holds the full sum of chunk r+1.
    for s in range(world - 1):
        out, into = chunks[(rank - s) % world], chunks[(rank - s - 1) % world]
        incoming = torch.empty_like(into)
        exchange(out, incoming, right, left, counter)
        into += incoming
    # 2. All-gather: N-1 more steps. Pass on the last chunk completed; the incoming
    #    chunk is complete and replaces yours.
    for s in range(world - 1):
        out, into = chunks[(rank + 1 - s) % world], chunks[(rank - s) % world]
        incoming = torch.empty_like(into)
        exchange(out, incoming, right, left, counter)
        into.copy_(incoming)
    return tensor


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--numel", type=int, default=2**20, help="float32 elements per rank"
    )
    args = parser.parse_args()

    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl")
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        g = torch.Generator().manual_seed(rank)
        data = torch.randn(args.numel, generator=g).to(
            device
        )  # a different tensor on every rank
        size = data.numel() * data.element_size()

        counter = {"sent": 0, "received": 0}
        start = time.perf_counter()
        ours = ring_all_reduce(data.clone(), counter)
        ring_time = time.perf_counter() - start

        start = time.perf_counter()
        theirs = data.clone()
        dist.all_reduce(theirs)
        builtin_time = time.perf_counter() - start
        diff = torch.tensor((ours - theirs).abs().max().item(), device=device)
        dist.all_reduce(diff, op=dist.ReduceOp.MAX)

        counts = [None] * world
        dist.all_gather_object(counts, counter)
        if rank == 0:
            print(
                f"{world} processes, each with {args.numel:,} float32 = {size:,} bytes"
            )
            print(
                f"{'rank':>4}  {'bytes sent':>12}  {'bytes received':>14}"
                f"  {'2(N-1)/N x size':>15}"
            )
            for r, c in enumerate(counts):
                formula = 2 * (world - 1) * size // world
                print(f"{r:>4}  {c['sent']:>12,}  {c['received']:>14,}  {formula:>15,}")
            everyone = (world - 1) * size
            print(
                "sending the whole tensor to every other rank instead: "
                f"{everyone:,} bytes"
            )
            print(
                "largest difference from dist.all_reduce on any rank: "
                f"{diff.item():.1e}"
            )
            print(
                f"hand-written ring {ring_time * 1e3:.1f} ms, "
                f"dist.all_reduce {builtin_time * 1e3:.1f} ms"
            )
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
