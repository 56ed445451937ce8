"""Sequence parallelism across a whole small language model.

Run it with one process per GPU, for example two:
  torchrun --standalone --nproc_per_node=2 sequence_parallel.py

It trains the same model three times on the same batch: in one process, with tensor
parallelism (the activations between the matrices whole on every rank), and with
sequence parallelism added (those activations split along the sequence). It shows
what each rank holds, counts the collectives of the first step, and saves the three
trainings.
"""

import os
import time
from collections import Counter
from contextlib import nullcontext
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

VOCAB, DIM, HEADS, LAYERS = 256, 16, 4, 2
STEPS = 3


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.head_dim = DIM // HEADS
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(DIM, DIM) for _ in range(4))

    def forward(self, x):
        batch, seq, _ = x.shape
        # -1, not HEADS: with tensor parallelism each rank has only some of the heads.
        q, k, v = (w(x).view(batch, seq, -1, self.head_dim).transpose(1, 2)
                   for w in (self.wq, self.wk, self.wv))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(batch, seq, -1))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(DIM, 4 * DIM)
        self.down = nn.Linear(4 * DIM, DIM)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    """A transformer block: attention, then an MLP, each after a norm."""

    def __init__(self):
        super().__init__()
        self.attention_norm, self.attention = nn.RMSNorm(DIM), Attention()
        self.mlp_norm, self.mlp = nn.RMSNorm(DIM), MLP()

    def forward(self, x):
        x = x + self.attention(self.attention_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class Net(nn.Module):
    """A small language model: token embedding, blocks, final norm, output layer."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.RMSNorm(DIM)
        self.output = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.output(self.norm(x))


def make_plan(between):
    """The plan for the whole model. ``between``: how the activations between the
    matrices are laid out, Replicate() (whole on every rank) or Shard(1) (split along
    dimension 1, the sequence)."""
    # Before the column-wise layers: an all-gather if the sequence is split.
    gather = PrepareModuleInput(input_layouts=between,
                                desired_input_layouts=Replicate())
    # The row-wise layers (embed, wo, down) sum the partial results of the ranks: an
    # all-reduce to leave them whole, a reduce-scatter to leave them split (Shard(1)).
    plan = {
        # the table is cut along the vocabulary: each rank looks up the tokens it owns,
        # writes zeros for the others, and the ranks' results are summed
        "embed": RowwiseParallel(input_layouts=Replicate(), output_layouts=between),
        "layers.*.attention": gather,  # * matches every block: layers.0, layers.1
        "layers.*.attention.wq": ColwiseParallel(),
        "layers.*.attention.wk": ColwiseParallel(),
        "layers.*.attention.wv": ColwiseParallel(),
        "layers.*.attention.wo": RowwiseParallel(output_layouts=between),
        "layers.*.mlp": gather,
        "layers.*.mlp.up": ColwiseParallel(),
        "layers.*.mlp.down": RowwiseParallel(output_layouts=between),
        "output": ColwiseParallel(input_layouts=between, output_layouts=Replicate()),
    }
    if between == Shard(1):  # the norms work on this rank's part of the sequence
        plan |= {"layers.*.attention_norm": SequenceParallel(),
                 "layers.*.mlp_norm": SequenceParallel(),
                 "norm": SequenceParallel()}
    return plan


#: How the activations between the matrices are laid out in each run (None: the
#: whole model in one process, on every rank, to compare with).
PLANS = {"one process": None, "tensor parallel": Replicate(),
         "+ sequence parallel": Shard(1)}


def make_batch():
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(VOCAB, (4, 8), generator=g)  # 4 sequences of 8 tokens
    targets = torch.randint(VOCAB, (4, 8), generator=g)  # the next token of each
    return tokens, targets


def local(tensor):
    """This rank's piece of a tensor (the tensor itself if it is not a DTensor)."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def full(tensor):
    """The whole tensor, gathered from its pieces on every rank."""
    return (tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor).cpu()


class CommSizes(CommDebugMode):
    """CommDebugMode that also notes the size of the whole tensor that each collective
    sums or gathers: {(collective, bytes): count}."""

    def __init__(self):
        super().__init__()
        self.calls = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        before = self.get_total_counts()
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if self.get_total_counts() > before:  # the call was a collective
            name = func.__name__.split(".")[0]  # all_gather_into_tensor.default
            name = name.removesuffix("_into_tensor").removesuffix("_tensor")
            whole = max(t.numel() * t.element_size() for t in (args[0], out))
            self.calls[name, whole] += 1
        return out


def sent_in_a_ring(name, whole, n):
    """Bytes each of n ranks sends when a collective passes pieces around a ring."""
    # n - 1 pieces for a reduce-scatter or an all-gather
    pieces = 2 * (n - 1) if name == "all_reduce" else n - 1
    return pieces * whole // n  # an all-reduce is a reduce-scatter then an all-gather


def record_shapes(model):
    """What this rank holds at three places of the first block, in its first forward."""
    shapes = {}
    places = {"between blocks": model.layers[0],
              "output of a norm": model.layers[0].mlp_norm,
              "output of wq": model.layers[0].attention.wq}
    for place, module in places.items():
        def hook(module, inputs, output, place=place):
            shapes.setdefault(place, tuple(local(output).shape))
        module.register_forward_hook(hook)
    return shapes


def train(name, mesh, device):
    torch.manual_seed(0)  # the same full model on every rank, before it is split
    model = Net().to(device)
    if PLANS[name] is not None:
        model = parallelize_module(model, mesh, make_plan(PLANS[name]))
    shapes = record_shapes(model)
    # foreach=False: some parameters may be DTensors and others not (tensor_parallel.py)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
    tokens, targets = (t.to(device) for t in make_batch())  # the SAME batch everywhere
    phases = {phase: CommSizes() for phase in ("forward", "backward", "step")}
    losses = []
    for step in range(STEPS):
        count = phases if step == 0 else dict.fromkeys(phases, nullcontext())
        optimizer.zero_grad()
        with count["forward"]:
            logits = model(tokens)  # whole on every rank: output_layouts=Replicate()
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        with count["backward"]:
            loss.backward()
        if step == 0:
            first_grads = {n: full(p.grad) for n, p in model.named_parameters()}
        with count["step"]:
            optimizer.step()
        losses.append(loss.item())
    weights = {n: full(p.detach()) for n, p in model.named_parameters()}
    return {"model": model, "shapes": shapes, "losses": losses,
            "first_grads": first_grads, "weights": weights,
            "comms": {p: mode.calls for p, mode in phases.items()}}


def largest_difference(a, b):
    return max((a[n] - b[n]).abs().max().item() for n in a)


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
        rank, n = dist.get_rank(), dist.get_world_size()
        mesh = init_device_mesh(device.type, (n,))  # one row
        results = {name: train(name, mesh, device) for name in PLANS}
        if rank == 0:
            split = results["+ sequence parallel"]["model"]
            for name in ("embed.weight", "layers.0.attention.wq.weight",
                         "layers.1.attention.wq.weight", "layers.1.mlp.down.weight",
                         "layers.1.mlp_norm.weight", "output.weight"):
                p = split.get_parameter(name)
                print(f"{name:30}full {str(tuple(p.shape)):10} on this rank "
                      f"{str(tuple(local(p).shape)):10} {p.placements[0]!r}")
            for name in ("tensor parallel", "+ sequence parallel"):
                params = list(results[name]["model"].parameters())
                dtensors = sum(hasattr(p, "placements") for p in params)
                print(f"{name}: {dtensors} of {len(params)} parameters are DTensors")

            print(f"\n{'held by rank 0':20}{'tensor parallel':18}+ sequence parallel")
            for place in ("between blocks", "output of a norm", "output of wq"):
                shapes = [results[name]["shapes"][place]
                          for name in ("tensor parallel", "+ sequence parallel")]
                print(f"{place:20}{str(shapes[0]):18}{shapes[1]}")

            print(f"\n{'first step, rank 0':21}{'phase':10}{'collective':16}"
                  f"{'count':>5}{'whole tensor':>14}{'sent in a ring':>16}")
            for name in ("tensor parallel", "+ sequence parallel"):
                total = 0
                for phase, calls in results[name]["comms"].items():
                    for (op, whole), count in sorted(calls.items()):
                        sent = count * sent_in_a_ring(op, whole, n)
                        total += sent
                        print(f"{name:21}{phase:10}{op:16}{count:5}{whole:>12} B"
                              f"{sent:>14} B")
                print(f"{name:21}{'in all':10}{'':16}{'':5}{'':14}{total:>14} B")

            print()
            one = results["one process"]
            for name, r in results.items():
                print(f"{name}: losses " + " ".join(f"{x:.6f}" for x in r["losses"]))
            for name in ("tensor parallel", "+ sequence parallel"):
                r = results[name]
                grads = largest_difference(r["first_grads"], one["first_grads"])
                weights = largest_difference(r["weights"], one["weights"])
                print(f"{name}: largest difference from one process: gradients "
                      f"{grads:.1e}, weights {weights:.1e}")
            torch.save({name: {"losses": r["losses"], "first_grads": r["first_grads"],
                               "model": r["weights"]} for name, r in results.items()},
                       "sequence_parallel.pt")
            print("saved sequence_parallel.pt")
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
