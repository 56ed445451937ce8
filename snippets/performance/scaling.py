"""Measure DDP training throughput at this job's number of ranks; tabulate and plot.

Run it once per number of ranks, with the same --results file; every run adds its row
and prints the table of all rows, with speed-up and efficiency against the smallest run:

  for n in 1 2 4; do torchrun --standalone --nproc_per_node=$n scaling.py; done

In a Slurm job, scaling.sbatch does the same with srun on 1 to 8 GPUs.
"""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def at_least(minimum):
    def parse(text):
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, not {value}")
        return value

    return parse


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--steps", type=at_least(1), default=50, help="timed steps (default 50)"
    )
    parser.add_argument(
        "--warmup",
        type=at_least(0),
        default=10,
        help="untimed steps first (default 10)",
    )
    parser.add_argument(
        "--batch-size", type=at_least(1), default=512, help="per rank (default 512)"
    )
    parser.add_argument(
        "--width", type=at_least(1), default=4096, help="hidden units (default 4096)"
    )
    parser.add_argument(
        "--depth", type=at_least(1), default=4, help="hidden layers (default 4)"
    )
    parser.add_argument(
        "--results", default="scaling.jsonl", help="file the runs append to"
    )
    parser.add_argument("--plot", default="scaling.png", help="where to save the plot")
    args = parser.parse_args(argv)
    if not args.plot.endswith(".png"):
        parser.error(f"--plot must name a .png file, not {args.plot!r}")
    return args


def make_model(width, depth):
    layers = [
        nn.Linear(width, width) if i % 2 == 0 else nn.ReLU() for i in range(2 * depth)
    ]
    return nn.Sequential(*layers, nn.Linear(width, 1))


def barrier(device):
    """Wait for every rank. On GPUs, name this process's GPU: NCCL would guess it."""
    dist.barrier(device_ids=[device.index] if device.type == "cuda" else None)


def measure(args, device):
    """Samples per second of all ranks together, over --steps synchronised steps."""
    torch.manual_seed(0)
    model = DDP(make_model(args.width, args.depth).to(device))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(args.batch_size, args.width, device=device)
    y = torch.randn(args.batch_size, 1, device=device)

    def step():
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    for _ in range(args.warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    barrier(device)
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    barrier(device)
    seconds = time.perf_counter() - start
    return args.steps * args.batch_size * dist.get_world_size() / seconds


def table(rows):
    """Latest row per number of ranks; speed-up and efficiency against the fewest."""
    latest = {row["ranks"]: row for row in rows}
    base = latest[min(latest)]
    per_rank = base["samples_per_s"] / base["ranks"]
    out = []
    for n in sorted(latest):
        rate = latest[n]["samples_per_s"]
        out.append((n, rate, rate / per_rank / base["ranks"], rate / (per_rank * n)))
    return out


def plot(rows, title, path):
    import matplotlib

    matplotlib.use("Agg")  # no display on compute nodes
    import matplotlib.pyplot as plt

    ranks = [r[0] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5), layout="constrained")
    left.plot(ranks, [r[1] for r in rows], "o-", label="measured")
    ideal = rows[0][1] / rows[0][0]
    left.plot(
        ranks, [ideal * n for n in ranks], "--", color="grey", label="perfect scaling"
    )
    left.set(ylabel="samples/s", ylim=(0, None))
    left.legend()
    right.plot(ranks, [100 * r[3] for r in rows], "o-")
    right.set(ylabel="scaling efficiency (%)", ylim=(0, 110))
    right.axhline(100, ls="--", color="grey")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set(xlabel="ranks", xticks=ranks, xticklabels=ranks)
        ax.minorticks_off()
    fig.suptitle(title)
    fig.savefig(path, dpi=100)


def main():
    args = parse_args()
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl")
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        rate = measure(args, device)
        if rank == 0:
            kind = (
                torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
            )
            setup = (
                f"{kind}, {dist.get_backend()}: {args.depth} x {args.width} MLP, "
                f"batch {args.batch_size} per rank"
            )
            with open(args.results, "a") as f:
                f.write(
                    json.dumps({"ranks": world, "samples_per_s": rate, "setup": setup})
                    + "\n"
                )
            with open(args.results) as f:
                rows = [json.loads(line) for line in f if line.strip()]
            rows = [
                row for row in rows if row["setup"] == setup
            ]  # only comparable runs
            print(setup)
            print(
                f"{'ranks':>5}  {'throughput':>22}  {'speed-up':>8}  {'efficiency':>10}"
            )
            result = table(rows)
            for n, samples, speedup, efficiency in result:
                print(
                    f"{n:>5}  {samples:>12.0f} samples/s"
                    f"  {speedup:>7.2f}x  {efficiency:>10.0%}"
                )
            plot(result, setup, args.plot)
            print(f"plot saved to {args.plot}")
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
