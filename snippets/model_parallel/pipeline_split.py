"""Split a model into pipeline stages by hand: build it on the meta device, keep this
rank's layers, then allocate and initialise only those.

Run it with one process per stage, for example two:
  torchrun --standalone --nproc_per_node=2 pipeline_split.py

Each rank builds the whole model without memory, deletes the layers of the other
stages, allocates its own on its device and gives them the weights one process would.
The stages train with the 1F1B schedule. Rank 0 then saves the whole trained model as
one checkpoint, and every rank loads its part back into a new stage.
"""

import os
import sys
import time
import zlib
from datetime import timedelta

import torch

NEEDS = "2.10"  # the oldest release this script was run with
if torch.__version__ < f"{NEEDS}.0a0":  # NVIDIA's 2.N.0a0 builds count as 2.N
    print(f"this script needs PyTorch >= {NEEDS} (found {torch.__version__})",
          file=sys.stderr)
    sys.exit(2)

import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B

VOCAB, DIM, LAYERS = 64, 32, 4
MICROBATCHES = 4
STEPS = 3
LR = 0.5


class Block(nn.Module):
    """A transformer block without attention, to stay short: x + MLP(norm(x))."""

    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


class Transformer(nn.Module):
    def __init__(self, vocab=VOCAB, dim=DIM, layers=LAYERS):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        # A ModuleDict, not a ModuleList: deleting layer "0" leaves "1" named "1",
        # so a stage's names are those of the whole model.
        self.layers = nn.ModuleDict({str(i): Block(dim) for i in range(layers)})
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, x):
        # A stage without the embedding receives activations, not tokens.
        h = self.embed(x) if self.embed is not None else x
        for layer in self.layers.values():
            h = layer(h)
        if self.head is None:  # not the last stage: pass the activations on
            return h
        return self.head(self.norm(h))

    @torch.no_grad()
    def init_weights(self):
        """Give each parameter random numbers seeded by its own name, drawn on the CPU.
        A layer then gets the same weights whichever other layers this rank holds, and
        on every device."""
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                p.zero_()
            elif "norm" in name:
                p.fill_(1.0)
            else:
                g = torch.Generator().manual_seed(zlib.crc32(name.encode()))
                fan_in = p.shape[-1] if p.dim() > 1 and "embed" not in name else 1
                p.copy_(torch.randn(p.shape, generator=g) / fan_in ** 0.5)


def build_model():
    """The whole model, initialised as every stage initialises its part. main() does
    not call it: it is the model to check the split against, in one process."""
    model = Transformer()
    model.init_weights()
    return model


def loss_fn(logits, targets):
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def make_batch():
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(VOCAB, (8, 16), generator=g)  # 8 sequences of 16 tokens
    return tokens, torch.roll(tokens, -1, dims=1)  # learn to predict the next token


def layers_of(stage, num_stages, layers=LAYERS):
    """The names of the layers a stage holds: consecutive, as even as possible."""
    return [str(i) for i in range(layers * stage // num_stages,
                                  layers * (stage + 1) // num_stages)]


def keep_stage(model, stage, num_stages):
    """Delete the parts of ``model`` that other stages hold."""
    mine = layers_of(stage, num_stages)
    for name in list(model.layers):
        if name not in mine:
            del model.layers[name]
    if stage != 0:
        model.embed = None
    if stage != num_stages - 1:
        model.norm = None
        model.head = None
    return model


def new_stage(rank, world, device):
    """This rank's stage: built on meta, cut, then allocated on ``device``."""
    with torch.device("meta"):
        model = keep_stage(Transformer(), rank, world)
    before = stored_bytes(model)
    model.to_empty(device=device)  # memory for this stage only, not yet initialised
    return model, before


def stored_bytes(model):
    """Bytes that the parameters take in memory (none on the meta device)."""
    return sum(p.nbytes for p in model.parameters() if not p.is_meta)


def parts(keys):
    """'embed, layers.0, layers.1' from the keys of a state dict."""
    return ", ".join(dict.fromkeys(
        ".".join(k.split(".")[:2 if k.startswith("layers.") else 1]) for k in keys)
    ) or "nothing"


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
        rank, world = dist.get_rank(), dist.get_world_size()
        model, before = new_stage(rank, world, device)
        model.init_weights()
        stage = PipelineStage(model, stage_index=rank, num_stages=world, device=device)
        schedule = Schedule1F1B(stage, n_microbatches=MICROBATCHES, loss_fn=loss_fn)
        optimizer = torch.optim.SGD(model.parameters(), lr=LR)
        x, y = (t.to(device) for t in make_batch())

        history = []
        for step in range(STEPS):
            optimizer.zero_grad()
            losses = []
            inputs = (x,) if rank == 0 else ()  # the first stage feeds the tokens
            if rank == world - 1:  # the last: targets, and keep no outputs (below)
                schedule.step(*inputs, target=y, losses=losses, return_outputs=False)
            else:
                schedule.step(*inputs)
            if step == 0:
                first_grads = {n: p.grad.cpu() for n, p in model.named_parameters()}
            optimizer.step()
            loss = torch.zeros((), device=device)
            if losses:  # on the last stage: one loss per micro-batch
                loss = torch.stack(losses).mean()
            dist.broadcast(loss, src=world - 1)
            history.append(loss.item())
            if rank == 0:
                print(f"step {step}: loss {loss.item():.6f}")

        # Rank 0 joins the stages' state dicts into one checkpoint of the whole model.
        trained = {k: v.cpu() for k, v in model.state_dict().items()}
        everyone = [None] * world
        report = (before, stored_bytes(model), trained, first_grads)
        dist.all_gather_object(everyone, report)
        if rank == 0:
            full, grads = {}, {}
            for r, (before_r, after_r, state, stage_grads) in enumerate(everyone):
                print(f"stage {r}: {parts(state)}; {len(state)} tensors; "
                      f"{before_r} bytes, {after_r} after to_empty")
                full.update(state)
                grads.update(stage_grads)
            torch.save({"model": full, "first_grads": grads, "losses": history},
                       "pipeline_split.pt")
            print(f"saved pipeline_split.pt: the whole model, {len(full)} tensors")
        dist.barrier(device_ids=[device.index] if device.type == "cuda" else None)

        # Every rank loads its part of the whole model's checkpoint into a new stage.
        checkpoint = torch.load("pipeline_split.pt", weights_only=True)["model"]
        fresh, _ = new_stage(rank, world, device)
        mine = fresh.state_dict().keys()  # the names of this stage's tensors
        fresh.load_state_dict({k: v for k, v in checkpoint.items() if k in mine})
        same = all(torch.equal(v.cpu(), trained[k])
                   for k, v in fresh.state_dict().items())
        left_out = [k for k in checkpoint if k not in mine]
        result = fresh.load_state_dict(checkpoint, strict=False)  # what it would report
        everyone = [None] * world
        dist.all_gather_object(everyone, (list(mine), same, left_out,
                                          result.unexpected_keys, result.missing_keys))
        if rank == 0:
            for r, (loaded, same, left_out, unexpected, missing) in enumerate(everyone):
                print(f"rank {r} loads        {parts(loaded)} ({len(loaded)}), "
                      f"as trained: {same}")
                print(f"rank {r} leaves out   {parts(left_out)} ({len(left_out)})")
                print(f"rank {r} strict=False {len(missing)} missing, unexpected "
                      f"{parts(unexpected)} ({len(unexpected)})")
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
