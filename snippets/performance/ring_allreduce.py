"""A ring all-reduce written with send and receive, checked against dist.all_reduce.

  torchrun --standalone --nproc_per_node=4 ring_allreduce.py

Counts the bytes each rank sends and receives, and compares them with 2(N-1)/N x size,
then times both all-reduces the same way.
"""

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist

REPEATS = 5  # timed calls of each all-reduce


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


def synchronize(device):
    """Wait for the GPU (a no-op on the CPU): NCCL calls return once their work is
    queued on the GPU, not once it is done."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def barrier(device):
    """Wait for every rank. On GPUs, name this process's GPU: NCCL would guess it."""
    dist.barrier(device_ids=[device.index] if device.type == "cuda" else None)


def timed(all_reduce, device):
    """Median seconds of all_reduce(), after one untimed call (the first call between
    GPUs sets up NCCL's connections), every rank starting together and waiting for
    its GPU to finish."""
    all_reduce()
    times = []
    for _ in range(REPEATS):
        synchronize(device)
        barrier(device)
        start = time.perf_counter()
        all_reduce()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


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
        ours = ring_all_reduce(data.clone(), counter)
        theirs = data.clone()
        dist.all_reduce(theirs)
        diff = torch.tensor((ours - theirs).abs().max().item(), device=device)
        dist.all_reduce(diff, op=dist.ReduceOp.MAX)

        # Both on a fresh copy of the data, timed the same way.
        ring_time = timed(
            lambda: ring_all_reduce(data.clone(), {"sent": 0, "received": 0}), device
        )
        builtin_time = timed(lambda: dist.all_reduce(data.clone()), device)

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
                f"median of {REPEATS}: hand-written ring {ring_time * 1e3:.1f} ms, "
                f"dist.all_reduce {builtin_time * 1e3:.1f} ms"
            )
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
