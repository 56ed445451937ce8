"""Train a small classifier with Hugging Face Accelerate on synthetic data.

The same file runs as one process (python accelerate_train.py) or one process per GPU:
    accelerate launch --multi_gpu --num_processes 4 accelerate_train.py
    torchrun --standalone --nproc_per_node=4 accelerate_train.py
Each process uses one GPU and NCCL; without GPUs, the CPU and gloo.
"""

import argparse
import time

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument(
        "--batch-size", type=int, default=16, help="samples per step and process"
    )
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--save", default="model.pt", help="the main process saves the model here"
    )
    return parser.parse_args()


def make_dataset(n=1024, features=20, classes=4):
    """Random points, labelled by a fixed random linear "teacher"."""
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(n, features, generator=g)
    y = (x @ torch.randn(features, classes, generator=g)).argmax(dim=1)
    return TensorDataset(x, y)


def make_model(features=20, classes=4):
    return nn.Sequential(nn.Linear(features, 64), nn.ReLU(), nn.Linear(64, classes))


def main():
    args = parse_args()
    # Without cpu=True, processes on a machine without GPUs do not join each other:
    # each one would train alone on all the data.
    accelerator = Accelerator(cpu=not torch.cuda.is_available())
    # accelerator.print() prints once per node: only the job's process 0 prints here
    say = print if accelerator.is_main_process else lambda *args: None
    say(
        f"processes: {accelerator.num_processes}, "
        f"{accelerator.distributed_type.value} on {accelerator.device.type}"
    )
    set_seed(args.seed)  # Python, NumPy and torch
    loader = DataLoader(
        make_dataset(), batch_size=args.batch_size, shuffle=True, drop_last=True
    )
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    # prepare() moves the model to this process's device and wraps it in DDP, and gives
    # each process its share of every epoch's batches (reshuffled every epoch).
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    for epoch in range(args.epochs):
        for x, y in loader:  # already on the right device
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            accelerator.backward(loss)  # instead of loss.backward()
            optimizer.step()
        average = accelerator.reduce(loss.detach(), reduction="mean")
        say(
            f"epoch {epoch + 1}/{args.epochs}  last-step loss {average.item():.4f}"
            f"  ({len(loader)} steps per process)"
        )

    flat = torch.cat([p.detach().flatten() for p in model.parameters()]).double()
    checksum = torch.stack([flat.sum(), flat.square().sum()])
    everyone = accelerator.gather(checksum.unsqueeze(0))  # one row per process
    if not torch.equal(everyone, checksum.expand_as(everyone)):
        raise RuntimeError(f"parameters differ between processes: {everyone.tolist()}")
    say(
        f"final parameters identical on all {accelerator.num_processes} processes"
    )

    accelerator.wait_for_everyone()
    # save() writes on process 0 only; unwrap_model() takes off the DDP wrapper
    accelerator.save(accelerator.unwrap_model(model).state_dict(), args.save)
    say(f"saved {args.save}")
    accelerator.end_training()  # destroys the process group
    time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
