"""Train a small model with nn.DataParallel on all GPUs of one machine.

Run it with:  python dataparallel.py
Without GPUs DataParallel simply calls the model on the CPU, so the script
still runs; the splitting of the batch only happens with two or more GPUs.
"""

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
        self.seen = []  # (device, rows) of every chunk of a batch a replica received

    def forward(self, x):
        self.seen.append((str(x.device), x.shape[0]))
        return self.layers(x)


def make_data(device):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(256, 32, generator=g)
    y = x.sum(dim=1, keepdim=True) / 8
    return x.to(device), y.to(device)


def train(model, x, y, steps=5):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)  # outputs gathered on the first GPU
        loss.backward()  # gradients of every replica summed on the first GPU
        optimizer.step()  # only the copy on the first GPU is updated...
        losses.append(loss.item())  # ...and copied to the others at the next forward
    return losses


def main():
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    net = Net().to(device)  # the model must live on the first GPU
    model = nn.DataParallel(net)  # uses every visible GPU (none on a CPU-only machine)
    print(f"GPUs used: {len(model.device_ids)}")
    print(f"parameters live on: {next(model.parameters()).device}")

    x, y = make_data(device)
    losses = train(model, x, y)
    first_batch = sorted(net.seen[: max(1, len(model.device_ids))])
    chunks = ", ".join(f"{rows} rows on {device}" for device, rows in first_batch)
    print("first batch of 256 rows was split into:", chunks)
    for step, loss in enumerate(losses):
        print(f"step {step}: loss {loss:.4f}")

    # Save the wrapped module: its keys have no "module." prefix, so the
    # checkpoint loads into a plain model, with or without DataParallel.
    torch.save(model.module.state_dict(), "dataparallel.pt")
    print("saved dataparallel.pt with keys:", ", ".join(model.module.state_dict()))


if __name__ == "__main__":
    main()
