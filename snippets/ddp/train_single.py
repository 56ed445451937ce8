"""Train a small classifier on one GPU (or the CPU) on handwritten digits.

    python train_single.py --epochs 3

The single-GPU starting point of train.py, its DistributedDataParallel version.
"""

import argparse
import os

import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32, help="samples per step")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", default="checkpoint.pt",
                        help="saved after every epoch; resumed from if it exists")
    parser.add_argument("--max-steps", type=int,
                        help="save and stop after this many steps, as if out of time")
    parser.add_argument("--log-every", type=int, default=10,
                        help="print the loss every this many steps")
    return parser.parse_args()


def make_datasets(train_size=1024):
    """scikit-learn's 1797 handwritten digits, 8 × 8 pixels (shipped inside the
    package: nothing to download). 1024 images to train on, the other 773 held out."""
    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16  # pixels 0-16 to 0-1
    y = torch.tensor(digits.target)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(1234))
    x, y = x[order], y[order]
    return (TensorDataset(x[:train_size], y[:train_size]),
            TensorDataset(x[train_size:], y[train_size:]))


def make_model(features=64, classes=10):
    return nn.Sequential(nn.Linear(features, 64), nn.ReLU(), nn.Linear(64, 64),
                         nn.ReLU(), nn.Linear(64, classes))


def accuracy(model, dataset, device):
    """The share of ``dataset`` that ``model`` classifies right."""
    x, y = (t.to(device) for t in dataset.tensors)
    with torch.no_grad():
        return (model(x).argmax(dim=1) == y).float().mean().item()


def save_checkpoint(path, model, optimizer, step):
    state = {"model": model.state_dict(),
             "optimizer": optimizer.state_dict(), "step": step}
    torch.save(state, f"{path}.tmp")
    os.replace(f"{path}.tmp", path)  # atomic: never half a file


def load_checkpoint(path, model, optimizer, device):
    """Load the checkpoint if there is one; return the number of steps done."""
    if not os.path.exists(path):
        return 0
    state = torch.load(path, map_location=device, weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return state["step"]


def train(args, device):
    torch.manual_seed(args.seed)
    dataset, held_out = make_datasets()
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                        drop_last=True)
    model = make_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    step = load_checkpoint(args.checkpoint, model, optimizer, device)

    steps_per_epoch = len(loader)
    total_steps = args.epochs * steps_per_epoch
    print(f"training on {device}: {args.batch_size} samples per step, "
          f"{steps_per_epoch} steps per epoch")
    if step:
        print(f"resumed from {args.checkpoint} at step {step}")
    start_epoch, done_in_epoch = divmod(step, steps_per_epoch)
    for epoch in range(start_epoch, args.epochs):
        totals = torch.zeros(3, device=device)  # summed loss, correct answers, samples
        for i, (x, y) in enumerate(loader):
            if epoch == start_epoch and i < done_in_epoch:
                continue  # trained on before the checkpoint was saved
            x, y = x.to(device), y.to(device)
            logits = model(x)
            loss = nn.functional.cross_entropy(logits, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            totals[0] += loss.detach() * len(y)
            totals[1] += (logits.argmax(dim=1) == y).sum()
            totals[2] += len(y)

            if step % args.log_every == 0:
                print(f"epoch {epoch + 1}/{args.epochs}  "
                      f"step {step}/{total_steps}  loss {loss.item():.4f}")
            if step == args.max_steps:
                save_checkpoint(args.checkpoint, model, optimizer, step)
                print(f"stopped after step {step} (--max-steps); "
                      "run again to resume")
                return
        loss_sum, correct, samples = totals.tolist()
        print(f"epoch {epoch + 1}/{args.epochs} done: "
              f"loss {loss_sum / samples:.4f}, "
              f"accuracy {correct / samples:.1%} on {samples:.0f} samples")
        save_checkpoint(args.checkpoint, model, optimizer, step)
    print(f"held-out accuracy {accuracy(model, held_out, device):.1%} "
          f"on {len(held_out)} images")


def main():
    args = parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    train(args, device)


if __name__ == "__main__":
    main()
