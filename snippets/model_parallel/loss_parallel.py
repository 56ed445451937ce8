"""Loss parallelism: cross-entropy on logits that stay split along the vocabulary.

Run it with one process per GPU, for example two:
  torchrun --standalone --nproc_per_node=2 loss_parallel.py

It computes the loss of a small language model and its gradients three ways: in one
process, with the output layer split and the logits gathered, and with the logits left
split under loss_parallel(). It counts the collectives of each, and their bytes.
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
    loss_parallel,
    parallelize_module,
)

VOCAB, DIM = 1024, 16  # as in real models, a vocabulary much larger than the width


class Net(nn.Module):
    """A tiny language model: token embedding, a hidden layer and the output layer."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.hidden = nn.Linear(DIM, DIM)
        self.head = nn.Linear(DIM, VOCAB)  # a score (logit) per word of the vocabulary

    def forward(self, tokens):
        return self.head(F.gelu(self.hidden(self.embed(tokens))))


#: How the output layer is split in each run (None: not at all).
PLANS = {
    "one process": None,
    # each rank computes the logits of half of the vocabulary, then an all-gather
    # gives every rank all of them, as a plain tensor
    "gather logits": ColwiseParallel(output_layouts=Replicate()),
    # the logits stay a DTensor, split along the vocabulary (the last dimension)
    "loss parallel": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False),
}


def make_batch():
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(VOCAB, (4, 8), generator=g)  # 4 sequences of 8 tokens
    targets = torch.randint(VOCAB, (4, 8), generator=g)  # the next token of each
    return tokens, targets


def nbytes(result):
    """The bytes of the tensors in a result: a tensor, or a list or tuple of them."""
    if isinstance(result, torch.Tensor):
        return result.numel() * result.element_size()
    if isinstance(result, (list, tuple)):
        return sum(nbytes(item) for item in result)
    return 0


class CommBytes(CommDebugMode):
    """CommDebugMode that also adds up the bytes of the tensors collectives return."""

    def __init__(self):
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        before = self.get_total_counts()
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if self.get_total_counts() > before:  # the call was a collective
            self.bytes += nbytes(out)
        return out

    def summary(self):
        """'all_reduce 3, 384 B' (or '-')."""
        counts = Counter()
        for op, n in self.get_comm_counts().items():
            name = str(op).split(".")[-1]  # c10d_functional.all_gather_into_tensor
            counts[name.removesuffix("_into_tensor")] += n
        ops = ", ".join(f"{op} {n}" for op, n in sorted(counts.items()))
        return f"{ops}, {self.bytes} B" if ops else "-"


def full(tensor):
    """The whole tensor, gathered from its pieces on every rank."""
    return (tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor).cpu()


def local(tensor):
    """This rank's piece of a tensor (the tensor itself if it is not a DTensor)."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def loss_and_grads(name, mesh, device):
    torch.manual_seed(0)  # the same full model on every rank, before it is split
    model = Net().to(device)
    if PLANS[name] is not None:
        model = parallelize_module(model, mesh, {"head": PLANS[name]})
    tokens, targets = (t.to(device) for t in make_batch())  # the SAME batch everywhere
    forward, backward = CommBytes(), CommBytes()
    # loss_parallel() where the logits stay split; a block that does nothing elsewhere
    with loss_parallel() if name == "loss parallel" else nullcontext():
        with forward:
            logits = model(tokens)  # (batch, sequence, vocabulary)
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(0, 1))
        with backward:
            loss.backward()  # inside loss_parallel() too
    return {"model": model, "logits": logits, "loss": full(loss).item(),
            "grads": {n: full(p.grad) for n, p in model.named_parameters()},
            "comms": (tuple(local(logits).shape), forward.summary(),
                      backward.summary())}


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
        results = {name: loss_and_grads(name, mesh, device) for name in PLANS}
        # what every rank held and sent, for rank 0 to print (after the counting)
        per_rank = [None] * world_size
        dist.all_gather_object(per_rank, {n: r["comms"] for n, r in results.items()})
        if rank == 0:
            split = results["loss parallel"]
            for what, t in [("head.weight", split["model"].head.weight),
                            ("logits", split["logits"])]:
                print(f"{what}: full {tuple(t.shape)}, on this rank "
                      f"{tuple(t.to_local().shape)}, {t.placements[0]!r}")
            print(f"\n{'':23}{'logits held':16}{'forward':24}backward")
            rows = [("one process", 0)] + [(name, r) for name in PLANS
                                           if PLANS[name] for r in range(world_size)]
            for name, r in rows:
                label = f"{name}, rank {r}" if PLANS[name] else name
                shape, forward, backward = per_rank[r][name]
                print(f"{label:23}{str(shape):16}{forward:24}{backward}")
            print()
            one = results["one process"]
            for name, result in results.items():
                # the largest difference from the gradients of one process
                diff = max((g - one["grads"][n]).abs().max().item()
                           for n, g in result["grads"].items())
                print(f"{name}: loss {result['loss']:.6f}, "
                      f"largest gradient difference {diff:.1e}")
            torch.save({n: {"loss": r["loss"], "grads": r["grads"]}
                        for n, r in results.items()}, "loss_parallel.pt")
            print("saved loss_parallel.pt")
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
