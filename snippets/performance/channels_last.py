"""Train a small convolutional net under DDP in the default and channels_last formats.

  torchrun --standalone --nproc_per_node=2 channels_last.py

Prints, for each format, the time per step and whether the weights, the activations and
the gradients really are channels_last, then saves the channels_last model.
"""

import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )


def make_dataset(n=128):
    g = torch.Generator().manual_seed(1)
    return TensorDataset(
        torch.randn(n, 3, 32, 32, generator=g), torch.randint(0, 10, (n,), generator=g)
    )


def prepare(memory_format, device):
    """A fresh model, converted to ``memory_format`` BEFORE it is wrapped in DDP."""
    model = make_model().to(device, memory_format=memory_format)
    ddp = DDP(model)
    seen = {}  # the first convolution's output, caught by a forward hook
    model[0].register_forward_hook(lambda mod, inp, out: seen.update(activation=out))
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)
    return {
        "format": memory_format,
        "model": model,
        "ddp": ddp,
        "seen": seen,
        "optimizer": optimizer,
        "times": [],
    }


def barrier(device):
    """Wait for every rank. On GPUs, name this process's GPU: NCCL would guess it."""
    dist.barrier(device_ids=[device.index] if device.type == "cuda" else None)


def train_step(run, x, y, device):
    """One step on a batch converted to the run's format; returns its seconds."""
    x = x.to(device, memory_format=run["format"])  # convert every input batch too
    # GPUs: wall time, after waiting for the GPU. CPUs: this process's CPU time, which
    # other jobs on a shared node do not inflate.
    clock = time.perf_counter if device.type == "cuda" else time.process_time
    barrier(device)  # start together: time this step, not the wait for the other rank
    start = clock()
    loss = nn.functional.cross_entropy(run["ddp"](x), y.to(device))
    run["optimizer"].zero_grad(set_to_none=True)
    loss.backward()
    run["optimizer"].step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return clock() - start


def is_channels_last(t):
    return t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous()


def main():
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl")
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    rank = dist.get_rank()
    try:
        formats = {
            "contiguous_format": torch.contiguous_format,
            "channels_last": torch.channels_last,
        }
        runs = {name: prepare(fmt, device) for name, fmt in formats.items()}
        dataset = make_dataset()
        sampler = DistributedSampler(dataset, seed=0)
        loader = DataLoader(dataset, batch_size=16, sampler=sampler)
        for epoch in range(3):  # the first epoch warms up, the others are timed
            sampler.set_epoch(epoch)
            for x, y in loader:
                for (
                    run
                ) in runs.values():  # take turns, so both meet the same conditions
                    seconds = train_step(run, x, y, device)
                    if epoch > 0:
                        run["times"].append(seconds)
        plain, cl = runs.values()
        diff = max(
            (a - b).abs().max().item()
            for a, b in zip(plain["model"].parameters(), cl["model"].parameters())
        )
        if rank == 0:
            print(f"on {device.type}, batch {tuple(x.shape)} per process")
            print(
                f"{'memory format':<18}{'time per step':>14}"
                "  channels_last? weight  activation  gradient"
            )
            for name, run in runs.items():
                weight = run["model"][0].weight
                checks = (weight, run["seen"]["activation"], weight.grad)
                flags = "".join(
                    f"{'yes' if is_channels_last(t) else 'no':>{w}}"
                    for t, w in zip(checks, (23, 12, 10))
                )
                step = statistics.median(run["times"])
                print(f"{name:<18}{step * 1e3:>11.1f} ms{flags}")
            ratio = statistics.median(plain["times"]) / statistics.median(cl["times"])
            print(f"speed-up of channels_last: {ratio:.2f}x")
            print(f"largest difference between the two trained models: {diff:.1e}")
            torch.save(cl["model"].state_dict(), "channels_last.pt")
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
