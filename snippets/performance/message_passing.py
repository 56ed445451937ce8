"""torch.distributed's messages: point-to-point, every collective, and groups.

  torchrun --standalone --nproc_per_node=4 message_passing.py

For each call, rank 0 prints what every rank held before and after it. Any even
number of processes works: the last part pairs the ranks up.
"""

import os
import sys
import time

import torch

NEEDS = "2.13"  # gloo (CPUs) has all_to_all from 2.13 on
if torch.__version__ < f"{NEEDS}.0a0":  # NVIDIA's 2.N.0a0 builds count as 2.N
    print(f"this script needs PyTorch >= {NEEDS} (found {torch.__version__})",
          file=sys.stderr)
    sys.exit(2)

import torch.distributed as dist


def show(title, before, after):
    """Gather every rank's 'before' and 'after' to rank 0 and print them as a table."""
    rows = [None] * dist.get_world_size()
    dist.all_gather_object(rows, (before, after))
    if dist.get_rank() == 0:
        print(f"\n{title}")
        print(f"  {'':6}  {'before':<28}  after")
        for r, (b, a) in enumerate(rows):
            print(f"  rank {r}  {b:<28}  {a}")


def point_to_point(rank, world, device):
    # Blocking. gloo: send() returns once the tensor has been sent, recv() once it has
    # arrived. NCCL: both return once the transfer is queued on the GPU, ahead of any
    # later work on this process's stream; .tolist() below waits for it.
    x = torch.tensor([float(rank)], device=device)
    before = str(x.tolist())
    if rank == 0:
        dist.send(torch.tensor([42.0], device=device), dst=1)
    elif rank == 1:
        dist.recv(x, src=0)
    show("send / recv: rank 0 sends [42.0] to rank 1", before, str(x.tolist()))

    # Non-blocking: every rank sends to its right neighbour, receives from its left one.
    # With NCCL, separate sends and receives between the same two ranks run one after
    # the other, and a send waits for its receive. With 2 ranks, right and left are the
    # same rank: if both sent first, each send would wait for a receive queued behind
    # the other's send. So even ranks send first and odd ranks receive first.
    right, left = (rank + 1) % world, (rank - 1) % world
    out = torch.tensor([10.0 * rank], device=device)
    got = torch.empty(1, device=device)
    if rank % 2 == 0:
        requests = [dist.isend(out, dst=right), dist.irecv(got, src=left)]
    else:
        requests = [dist.irecv(got, src=left), dist.isend(out, dst=right)]
    for request in requests:
        request.wait()  # until then, neither tensor may be touched
    show(
        "isend / irecv: each rank passes its tensor to the right",
        str(out.tolist()),
        str(got.tolist()),
    )

    # Batched: the same exchange as one call, which NCCL runs as one group, in which
    # sends and receives cannot block each other: no order to get right.
    ops = [dist.P2POp(dist.isend, out, right), dist.P2POp(dist.irecv, got, left)]
    for request in dist.batch_isend_irecv(ops):
        request.wait()
    show(
        "batch_isend_irecv: the same exchange in one call",
        str(out.tolist()),
        str(got.tolist()),
    )


def collectives(rank, world, device):
    def vec():  # rank r holds [10r, 10r + 1, ..., 10r + world - 1]
        return torch.arange(world, dtype=torch.float32, device=device) + 10 * rank

    x = torch.tensor([rank + 1.0], device=device)
    before = str(x.tolist())
    dist.broadcast(x, src=0)
    show("broadcast(src=0): everyone gets rank 0's tensor", before, str(x.tolist()))

    x = torch.tensor([rank + 1.0], device=device)
    dist.reduce(x, dst=0, op=dist.ReduceOp.SUM)
    show(
        "reduce(dst=0, SUM): only rank 0's result is defined",
        before,
        str(x.tolist()) if rank == 0 else "(undefined)",
    )

    x = torch.tensor([rank + 1.0], device=device)
    dist.all_reduce(x, op=dist.ReduceOp.SUM)
    show("all_reduce(SUM): everyone gets the sum", before, str(x.tolist()))

    x = torch.tensor([rank + 1.0], device=device)
    dist.all_reduce(x, op=dist.ReduceOp.MAX)
    show("all_reduce(MAX)", before, str(x.tolist()))

    x = torch.tensor([rank + 1.0], device=device)
    parts = [torch.empty(1, device=device) for _ in range(world)] if rank == 0 else None
    dist.gather(x, gather_list=parts, dst=0)
    show(
        "gather(dst=0): rank 0 gets a list of everyone's tensors",
        before,
        str([p.item() for p in parts]) if rank == 0 else "-",
    )

    parts = [torch.empty(1, device=device) for _ in range(world)]
    dist.all_gather(parts, x)
    show("all_gather: everyone gets the list", before, str([p.item() for p in parts]))

    x = torch.empty(1, device=device)
    pieces = list(vec().chunk(world)) if rank == 0 else None
    dist.scatter(x, scatter_list=pieces, src=0)
    show(
        "scatter(src=0): rank 0's list, one piece per rank",
        str(vec().tolist()) if rank == 0 else "-",
        str(x.tolist()),
    )

    x = torch.empty(1, device=device)
    dist.reduce_scatter(x, list(vec().chunk(world)), op=dist.ReduceOp.SUM)
    show(
        "reduce_scatter(SUM): rank r gets the sum of everyone's piece r",
        str(vec().tolist()),
        str(x.tolist()),
    )

    received = list(torch.empty(world, device=device).chunk(world))
    dist.all_to_all(received, list(vec().chunk(world)))
    show(
        "all_to_all: rank r gets piece r of everyone",
        str(vec().tolist()),
        str(torch.cat(received).tolist()),
    )


def groups(rank, world, device):
    # Every rank must create every group, members or not, in the same order.
    evens = dist.new_group(ranks=list(range(0, world, 2)))
    pair, _ = dist.new_subgroups(group_size=2)  # ranks {0, 1}, {2, 3}, ...
    x = torch.tensor([rank + 1.0], device=device)
    before = str(x.tolist())
    dist.all_reduce(x, group=pair)
    show("all_reduce in groups of 2 (new_subgroups)", before, str(x.tolist()))

    x = torch.tensor([rank + 1.0], device=device)
    if rank % 2 == 0:  # only members call a collective of their group
        dist.all_reduce(x, group=evens)
    show(
        "all_reduce in the group of even ranks (new_group)",
        before,
        str(x.tolist()) if rank % 2 == 0 else "(not a member)",
    )


def barrier(device):
    """Wait for every rank. On GPUs, name this process's GPU: NCCL would guess it."""
    dist.barrier(device_ids=[device.index] if device.type == "cuda" else None)


def main():
    if int(os.environ["WORLD_SIZE"]) % 2:  # groups() needs pairs: stop before printing
        sys.exit("message_passing.py needs an even number of processes")
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl")
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        if rank == 0:
            print(f"{world} processes, backend {dist.get_backend()}")
        point_to_point(rank, world, device)
        collectives(rank, world, device)
        groups(rank, world, device)
        barrier(device)  # nobody leaves before everyone has arrived
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
