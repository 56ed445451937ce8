"""Watch DistributedDataParallel at work: the copy when it wraps, buckets in backward.

    torchrun --standalone --nproc_per_node=2 inside_ddp.py

Each process builds its model with a different seed, on purpose. Wrapping it in
DDP copies rank 0's parameters and buffers to every process. Two training steps
then show the gradients being averaged bucket by bucket while the backward pass
is still running, and that the averaged gradient is that of the whole batch.
"""

import copy
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(512, 512), nn.ReLU(),
                                    nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
        self.register_buffer("input_mean", torch.zeros(512))  # not trained: a buffer

    def forward(self, x):
        return self.layers(x - self.input_mean)


def fingerprint(model):
    """A short summary of a model's parameters and buffer, to compare processes."""
    weights = sum(p.detach().double().sum().item() for p in model.parameters())
    mean = model.input_mean[0].item()
    return f"weights sum {weights:+.4f}, input_mean[0] {mean:+.4f}"


def print_from_every_rank(text):
    """Rank 0 prints one line from every process."""
    lines = [None] * dist.get_world_size()
    dist.all_gather_object(lines, text)
    if dist.get_rank() == 0:
        for rank, line in enumerate(lines):
            print(f"  rank {rank}: {line}")


def main():
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl")
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    try:
        rank, world_size = dist.get_rank(), dist.get_world_size()
        torch.manual_seed(rank)  # a different model in every process: not at home!
        model = Net().to(device)
        model.input_mean.fill_(rank / 10)  # and a different buffer
        if rank == 0:
            print("before DDP(model):")
        print_from_every_rank(fingerprint(model))

        ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None,
                  bucket_cap_mb=1)
        if rank == 0:
            print("after DDP(model), every process holds rank 0's parameters "
                  "and buffers:")
        print_from_every_rank(fingerprint(ddp.module))

        # Record when each gradient is ready, and when DDP starts averaging a bucket.
        events = []
        names = {p: name for name, p in ddp.module.named_parameters()}
        for p in ddp.module.parameters():
            p.register_post_accumulate_grad_hook(
                lambda p: events.append(f"gradient ready: {names[p]}"))

        def allreduce_and_record(state, bucket):
            params = ", ".join(names[p] for p in bucket.parameters())
            events.append(f"  -> bucket {bucket.index()} starts its all-reduce "
                          f"({params})")
            return default_hooks.allreduce_hook(state, bucket)  # what DDP does anyway

        ddp.register_comm_hook(None, allreduce_and_record)

        g = torch.Generator().manual_seed(42)  # every process makes the same batch...
        x = torch.randn(64, 512, generator=g).to(device)
        y = torch.randint(0, 10, (64,), generator=g).to(device)
        share = 64 // world_size
        mine = slice(rank * share, (rank + 1) * share)  # ...and uses its share
        for step in (1, 2):  # in step 1 DDP learns the order gradients arrive in
            events.clear()
            ddp.zero_grad()
            nn.functional.cross_entropy(ddp(x[mine]), y[mine]).backward()
            if rank == 0:
                print(f"backward pass of step {step} on rank 0, in order:")
                print("\n".join(f"  {event}" for event in events))

        full = copy.deepcopy(ddp.module)  # the same model, on the whole batch, alone
        nn.functional.cross_entropy(full(x), y).backward()
        difference = max((p.grad - q.grad).abs().max().item()
                         for p, q in zip(ddp.module.parameters(), full.parameters()))
        if rank == 0:
            print("largest difference between DDP's averaged gradient and the "
                  f"whole-batch gradient: {difference:.1e}")
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
