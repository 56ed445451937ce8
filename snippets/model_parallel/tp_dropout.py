"""Dropout under tensor parallelism: which ranks must draw the same mask.

Run it with one process per GPU, for example two:
  torchrun --standalone --nproc_per_node=2 tp_dropout.py

It applies dropout to activations of 4 tokens x 8 features, whole on every rank or
split along the features, in five ways, and says whether the ranks drew the same mask,
and whether each rank's mask is its part of the mask one process draws. It then uses a
rank's own random numbers a second time: a new mask, and the shared ones untouched.
"""

import os
import time
from contextlib import contextmanager
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor._random import is_rng_supported_mesh

SEED, P = 0, 0.5
TOKENS, FEATURES = 4, 8


class OwnRandomNumbers:
    """This rank's own stream of random numbers. Create it once per rank.

    Inside ``with own():`` random numbers come from this rank's stream, which goes on
    from where its last use stopped. Afterwards the shared generator goes on as if
    nothing had been drawn, so that the replicated parts still agree.
    """

    def __init__(self, seed, device):
        self.devices = [device] if device.type == "cuda" else []
        self.cpu_state = torch.Generator().manual_seed(seed).get_state()
        self.gpu_states = [torch.Generator(d).manual_seed(seed).get_state()
                           for d in self.devices]

    @contextmanager
    def __call__(self):
        with torch.random.fork_rng(devices=self.devices):  # puts the shared state back
            torch.set_rng_state(self.cpu_state)
            for d, state in zip(self.devices, self.gpu_states):
                torch.cuda.set_rng_state(state, d)
            try:
                yield
            finally:  # keep where this rank's stream got to, for its next use
                self.cpu_state = torch.get_rng_state()
                self.gpu_states = [torch.cuda.get_rng_state(d) for d in self.devices]


def shared_state(device):
    """The state of the shared generators: the CPU's, and this rank's GPU's."""
    states = [torch.get_rng_state()]
    if device.type == "cuda":
        states.append(torch.cuda.get_rng_state(device))
    return states


def my_features(x, rank, world_size):
    """This rank's part of the features (the last dimension), as after a column-wise
    layer."""
    return x.chunk(world_size, dim=-1)[rank]


def masks(mesh, device, own):
    """{way: this rank's dropout mask}: True where a value was kept."""
    rank, world_size = mesh.get_local_rank(), mesh.size()
    x = torch.ones(TOKENS, FEATURES, device=device)
    mine = my_features(x, rank, world_size)
    found = {}

    torch.manual_seed(SEED)  # the same seed on every rank
    whole = DTensor.from_local(x, mesh, [Replicate()])
    found["Replicate, same seed"] = F.dropout(whole, P).to_local()

    torch.manual_seed(SEED + rank)  # a different seed on every rank
    found["Replicate, seed + rank"] = F.dropout(whole, P).to_local()

    torch.manual_seed(SEED)
    split = DTensor.from_local(mine, mesh, [Shard(1)])
    found["Shard(1), same seed"] = F.dropout(split, P).to_local()

    torch.manual_seed(SEED)
    before = shared_state(device)
    with own():  # plain tensors from here on
        found["own seed per rank"] = F.dropout(mine, P)
    with own():  # the next step: a new mask
        found["own seed, used again"] = F.dropout(mine, P)
    kept = all(torch.equal(a, b) for a, b in zip(before, shared_state(device)))

    torch.manual_seed(SEED)
    found["my part of one mask"] = my_features(F.dropout(x, P), rank, world_size)
    return {way: (out != 0).cpu() for way, out in found.items()}, kept


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    dist.init_process_group(backend, timeout=timedelta(seconds=60))
    try:
        rank, world_size = dist.get_rank(), dist.get_world_size()
        mesh = init_device_mesh(device.type, (world_size,))  # one row
        supported = is_rng_supported_mesh(mesh)
        # Far from SEED, so that a rank's own seed is neither the shared seed nor one
        # that other code makes by adding a small number to it, such as SEED + rank.
        own = OwnRandomNumbers(SEED + 1000 + rank, device)
        mine, kept = masks(mesh, device, own)
        gathered = [None] * world_size
        dist.all_gather_object(gathered, (mine, kept))
        every = [m for m, _ in gathered]
        if rank == 0:
            torch.manual_seed(SEED)  # one process, the whole tensor
            one = F.dropout(torch.ones(TOKENS, FEATURES, device=device), P).cpu() != 0
            print(f"DTensor's random-number tracker on {device.type}: "
                  f"{'yes' if supported else 'not supported'}")
            print(f"\n{'dropout':26}{'masks of the ranks':20}masks = one process's")
            for way in [w for w in mine if w != "own seed, used again"]:
                held = [m[way] for m in every]
                same = all(torch.equal(m, held[0]) for m in held)
                parts = [one if way.startswith("Replicate") else
                         my_features(one, r, world_size) for r in range(world_size)]
                as_one = all(torch.equal(m, p) for m, p in zip(held, parts))
                print(f"{way:26}{'the same' if same else 'different':20}"
                      f"{'yes' if as_one else 'no'}")
            print(f"\nmask of one process, rank 0's features: "
                  f"{my_features(one, 0, world_size)[0].int().tolist()}")
            for way in mine:
                print(f"{way:26}rank 0 {every[0][way][0].int().tolist()}, "
                      f"rank {world_size - 1} {every[-1][way][0].int().tolist()}")
            again = [not torch.equal(m["own seed per rank"], m["own seed, used again"])
                     for m in every]
            print(f"\nown seed, used twice, a new mask on every rank: "
                  f"{'yes' if all(again) else 'no'}")
            print(f"shared generator as it was after both uses, on every rank: "
                  f"{'yes' if all(k for _, k in gathered) else 'no'}")
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
