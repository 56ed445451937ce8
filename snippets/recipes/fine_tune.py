"""Fine-tune a model in the Hugging Face layout that is too large for one GPU.

  python make_checkpoint.py base                 # stands in for the released weights
  torchrun --standalone --nproc_per_node=2 fine_tune.py base tuned
  torchrun --standalone --nproc_per_node=4 fine_tune.py base tuned --replicate 2
  torchrun --standalone --nproc_per_node=2 fine_tune.py base tuned --lora 8

Every rank builds the model on the meta device, shards it with FSDP2, and reads
from the .safetensors files only the rows of each tensor that its shards hold.
It trains a few steps on a stand-in task (sequences that count upwards), then
rank 0 writes the weights to a new folder in the same layout, gathering one
tensor at a time. --replicate R: HSDP, R copies of the model, each sharded over
world_size / R ranks. --lora RANK: the weights stay frozen, in bfloat16, and
only low-rank adapters train; the saved weights have the adapters merged in.
"""

import argparse
import datetime
import json
import math
import os
import shutil
import sys
import time
import weakref

import torch

NEEDS = "2.10"  # FSDP2 on CPUs: 2.6 lacks what it needs, 2.8 sums gradients
if torch.__version__ < f"{NEEDS}.0a0":  # NVIDIA's 2.N.0a0 builds count as 2.N
    print(f"this script needs PyTorch >= {NEEDS} (found {torch.__version__})",
          file=sys.stderr)
    sys.exit(2)

import torch.distributed as dist
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary

STEPS, GLOBAL_BATCH, SEQUENCE, LR = 6, 16, 32, 3e-3
LORA_ALPHA = 16  # the adapters' output is scaled by alpha / rank
INDEX = "model.safetensors.index.json"
WEIGHTS = (".safetensors", ".index.json", ".bin", ".pt", ".pth")  # save() writes these


class Linear(nn.Linear):
    """nn.Linear without bias, and with an optional low-rank adapter:
    y = x W^T + scale * x A^T B^T, where A is rank x in and B is out x rank."""

    def __init__(self, in_features, out_features):
        super().__init__(in_features, out_features, bias=False)
        self.lora_a = self.lora_b = None

    def add_adapter(self, rank):  # initialised once allocated: see build()
        self.lora_a = nn.Parameter(torch.empty(rank, self.in_features))
        self.lora_b = nn.Parameter(torch.empty(self.out_features, rank))
        self.scale = LORA_ALPHA / rank

    def forward(self, x):
        y = super().forward(x)
        if self.lora_a is not None:
            y = y + self.scale * F.linear(F.linear(x, self.lora_a), self.lora_b)
        return y


class Attention(nn.Module):  # causal, without position encoding, to stay short
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (
            Linear(hidden, hidden) for _ in range(4))

    def forward(self, x):
        b, t, h = x.shape
        q, k, v = (proj(x).view(b, t, self.heads, -1).transpose(1, 2)
                   for proj in (self.q_proj, self.k_proj, self.v_proj))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, h))


class MLP(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.gate_proj = Linear(hidden, intermediate)
        self.up_proj = Linear(hidden, intermediate)
        self.down_proj = Linear(intermediate, hidden)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = nn.RMSNorm(c["hidden_size"], eps=c["rms_norm_eps"])
        self.self_attn = Attention(c["hidden_size"], c["num_attention_heads"])
        self.post_attention_layernorm = nn.RMSNorm(c["hidden_size"],
                                                   eps=c["rms_norm_eps"])
        self.mlp = MLP(c["hidden_size"], c["intermediate_size"])

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class Decoder(nn.Module):
    """Its parameters have the names and shapes of the tensors in the files."""

    def __init__(self, c):
        super().__init__()
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.model.layers = nn.ModuleList(
            Layer(c) for _ in range(c["num_hidden_layers"]))
        self.model.norm = nn.RMSNorm(c["hidden_size"], eps=c["rms_norm_eps"])
        self.lm_head = Linear(c["hidden_size"], c["vocab_size"])

    def forward(self, tokens):
        x = self.model.embed_tokens(tokens)
        for layer in self.model.layers:
            x = layer(x)
        return self.lm_head(self.model.norm(x))


def batch(step, vocab, rank=0, world_size=1):
    """This rank's rows of the step's batch: sequences counting upwards (mod vocab)."""
    g = torch.Generator().manual_seed(step)
    starts = torch.randint(vocab, (GLOBAL_BATCH, 1), generator=g)
    tokens = (starts + torch.arange(SEQUENCE + 1)) % vocab
    rows = tokens.chunk(world_size)[rank]
    return rows[:, :-1], rows[:, 1:]  # predict each next token


class PeakBytes(TorchDispatchMode):
    """Bytes of the tensors that PyTorch operations create while it is active, until
    they are freed; ``peak`` is the most at any moment. For CPU-only machines: on
    GPUs, torch.cuda.max_memory_allocated() counts the same for the whole process."""

    def __init__(self):
        super().__init__()
        self.live = self.peak = 0
        self.seen = WeakIdKeyDictionary()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in self.tensors((args, kwargs))}
        for t in self.tensors(out):
            if t.untyped_storage().data_ptr() not in inputs:  # not a view, not in place
                self.track(t, t.untyped_storage().nbytes())
        return out

    def track(self, t, nbytes):
        """Count nbytes until t's memory is freed. For rows that safetensors reads from
        a file, t is a view of the mapped file: count the rows, the bytes read."""
        storage = t.untyped_storage()
        if storage not in self.seen:
            self.seen[storage] = True
            self.live += nbytes
            self.peak = max(self.peak, self.live)
            weakref.finalize(storage, self._free, nbytes)

    @staticmethod
    def tensors(tree):
        for t in tree_flatten(tree)[0]:
            if isinstance(t, DTensor):
                t = t.to_local()  # the part this rank stores
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                yield t

    def _free(self, nbytes):
        self.live -= nbytes


def local(t):
    return t.to_local() if isinstance(t, DTensor) else t


def shard_rows(param):
    """The rows [start, stop) of the full tensor that this rank's shard holds. FSDP2
    cuts dimension 0 as torch.chunk does: equal chunks, the last ones shorter."""
    start, stop = 0, param.shape[0]
    for dim, placement in enumerate(param.placements):  # (Shard(0),) or HSDP's
        if placement.is_shard(0):                        # (Replicate(), Shard(0))
            size = math.ceil((stop - start) / param.device_mesh.size(dim))
            first = min(start + param.device_mesh.get_local_rank(dim) * size, stop)
            start, stop = first, min(first + size, stop)
    assert stop - start == param.to_local().shape[0]
    return start, stop


def build(config, device, mesh, lora_rank):
    """The model on meta (no memory), sharded, then this rank's shards allocated."""
    with torch.device("meta"):
        model = Decoder(config)
        if lora_rank:
            model.to(torch.bfloat16)  # frozen: 2 bytes per weight, as in the files
            model.requires_grad_(False)
            for module in model.model.layers.modules():
                if isinstance(module, Linear):
                    module.add_adapter(lora_rank)  # float32, trainable
    policy = MixedPrecisionPolicy()  # compute in the weights' dtype: float32
    if lora_rank:
        # gather everything as bfloat16; reduce the adapters' gradients in float32
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                      reduce_dtype=torch.float32)
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    model.to_empty(device=device)  # this rank's shards, uninitialised
    # the adapters: A as nn.Linear initialises its weight, B zero, so training starts
    # from the weights as they are; the same A at any world size (each rank draws A
    # whole: it is small). The weights are read from the files by load().
    g = torch.Generator().manual_seed(0)
    for name, param in model.named_parameters():
        if ".lora_" in name:
            full = torch.zeros(param.shape)
            if name.endswith(".lora_a"):
                nn.init.kaiming_uniform_(full, a=math.sqrt(5), generator=g)
            start, stop = shard_rows(param)
            with torch.no_grad():
                param.to_local().copy_(full[start:stop])
    return model


def load(model, folder, counter):
    """Copy into every shard the rows of its tensor, read from the files."""
    with open(os.path.join(folder, INDEX)) as f:
        weight_map = json.load(f)["weight_map"]
    params = dict(model.named_parameters())
    missing = [n for n in params if n not in weight_map and ".lora_" not in n]
    unknown = [n for n in weight_map if n not in params]
    if missing or unknown:
        raise KeyError(f"not in the files: {missing}; not in the model: {unknown}")
    for filename in sorted(set(weight_map.values())):
        with safe_open(os.path.join(folder, filename), framework="pt") as f:
            for name in f.keys():
                param, full = params[name], f.get_slice(name)
                assert full.get_shape() == list(param.shape), name
                start, stop = shard_rows(param)
                rows = full[start:stop]  # reads these rows of the file only
                counter.track(rows, rows.nbytes)
                with torch.no_grad():
                    param.to_local().copy_(rows)  # and converts to the param's dtype
                del rows  # one tensor's rows at a time


def max_difference(model, folder):
    """Rank 0: the largest difference between the loaded weights and the files,
    gathering one tensor at a time (full_tensor() is a collective: every rank calls)."""
    with open(os.path.join(folder, INDEX)) as f:
        weight_map = json.load(f)["weight_map"]
    worst = 0.0
    for name, param in model.named_parameters():
        if name in weight_map:
            whole = param.full_tensor().cpu()
            if dist.get_rank() == 0:
                with safe_open(os.path.join(folder, weight_map[name]), "pt") as f:
                    expected = f.get_tensor(name)
                difference = (whole.float() - expected.float()).abs().max().item()
                worst = max(worst, difference)
    return worst


def save(model, base, out, lora_rank):
    """Rank 0 writes the weights in the layout of ``base``: file by file, gathering one
    tensor at a time; it holds at most one file's tensors. Adapters are merged in."""
    rank = dist.get_rank()
    with open(os.path.join(base, INDEX)) as f:
        weight_map = json.load(f)["weight_map"]
    with open(os.path.join(base, "config.json")) as f:
        config = json.load(f)
    dtype = config.get("torch_dtype", config.get("dtype"))  # newer configs: "dtype"
    if rank == 0:
        os.makedirs(out, exist_ok=True)
    params, adapters, total = dict(model.named_parameters()), {}, 0
    for filename in sorted(set(weight_map.values())):
        with safe_open(os.path.join(base, filename), framework="pt") as f:
            released = {n: f.get_slice(n)[:0].dtype for n in f.keys()}  # reads no data
        part = {}
        for name in (n for n in weight_map if weight_map[n] == filename):
            weight = params[name].full_tensor().float()
            module = model.get_submodule(name.rsplit(".", 1)[0])
            if isinstance(module, Linear) and module.lora_a is not None:
                a, b = module.lora_a.full_tensor(), module.lora_b.full_tensor()
                weight = weight + module.scale * (b @ a)  # merged: W + scale B A
                adapters.update({name[:-len("weight")] + "lora_a": a.cpu(),
                                 name[:-len("weight")] + "lora_b": b.cpu()})
            if rank == 0:
                part[name] = weight.to(getattr(torch, dtype) if dtype else
                                       released[name]).cpu()
                total += part[name].nbytes
        if rank == 0:
            path = os.path.join(out, filename)
            save_file(part, path + ".tmp", metadata={"format": "pt"})
            os.replace(path + ".tmp", path)  # never a half-written file
    if rank == 0:
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        with open(os.path.join(out, INDEX + ".tmp"), "w") as f:
            json.dump(index, f, indent=2)
        os.replace(os.path.join(out, INDEX + ".tmp"), os.path.join(out, INDEX))
        for other in os.listdir(base):  # config.json, the tokeniser's files...
            path = os.path.join(base, other)
            if os.path.isfile(path) and not other.endswith(WEIGHTS):
                shutil.copy(path, os.path.join(out, other + ".tmp"))
                os.replace(os.path.join(out, other + ".tmp"), os.path.join(out, other))
        if lora_rank:  # the adapters alone, too: small, to keep or to share
            save_file(adapters, os.path.join(out, "adapter.safetensors.tmp"))
            os.replace(os.path.join(out, "adapter.safetensors.tmp"),
                       os.path.join(out, "adapter.safetensors"))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("base", help="folder of the model to start from")
    parser.add_argument("out", help="folder to write the fine-tuned model to")
    parser.add_argument("--replicate", type=int, default=1,
                        help="HSDP: copies of the model, each sharded over "
                             "world_size / REPLICATE ranks (default 1: FSDP)")
    parser.add_argument("--lora", type=int, default=0, metavar="RANK",
                        help="train low-rank adapters of this rank only")
    args = parser.parse_args()
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                            timeout=datetime.timedelta(minutes=10))
    try:
        rank, world_size = dist.get_rank(), dist.get_world_size()
        shards = world_size // args.replicate  # ranks that share one copy of the model
        if shards * args.replicate != world_size or GLOBAL_BATCH % world_size:
            raise SystemExit(f"--replicate {args.replicate} must divide the "
                             f"{world_size} ranks, and they the {GLOBAL_BATCH} "
                             "sequences of a step")
        mesh = init_device_mesh(device.type, (args.replicate, shards),
                                mesh_dim_names=("replicate", "shard"))
        with open(os.path.join(args.base, "config.json")) as f:
            config = json.load(f)

        with PeakBytes() as counter:
            model = build(config, device, mesh, args.lora)
            load(model, args.base, counter)
        peak = counter.peak
        if device.type == "cuda":
            peak = torch.cuda.max_memory_allocated(device)
        weights = sum(p.numel() * p.element_size() for p in model.parameters())
        largest = max(p.numel() * p.element_size() for p in model.parameters())
        peaks = [None] * world_size
        dist.all_gather_object(peaks, peak)
        worst = max_difference(model, args.base)
        if rank == 0:
            print(f"{world_size} ranks: {args.replicate} x {shards} "
                  "(replicate x shard)")
            print(f"weights of the whole model: {weights / 2**10:.1f} KiB, "
                  f"largest tensor {largest / 2**10:.1f} KiB")
            print("Peak memory each rank held while building and loading:")
            for r, held in enumerate(peaks):
                print(f"  rank {r}: {held / 2**10:.1f} KiB = {held / weights:.3f} "
                      f"of the whole model's weights (1/{shards} = {1 / shards:.3f})")
            print(f"loaded weights differ from the files by at most {worst:.1e}")

        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.Adam(trainable, lr=LR)
        for step in range(STEPS):
            inputs, targets = batch(step, config["vocab_size"], rank, world_size)
            logits = model(inputs.to(device))
            loss = F.cross_entropy(logits.float().flatten(0, 1),
                                   targets.to(device).flatten())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            dist.all_reduce(loss := loss.detach(), op=dist.ReduceOp.AVG)
            if rank == 0:
                print(f"step {step}: loss {loss.item():.4f}")

        # what each rank holds now, from the tensors themselves (scalars left out)
        held = {"frozen": 0, "trainable": 0}
        for p in model.parameters():
            state = [t for t in optimizer.state.get(p, {}).values() if t.dim() > 0]
            grad = [p.grad] if p.grad is not None else []
            key = "trainable" if p.requires_grad else "frozen"
            held[key] += sum(local(t).nbytes for t in [p] + grad + state)
        everyone = [None] * world_size
        dist.all_gather_object(everyone, held)
        if rank == 0:  # one copy of the model: all ranks, over the replicas
            total = {key: sum(h[key] for h in everyone) / args.replicate
                     for key in held}
            count = {"trainable": sum(p.numel() for p in trainable)}
            everything = sum(p.numel() for p in model.parameters())
            count["frozen"] = everything - count["trainable"]
            released = count["frozen"] if args.lora else count["trainable"]
            print(f"trainable parameters: {count['trainable']:,} "
                  f"({count['trainable'] / released:.1%} of the model's {released:,})")
            print("bytes held per parameter (weight, gradient, Adam's two moments):")
            for key in ("frozen", "trainable"):
                if count[key]:
                    print(f"  {key}: {total[key] / count[key]:.2f}")
            print(f"  per parameter of the model: {sum(total.values()) / released:.2f}")
        save(model, args.base, args.out, args.lora)
        if rank == 0:
            print(f"saved {args.out}")
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
