"""Naive model parallelism: half of a model on one GPU, the other half on another.

Run it with:  python naive.py
It uses cuda:0 and cuda:1 when there are two GPUs, and the CPU for both halves
otherwise. One process drives both devices; no process group is needed.
"""

import torch
from torch import nn


def pick_devices():
    if torch.cuda.device_count() >= 2:
        return torch.device("cuda:0"), torch.device("cuda:1")
    return torch.device("cpu"), torch.device("cpu")


class TwoDeviceNet(nn.Module):
    def __init__(self, dev0, dev1):
        super().__init__()
        self.dev0, self.dev1 = dev0, dev1
        self.first = nn.Sequential(
            nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU()
        ).to(dev0)
        self.second = nn.Sequential(
            nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1)
        ).to(dev1)
        self.seen = []  # where the activations were, recorded by forward

    def forward(self, x):
        x = self.first(x.to(self.dev0))
        self.seen.append(("first half output", str(x.device)))
        x = x.to(self.dev1)  # copy the activations to the second device
        self.seen.append(("second half input", str(x.device)))
        return self.second(x)


def make_data():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(256, 32, generator=g)
    y = x[:, :4].sum(dim=1, keepdim=True) / 2
    return x, y


def train(model, x, y, steps=5):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        out = model(x)  # ends on the second device...
        loss = nn.functional.mse_loss(out, y.to(out.device))  # ...as must the targets
        loss.backward()  # gradients flow back from the second device to the first
        optimizer.step()
        losses.append(loss.item())
    return losses


def main():
    dev0, dev1 = pick_devices()
    torch.manual_seed(0)
    model = TwoDeviceNet(dev0, dev1)
    print(f"first half on {next(model.first.parameters()).device}, "
          f"second half on {next(model.second.parameters()).device}")
    x, y = make_data()
    losses = train(model, x, y)
    for what, device in model.seen[:2]:
        print(f"{what}: {device}")
    for step, loss in enumerate(losses):
        print(f"step {step}: loss {loss:.6f}")
    torch.save({k: v.cpu() for k, v in model.state_dict().items()}, "naive.pt")
    print("saved naive.pt")


if __name__ == "__main__":
    main()
