"""Train a small image classifier on one GPU (or the CPU): a typical research script.

    python train_one_gpu.py --data images --epochs 3

When the folder --data names does not exist, it first writes a small stand-in data
set there. Resumes from --checkpoint when that file exists.
"""

import argparse
import math
import os
import sys
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="images", help="holds train/ and val/")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--warmup-epochs", type=float, default=1)
    parser.add_argument("--workers", type=int, default=2, help="data loader processes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", default="checkpoint.pt",
                        help="saved after every epoch; resumed from if it exists")
    parser.add_argument("--log", default="train.log", help="a copy of what it prints")
    parser.add_argument("--log-every", type=int, default=5,
                        help="print the loss every this many steps")
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

    def __init__(self, root, augment):
        self.classes = sorted(d.name for d in Path(root).iterdir() if d.is_dir())
        self.files = [(path, label) for label, name in enumerate(self.classes)
                      for path in sorted(Path(root, name).glob("*.pt"))]
        self.augment = augment

    def __len__(self):
        return len(self.files)

    def __getitem__(self, index):
        path, label = self.files[index]
        image = torch.load(path, weights_only=True).float() / 255
        if self.augment:
            image = random_crop_and_flip(image)
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
    """The mean loss and the accuracy on the validation set."""
    model.eval()
    loss_sum, correct, count = 0.0, 0, 0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            with torch.autocast(device.type, dtype, enabled=dtype != torch.float32):
                logits = model(x)
            loss_sum += nn.functional.cross_entropy(logits.float(), y,
                                                    reduction="sum").item()
            correct += (logits.argmax(1) == y).sum().item()
            count += len(y)
    model.train()
    return loss_sum / count, correct, count


def save_checkpoint(path, state):
    torch.save(state, f"{path}.tmp")
    os.replace(f"{path}.tmp", path)  # atomic: a killed job keeps the old one


def main():
    args = parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    # float16 on GPUs, with a gradient scaler; the CPU computes in float32
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    log = open(args.log, "a")

    def report(line):
        tqdm.write(line)  # above the progress bar
        sys.stdout.flush()  # now, not when a buffer fills: a killed job keeps it
        print(line, file=log, flush=True)

    torch.manual_seed(args.seed)
    if not os.path.exists(args.data):
        make_stand_in(args.data)
        report(f"wrote a stand-in data set to {args.data}")
    train_set = ImageFolder(os.path.join(args.data, "train"), augment=True)
    val_set = ImageFolder(os.path.join(args.data, "val"), augment=False)
    loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True,
                        drop_last=True, num_workers=args.workers,
                        pin_memory=device.type == "cuda")
    val_loader = DataLoader(val_set, batch_size=256, num_workers=args.workers)

    model = make_model(len(train_set.classes)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9,
                                weight_decay=5e-4)
    total_steps = args.epochs * len(loader)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_then_cosine(
        int(args.warmup_epochs * len(loader)), total_steps))
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)

    epoch = step = 0
    if os.path.exists(args.checkpoint):
        # On the CPU: the random generators take their states from there alone, and
        # load_state_dict copies each tensor to the device of what it loads into
        state = torch.load(args.checkpoint, map_location="cpu", weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        scaler.load_state_dict(state["scaler"])
        epoch, step = state["epoch"], state["step"]
        torch.set_rng_state(state["rng"]["cpu"])
        if device.type == "cuda":
            torch.cuda.set_rng_state(state["rng"]["cuda"])
        report(f"resumed from {args.checkpoint} at epoch {epoch + 1}, step {step}")

    for epoch in range(epoch, args.epochs):
        for x, y in tqdm(loader, desc=f"epoch {epoch + 1}/{args.epochs}"):
            x = x.to(device, non_blocking=True)
            y = y.to(device, non_blocking=True)
            with torch.autocast(device.type, dtype, enabled=dtype != torch.float32):
                loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            step += 1
            if step % args.log_every == 0:
                report(f"epoch {epoch + 1} step {step}/{total_steps} "
                       f"loss {loss.item():.4f} lr {scheduler.get_last_lr()[0]:.4f}")

        val_loss, correct, count = validate(model, val_loader, device, dtype)
        report(f"epoch {epoch + 1} validation: loss {val_loss:.4f}, "
               f"accuracy {correct}/{count} = {correct / count:.1%}")
        rng = {"cpu": torch.get_rng_state()}
        if device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state()
        save_checkpoint(args.checkpoint, {
            "model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(),
            "epoch": epoch + 1, "step": step, "rng": rng})
    report(f"saved {args.checkpoint} after epoch {args.epochs}, step {step}")


if __name__ == "__main__":
    main()
