"""torch.compile with DDP: which order compiles, and does training still match eager?

  torchrun --standalone --nproc_per_node=2 compile_ddp.py  # inductor
  torchrun --standalone --nproc_per_node=2 compile_ddp.py --backend aot_eager

Trains the same model three ways: eager, DDP(torch.compile(model)) and
torch.compile(DDP(model)), and prints how many graphs torch.compile captured for each.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch._dynamo.utils import counters  # torch.compile's own statistics
from torch.nn.parallel import DistributedDataParallel as DDP


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 128), nn.GELU(), nn.Linear(128, 1)
    )


def train(model, device, steps=8):
    """Losses of a few SGD steps; time of the first step (it compiles), of the rest."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(100 + dist.get_rank())  # each rank its own data
    losses, times = [], []
    for _ in range(steps):
        x = torch.randn(16, 32, generator=g).to(device)
        start = time.perf_counter()
        loss = model(x).sin().pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - start)
    return losses, times[0], sum(times[1:]) / (steps - 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--backend",
        default="inductor",
        help="torch.compile backend (default inductor; aot_eager generates no code)",
    )
    args = parser.parse_args()

    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl")
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    rank = dist.get_rank()
    try:
        forms = {
            "eager DDP(model)": lambda m: DDP(m),
            "DDP(torch.compile(model))": lambda m: DDP(
                torch.compile(m, backend=args.backend)
            ),
            "torch.compile(DDP(model))": lambda m: torch.compile(
                DDP(m), backend=args.backend
            ),
        }
        if rank == 0:
            print(f"backend {args.backend} on {device.type}")
            print(
                f"{'form':<27}{'graphs':>7}{'first step':>12}{'later steps':>13}"
                "  same losses as eager"
            )
        eager = None
        for name, wrap in forms.items():
            torch._dynamo.reset()  # forget earlier compilations
            counters.clear()
            losses, first, later = train(wrap(make_model().to(device)), device)
            eager = eager or losses
            diff = max(abs(a - b) for a, b in zip(losses, eager))
            same = "yes" if diff < 1e-5 else f"NO ({diff:.1e})"
            if rank == 0:
                graphs = counters["stats"]["unique_graphs"]
                print(
                    f"{name:<27}{graphs:>7}{first:>10.3f} s"
                    f"{later * 1e3:>10.2f} ms  {same}"
                )
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
