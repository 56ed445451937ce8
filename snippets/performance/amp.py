"""Mixed precision under DDP: bf16 autocast, or fp16 autocast with a gradient scaler.

  torchrun --standalone --nproc_per_node=2 amp.py --precision bf16
  torchrun --standalone --nproc_per_node=2 amp.py --precision fp16 --epochs 2
  torchrun --standalone --nproc_per_node=2 amp.py --precision fp16 --epochs 4  # resumes

The same code runs on GPUs (NCCL, autocast on "cuda") and CPUs (gloo, on "cpu").
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1)
    )


def make_dataset(n=512):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 16, generator=g)
    y = (x[:, :8].sum(1, keepdim=True) - x[:, 8:].pow(2).sum(1, keepdim=True)) / 4
    return TensorDataset(x, y)


def train_one_epoch(model, loader, optimizer, scaler, device, dtype):
    """One pass over the loader; returns the mean loss of this process."""
    total, batches = 0.0, 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        # autocast covers the forward pass only: matmuls run in `dtype`, weights in fp32
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            out = model(x)
        # the loss in float32, outside autocast
        loss = nn.functional.mse_loss(out.float(), y)
        optimizer.zero_grad(set_to_none=True)
        # fp16: multiply the loss so small gradients survive
        scaler.scale(loss).backward()
        # unscale the gradients; skip the step if any is inf or NaN
        scaler.step(optimizer)
        # lower the scale after a skipped step, raise it after many good ones
        scaler.update()
        total += loss.item()
        batches += 1
    return total / batches


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--precision", choices=DTYPES, default="bf16")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32, help="per process")
    parser.add_argument("--checkpoint", help="default: amp_<precision>.pt")
    args = parser.parse_args()
    args.checkpoint = args.checkpoint or f"amp_{args.precision}.pt"

    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl")
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    rank = dist.get_rank()
    try:
        dtype = DTYPES[args.precision]
        model = DDP(
            make_model().to(device)
        )  # float32 weights: autocast never changes them
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        # Only float16 needs a scaler; disabled, it passes loss and step through.
        scaler = torch.amp.GradScaler(device.type, enabled=args.precision == "fp16")
        dataset = make_dataset()
        sampler = DistributedSampler(dataset, seed=0)
        loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)

        start = 0
        if os.path.exists(args.checkpoint):  # resume: model, optimiser AND scaler
            state = torch.load(args.checkpoint, map_location=device, weights_only=True)
            model.module.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            scaler.load_state_dict(state["scaler"])
            start = state["epoch"]
            if rank == 0:
                print(
                    f"resumed from {args.checkpoint} at epoch {start}, "
                    f"loss scale {scaler.get_scale()}"
                )

        if rank == 0:
            x = dataset[:2][0].to(device)
            with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
                out = model.module(x)
            weight = next(model.parameters())
            print(
                f"{args.precision} on {device.type}: weights {weight.dtype}, "
                f"forward output {out.dtype}"
            )
        for epoch in range(start, args.epochs):
            sampler.set_epoch(epoch)
            loss = torch.tensor(
                train_one_epoch(model, loader, optimizer, scaler, device, dtype),
                device=device,
            )
            dist.all_reduce(loss)  # the sum over all ranks, on every rank
            loss /= dist.get_world_size()  # their mean
            if rank == 0:
                scale = (
                    f", loss scale {scaler.get_scale():.0f}"
                    if scaler.is_enabled()
                    else ""
                )
                print(f"epoch {epoch + 1}: loss {loss.item():.4f}{scale}")
                torch.save(
                    {
                        "model": model.module.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "scaler": scaler.state_dict(),
                        "epoch": epoch + 1,
                    },
                    f"{args.checkpoint}.tmp",
                )
                # atomic: a job killed while saving keeps the previous checkpoint
                os.replace(f"{args.checkpoint}.tmp", args.checkpoint)
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
