"""DeepSpeed ZeRO from JSON config files: the same model, trained once per config.

  deepspeed --num_gpus=2 deepspeed_zero.py ds_config_zero2.json
  torchrun --standalone --nproc_per_node=2 deepspeed_zero.py ds_config_zero1.json \
      ds_config_zero3.json

For each config it prints what each rank holds between the backward pass and
the optimiser step (parameters, gradients, and optimiser state with DeepSpeed's
fp32 master copy), and rank 0 saves the full fp32 weights to <config>.pt.
"""

import argparse
import json
import os
import time
from pathlib import Path

import deepspeed
import torch
import torch.distributed as dist
import torch.nn.functional as F
from deepspeed.utils import safe_get_full_fp32_param
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

WIDTH, DEPTH, EPOCHS = 64, 4, 3


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


def make_dataset():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(512, WIDTH, generator=g)
    noise = 0.1 * torch.randn(512, 1, generator=g)
    y = torch.tanh(x[:, :8].sum(dim=1, keepdim=True)) + noise
    return TensorDataset(x, y)


def kib(tensors):
    return sum(t.numel() * t.element_size() for t in tensors if t is not None) / 1024


def held(engine):
    """KiB of parameters, gradients and optimiser state on this rank, read from
    DeepSpeed's own bookkeeping (attributes of version 0.19.8, not a stable API)."""
    zero = engine.optimizer  # DeepSpeed's ZeRO optimiser, around torch's Adam
    # stage 3 keeps this rank's partition of each parameter in p.ds_tensor
    params = [getattr(p, "ds_tensor", p) for p in engine.module.parameters()]
    if engine.zero_optimization_stage() == 3:
        master = zero.fp32_partitioned_groups_flat  # fp32 copy of this rank's partition
        grads = [zero.grad_partitions_flat_buffer]  # gradients of this rank's partition
    else:
        master = zero.single_partition_of_fp32_groups
        grads = [g for group in zero.averaged_gradients.values() for g in group or []]
    grads += [m.grad for m in master]  # offload: fp32 gradients for the step on the CPU
    state = [t for s in zero.optimizer.state.values() for t in s.values()
             if torch.is_tensor(t)]
    return [kib(params), kib(grads), kib(state) + kib(master)]


def train(config_file, dataset, device):
    config = json.loads(Path(config_file).read_text())
    torch.manual_seed(0)
    model = Net()
    engine, _, _, _ = deepspeed.initialize(
        model=model, model_parameters=model.parameters(), config=config)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    # train_batch_size in the config is the global batch; each rank takes its share
    batch = engine.train_micro_batch_size_per_gpu()
    loader = DataLoader(dataset, batch_size=batch, sampler=sampler)
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        total = 0.0
        for step, (x, y) in enumerate(loader):
            loss = F.mse_loss(engine(x.to(device)), y.to(device))
            engine.backward(loss)  # reduces (and partitions) the gradients
            if epoch == EPOCHS - 1 and step == len(loader) - 1:
                mine = held(engine)  # weights, gradients and Adam's state all exist now
            engine.step()
            total += loss.item()
    loss = torch.tensor(total / len(loader), device=device)
    dist.all_reduce(loss)  # the sum over all ranks, on every rank
    loss /= world_size  # their mean
    everyone = [None] * world_size
    dist.all_gather_object(everyone, mine)
    # Gathering a stage-3 parameter is collective: every rank takes part
    full = {name: safe_get_full_fp32_param(p).cpu()
            for name, p in engine.module.named_parameters()}
    if rank == 0:
        zero = config["zero_optimization"]
        offload = [k for k in ("offload_optimizer", "offload_param") if k in zero]
        print(f"{config_file}: ZeRO stage {zero['stage']}, "
              f"offload {', '.join(offload) or 'none'}, world size {world_size}, "
              f"last-epoch loss {loss.item():.5f}")
        print(f"  {'rank':>4} {'parameters':>10} {'gradients':>10} "
              f"{'optimiser state':>15}  (KiB)")
        for r, (p, g, s) in enumerate(everyone):
            print(f"  {r:>4} {p:>10.1f} {g:>10.1f} {s:>15.1f}")
        torch.save(full, Path(config_file).with_suffix(".pt").name)
    engine.destroy()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("configs", nargs="+", help="DeepSpeed JSON config files")
    parser.add_argument("--local_rank", type=int, default=-1,
                        help="set by the deepspeed launcher")
    args = parser.parse_args()
    local_rank = int(os.environ["LOCAL_RANK"])  # both launchers set it
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    deepspeed.init_distributed(dist_backend=backend)
    try:
        if dist.get_rank() == 0:
            print(f"model: {sum(p.numel() for p in Net().parameters()):,} parameters")
        dataset = make_dataset()
        for config_file in args.configs:
            train(config_file, dataset, device)
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
