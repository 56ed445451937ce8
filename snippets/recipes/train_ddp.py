"""Train a small image classifier on many GPUs with DistributedDataParallel.

    torchrun --standalone --nproc_per_node=4 train_ddp.py --data images --epochs 3

train_one_gpu.py, ported: one process per GPU with NCCL, or on the CPU with gloo.
When the folder --data names does not exist, rank 0 first writes a small stand-in
data set there (name a folder that every node sees). Resumes from --checkpoint when
that file exists. On SIGTERM or SIGUSR1 it saves a checkpoint at the next step and
stops: run it again to resume.
"""

import argparse
import math
import os
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, Subset
from torch.utils.data.distributed import DistributedSampler
from tqdm import tqdm


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="images", help="holds train/ and val/")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32, help="per process")
    parser.add_argument("--lr", type=float, default=0.1,
                        help="for 32 samples per step; scaled to the samples per step")
    parser.add_argument("--warmup-epochs", type=float, default=1)
    parser.add_argument("--workers", type=int, default=2,
                        help="data loader processes, per process")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", default="checkpoint.pt",
                        help="saved after every epoch; resumed from if it exists")
    parser.add_argument("--log", default="train.log", help="a copy of what it prints")
    parser.add_argument("--log-every", type=int, default=5,
                        help="print the loss every this many steps")
    parser.add_argument("--evaluate", action="store_true",
                        help="validate the model in --checkpoint, then stop")
    parser.add_argument("--timeout", type=float, default=300,
                        help="seconds a process waits for the others before it fails")
    return parser.parse_args()


def make_stand_in(root, classes=4, train=240, val=101, size=16):
    """Write root/{train,val}/<class>/<n>.pt: 3 × size × size images (uint8), ``train``
    per class to train on and ``val`` in all to validate on. Stands in for your data."""
    g = torch.Generator().manual_seed(1234)
    patterns = torch.randn(classes, 3, 4, 4, generator=g)  # a blurry pattern per class
    patterns = nn.functional.interpolate(patterns, size=size, mode="bilinear")
    per_class = {"train": [train] * classes, "val": [val // classes] * classes}
    per_class["val"][0] += val % classes
    for split, counts in per_class.items():
        for label, count in enumerate(counts):
            folder = Path(root, split, f"class_{label}")
            folder.mkdir(parents=True, exist_ok=True)
            for n in range(count):
                image = patterns[label] + 3 * torch.randn(3, size, size, generator=g)
                image = (image * 25 + 128).clamp(0, 255).to(torch.uint8)
                torch.save(image, folder / f"{n:05d}.pt")


class ImageFolder(Dataset):
    """root/<class>/<name>.pt, each a 3 × H × W uint8 image; its folder is its class."""

    def __init__(self, root, augment, seed=0):
        self.classes = sorted(d.name for d in Path(root).iterdir() if d.is_dir())
        self.files = [(path, label) for label, name in enumerate(self.classes)
                      for path in sorted(Path(root, name).glob("*.pt"))]
        self.augment, self.seed, self.epoch = augment, seed, 0

    def set_epoch(self, epoch):
        self.epoch = epoch  # the loader's workers, started each epoch, copy it

    def __len__(self):
        return len(self.files)

    def __getitem__(self, index):
        path, label = self.files[index]
        image = torch.load(path, weights_only=True).float() / 255
        if self.augment:
            # Random numbers of this image and epoch alone: the same crop and flip
            # whichever rank and worker load it, however many there are.
            generator = torch.Generator().manual_seed(
                (self.seed * 1000 + self.epoch) * 10_000_000 + index)
            image = random_crop_and_flip(image, generator=generator)
        return (image - 0.5) / 0.25, label


def random_crop_and_flip(image, pad=2, generator=None):
    """Shift the image up to ``pad`` pixels (zeros fill in); flip it half the time."""
    height, width = image.shape[1:]
    padded = nn.functional.pad(image, (pad, pad, pad, pad))
    top, left = torch.randint(0, 2 * pad + 1, (2,), generator=generator).tolist()
    image = padded[:, top:top + height, left:left + width]
    if torch.rand(1, generator=generator).item() < 0.5:
        image = image.flip(2)
    return image


def make_model(classes):
    def block(inputs, outputs, stride):
        return [nn.Conv2d(inputs, outputs, 3, stride, padding=1, bias=False),
                nn.BatchNorm2d(outputs), nn.ReLU()]

    return nn.Sequential(*block(3, 16, 1), *block(16, 32, 2), *block(32, 64, 2),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, classes))


def warmup_then_cosine(warmup_steps, total_steps):
    """The learning rate's factor at each step: up in a line, then down a cosine."""
    def factor(step):
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        done = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return 0.5 * (1 + math.cos(math.pi * done))
    return factor


def validate(model, loader, device, dtype):
    """The mean loss and the accuracy on the whole validation set: every rank's sums
    of loss, right answers and images, added up over the ranks."""
    model.eval()
    sums = torch.zeros(3, dtype=torch.float64, device=device)
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            with torch.autocast(device.type, dtype, enabled=dtype != torch.float32):
                logits = model(x)  # the wrapped model: it hands rank 0's buffers on
            sums[0] += nn.functional.cross_entropy(logits.float(), y, reduction="sum")
            sums[1] += (logits.argmax(1) == y).sum()
            sums[2] += len(y)
    dist.all_reduce(sums)
    model.train()
    loss_sum, correct, count = sums.tolist()
    return loss_sum / count, int(correct), int(count)


signalled = []  # the signals this process received


def on_signal(number, frame):
    signalled.append(number)  # acted on at the next step, by every rank at once


def leave_signals_to_the_rank(worker_id):
    """A data loader worker ignores SIGTERM and SIGUSR1 (which Slurm and torchrun send
    to every process), so that it goes on loading until its rank stops."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)


def anyone_signalled(device):
    """True on every rank if any rank received SIGTERM or SIGUSR1."""
    flag = torch.tensor([len(signalled)], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return flag.item() > 0


def save_checkpoint(path, state, device):
    """Every rank hands in its random number generators; rank 0 saves; all wait."""
    rng = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        rng["cuda"] = torch.cuda.get_rng_state(device)
    state["rng"] = [None] * dist.get_world_size()
    dist.all_gather_object(state["rng"], rng)
    if dist.get_rank() == 0:
        torch.save(state, f"{path}.tmp")
        os.replace(f"{path}.tmp", path)  # atomic: a killed job keeps the old one
    dist.barrier(device_ids=[device.index] if device.type == "cuda" else None)


def setup(timeout):
    """Join the others (torchrun sets RANK, WORLD_SIZE...); return this one's device."""
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))  # a GPU each
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout))
    return device


def train(args, device):
    rank, world = dist.get_rank(), dist.get_world_size()
    # float16 on GPUs, with a gradient scaler; the CPU computes in float32
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    log = open(args.log, "a") if rank == 0 else None

    def report(line):
        if rank == 0:
            tqdm.write(line)  # above the progress bar
            sys.stdout.flush()  # now, not when a buffer fills: a killed job keeps it
            print(line, file=log, flush=True)

    torch.manual_seed(args.seed)  # the same initial model on every rank
    if rank == 0 and not os.path.exists(args.data):
        make_stand_in(args.data)
        report(f"wrote a stand-in data set to {args.data}")
    dist.barrier(device_ids=[device.index] if device.type == "cuda" else None)
    train_set = ImageFolder(os.path.join(args.data, "train"), True, args.seed)
    val_set = ImageFolder(os.path.join(args.data, "val"), augment=False)
    sampler = DistributedSampler(train_set, seed=args.seed)  # a share for each rank
    steps_per_epoch = len(sampler) // args.batch_size
    # Every rank validates on every world-th image: each image once, none repeated
    val_loader = DataLoader(Subset(val_set, range(rank, len(val_set), world)),
                            batch_size=256, num_workers=args.workers,
                            worker_init_fn=leave_signals_to_the_rank)

    model = make_model(len(train_set.classes)).to(device)
    if device.type == "cuda":  # batch statistics of all ranks' images, not each one's
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    lr = args.lr * world * args.batch_size / 32  # more samples per step, larger steps
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9,
                                weight_decay=5e-4)
    total_steps = args.epochs * steps_per_epoch
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_then_cosine(
        int(args.warmup_epochs * steps_per_epoch), total_steps))
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    torch.manual_seed(args.seed + rank)  # each rank's own dropout, say, from here on

    step = 0
    if os.path.exists(args.checkpoint):
        # On the CPU: the random generators take their states from there alone, and
        # load_state_dict copies each tensor to the device of what it loads into
        state = torch.load(args.checkpoint, map_location="cpu", weights_only=True)
        saved_world = len(state["rng"])  # a state for each rank that saved it
        if saved_world != world and not args.evaluate:
            # its steps per epoch, schedule and random generators are those of
            # saved_world processes: resuming with another number would go astray
            raise SystemExit(f"{args.checkpoint} was saved by {saved_world} processes, "
                             f"not {world}: resume with {saved_world}, or start afresh")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        scaler.load_state_dict(state["scaler"])
        step = state["step"]
        if saved_world == world:  # not so for --evaluate alone
            torch.set_rng_state(state["rng"][rank]["cpu"])
            if device.type == "cuda":
                torch.cuda.set_rng_state(state["rng"][rank]["cuda"], device)
        report(f"resumed from {args.checkpoint} at epoch "
               f"{step // steps_per_epoch + 1}, step {step}")
    model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    report(f"{world} processes ({dist.get_backend()} on {device.type}): {world} × "
           f"{args.batch_size} = {world * args.batch_size} images per step, "
           f"learning rate {lr:g}, {steps_per_epoch} steps per epoch")
    if args.evaluate:
        val_loss, correct, count = validate(model, val_loader, device, dtype)
        report(f"validation: loss {val_loss:.6f}, accuracy {correct}/{count}")
        return

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGUSR1, on_signal)
    start_epoch, done = divmod(step, steps_per_epoch)
    for epoch in range(start_epoch, args.epochs):
        sampler.set_epoch(epoch)  # a new order of the images every epoch
        train_set.set_epoch(epoch)  # and new crops and flips
        skip = done * args.batch_size if epoch == start_epoch else 0
        loader = DataLoader(train_set, batch_size=args.batch_size,
                            sampler=list(sampler)[skip:],  # not those done before
                            drop_last=True, num_workers=args.workers,
                            worker_init_fn=leave_signals_to_the_rank,
                            # the workers' seeds, from a generator of their own: a
                            # resumed run draws what one never stopped draws
                            generator=torch.Generator().manual_seed(
                                (args.seed * 1000 + epoch) * 1000 + rank),
                            pin_memory=device.type == "cuda")
        for x, y in tqdm(loader, desc=f"epoch {epoch + 1}/{args.epochs}",
                         disable=rank != 0):
            if anyone_signalled(device):
                save_checkpoint(args.checkpoint, {
                    "model": model.module.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(),
                    "scaler": scaler.state_dict(), "epoch": epoch, "step": step},
                    device)
                report(f"stopped by a signal at epoch {epoch + 1}, step {step}: "
                       f"saved {args.checkpoint}; run again to resume")
                return
            x = x.to(device, non_blocking=True)
            y = y.to(device, non_blocking=True)
            with torch.autocast(device.type, dtype, enabled=dtype != torch.float32):
                loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()  # DDP averages the gradients meanwhile
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            step += 1
            if step % args.log_every == 0:
                loss = loss.detach().clone()
                dist.all_reduce(loss)  # the sum of every rank's loss...
                report(f"epoch {epoch + 1} step {step}/{total_steps} "
                       f"loss {loss.item() / world:.4f} "  # ...and their mean
                       f"lr {scheduler.get_last_lr()[0]:.4f}")

        val_loss, correct, count = validate(model, val_loader, device, dtype)
        report(f"epoch {epoch + 1} validation: loss {val_loss:.4f}, "
               f"accuracy {correct}/{count} = {correct / count:.1%}")
        save_checkpoint(args.checkpoint, {
            "model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(),
            "epoch": epoch + 1, "step": step}, device)
    report(f"saved {args.checkpoint} after epoch {args.epochs}, step {step}")


def main():
    args = parse_args()
    device = setup(args.timeout)
    try:
        train(args, device)
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
