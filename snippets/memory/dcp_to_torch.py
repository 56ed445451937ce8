"""Turn a distributed checkpoint into one torch.save file and use it without torchrun.

  python dcp_to_torch.py checkpoints/epoch_4 model.pt

One process reads every shard, so it needs memory for the whole checkpoint
(model and optimiser state), but no GPU and no process group.
"""

import argparse

import torch
from torch import nn
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

WIDTH, DEPTH = 64, 4


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.ff = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                nn.Linear(4 * width, width))

    def forward(self, x):
        return x + self.ff(self.norm(x))


class Net(nn.Module):
    def __init__(self, width=WIDTH, depth=DEPTH):
        super().__init__()
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.head = nn.Linear(width, 1)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("checkpoint", help="a folder written by dcp.save")
    parser.add_argument("output", help="the single file to write")
    args = parser.parse_args()

    dcp_to_torch_save(args.checkpoint, args.output)
    state = torch.load(args.output, weights_only=True)  # tensors, numbers, strings only
    app = state["app"]
    print(f"{args.output}: epoch {app['epoch']}, saved by {app['world_size']} ranks, "
          f"{len(app['model'])} model tensors, "
          f"optimiser state for {len(app['optimizer']['state'])}")

    model = Net()
    model.load_state_dict(app["model"])  # full tensors: no FSDP needed to use them
    model.eval()
    with torch.no_grad():
        x = torch.linspace(-1, 1, 3 * WIDTH).reshape(3, WIDTH)
        predictions = [round(v, 4) for v in model(x).flatten().tolist()]
    print("predictions for three inputs:", predictions)


if __name__ == "__main__":
    main()
