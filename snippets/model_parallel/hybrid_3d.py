"""3-D parallelism: pipeline stages, each tensor parallel and sharded with FSDP.

Run it with 8 processes, a 2 x 2 x 2 mesh:
  torchrun --standalone --nproc_per_node=8 hybrid_3d.py
The mesh is ("pp", "dp", "tp"): tensor parallelism on consecutive ranks, then
the data-parallel copies, then the pipeline stages. hybrid_3d.sbatch runs it on
2 nodes, one pipeline stage on each node.
--reshard-after-forward lets FSDP free the gathered weights after every
micro-batch's forward pass, to count the all-gathers that this costs.
"""

import argparse
import os
import socket
import sys
import time

import torch

NEEDS = "2.10"  # FSDP2 on CPUs: 2.6 lacks what it needs, 2.8 sums gradients
if torch.__version__ < f"{NEEDS}.0a0":  # NVIDIA's 2.N.0a0 builds count as 2.N
    print(f"this script needs PyTorch >= {NEEDS} (found {torch.__version__})",
          file=sys.stderr)
    sys.exit(2)

import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)
from torch.utils._python_dispatch import TorchDispatchMode

DIM, HEADS, LAYERS = 16, 8, 2
SEQUENCES, MICROBATCHES = 8, 2
STEPS = 3


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.head_dim = DIM // HEADS
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(DIM, DIM) for _ in range(4))

    def forward(self, x):
        batch, seq, _ = x.shape
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
    def __init__(self):
        super().__init__()
        self.attn_norm, self.attn = nn.LayerNorm(DIM), Attention()
        self.mlp_norm, self.mlp = nn.LayerNorm(DIM), MLP()

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(8, DIM)
        # A ModuleDict keeps the blocks' names when a stage deletes the others.
        self.layers = nn.ModuleDict({str(i): Block() for i in range(LAYERS)})
        self.head = nn.Linear(DIM, 1)

    def forward(self, x):
        if self.embed is not None:  # the first stage only
            x = self.embed(x)
        for block in self.layers.values():
            x = block(x)
        if self.head is not None:  # the last stage only
            x = self.head(x)
        return x


def build_stage(pp, stages):
    """The whole model, the same on every rank, cut down to pipeline stage ``pp``."""
    torch.manual_seed(0)
    model = Net()
    per_stage = LAYERS // stages
    for i in range(LAYERS):
        if i // per_stage != pp:
            del model.layers[str(i)]
    if pp > 0:
        model.embed = None
    if pp < stages - 1:
        model.head = None
    return model


def tp_plan(stage):
    """The tensor-parallel plan of hybrid_2d.py, for the blocks this stage holds."""
    plan = {}
    for name in stage.layers:
        plan |= {f"layers.{name}.attn.wq": ColwiseParallel(),
                 f"layers.{name}.attn.wk": ColwiseParallel(),
                 f"layers.{name}.attn.wv": ColwiseParallel(),
                 f"layers.{name}.attn.wo": RowwiseParallel(),
                 f"layers.{name}.mlp.up": ColwiseParallel(),
                 f"layers.{name}.mlp.down": RowwiseParallel()}
    return plan


def make_batch():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(SEQUENCES, 8, 8, generator=g)  # 8 sequences of 8 tokens
    y = torch.randn(SEQUENCES, 8, 1, generator=g)
    return x, y


class AllGathers(TorchDispatchMode):
    """Counts FSDP's all-gathers while it is active (tensor parallelism's collectives
    and the pipeline's sends are other operations)."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "c10d" and func._opname in ("allgather_",
                                                          "_allgather_base_"):
            self.count += 1
        return func(*args, **(kwargs or {}))


def full(tensor):
    """The whole tensor, gathered from its pieces (every rank of the stage calls it)."""
    return (tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor).cpu()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--pp", type=int, default=2, help="pipeline stages")
    parser.add_argument("--dp", type=int, default=2, help="data-parallel size (FSDP)")
    parser.add_argument("--tp", type=int, default=2, help="tensor-parallel size")
    parser.add_argument("--reshard-after-forward", action="store_true",
                        help="free the gathered weights after each forward pass")
    args = parser.parse_args()
    world = int(os.environ["WORLD_SIZE"])  # the sizes must fit the processes, the model
    if args.pp * args.dp * args.tp != world:  # and the batch: stop with one line if not
        parser.error(f"--pp x --dp x --tp is {args.pp * args.dp * args.tp}, "
                     f"but torchrun started {world} processes")
    if LAYERS % args.pp or HEADS % args.tp or SEQUENCES % (args.dp * MICROBATCHES):
        parser.error(f"--pp must divide {LAYERS} blocks, --tp {HEADS} heads, and "
                     f"--dp x {MICROBATCHES} micro-batches {SEQUENCES} sequences")
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    dist.init_process_group(backend)
    try:
        rank = dist.get_rank()
        # The last dimension varies fastest: a tensor-parallel group is consecutive
        # ranks, on one node; a pipeline stage is a block of dp x tp ranks.
        mesh = init_device_mesh(device.type, (args.pp, args.dp, args.tp),
                                mesh_dim_names=("pp", "dp", "tp"))
        pp, dp, tp = (mesh[name].get_local_rank() for name in ("pp", "dp", "tp"))
        first, last = pp == 0, pp == args.pp - 1

        # 1. Keep this rank's stage, 2. split its matrices along "tp",
        # 3. shard the pieces along "dp". Under a pipeline, FSDP keeps the gathered
        # weights from one micro-batch to the next: reshard_after_forward=False.
        stage_module = build_stage(pp, args.pp).to(device)
        parallelize_module(stage_module, mesh["tp"], tp_plan(stage_module))
        reshard = args.reshard_after_forward
        for block in stage_module.layers.values():
            fully_shard(block, mesh=mesh["dp"], reshard_after_forward=reshard)
        fully_shard(stage_module, mesh=mesh["dp"], reshard_after_forward=reshard)

        # 4. The pipeline: stages talk within the "pp" group, a micro-batch at a time.
        per_micro = SEQUENCES // args.dp // MICROBATCHES  # sequences per micro-batch
        # Example tensors give the shapes of what a stage receives and sends; with
        # requires_grad=True, gradients flow back between the stages.
        example_in = torch.zeros(per_micro, 8, 8 if first else DIM, device=device,
                                 requires_grad=True)
        example_out = torch.zeros(per_micro, 8, 1 if last else DIM, device=device,
                                  requires_grad=True)
        stage = PipelineStage(stage_module, pp, args.pp, device,
                              input_args=example_in, output_args=example_out,
                              group=mesh["pp"].get_group())
        schedule = ScheduleGPipe(stage, n_microbatches=MICROBATCHES, loss_fn=F.mse_loss)
        optimizer = torch.optim.SGD(stage_module.parameters(), lr=0.1)

        # Each copy trains on its own share of the batch, split by "dp" only.
        x, y = make_batch()
        share = SEQUENCES // args.dp
        x, y = (t[dp * share:(dp + 1) * share].to(device) for t in (x, y))

        history, gathers = [], []
        for step in range(STEPS):
            optimizer.zero_grad()
            losses = []  # filled on the last stage: one loss per micro-batch
            inputs = (x,) if first else ()
            targets = {"target": y, "losses": losses} if last else {}
            with AllGathers() as counter:
                schedule.step(*inputs, **targets)
            gathers.append(counter.count)
            if step == 0:  # keep the first gradients, to compare with one process
                first_grads = {n: full(p.grad)
                               for n, p in stage_module.named_parameters()}
            optimizer.step()
            # Each rank of the last stage holds the mean loss of its micro-batches.
            loss = torch.zeros((), device=device)
            if losses:
                loss = torch.stack(losses).mean()
            dist.all_reduce(loss)  # the sum over the last stage's dp x tp ranks
            loss /= args.dp * args.tp  # the mean of the copies' losses
            history.append(loss.item())
            if rank == 0:
                print(f"step {step}: loss {loss.item():.6f} "
                      f"(mean over all {SEQUENCES} sequences)")

        wq = next(iter(stage_module.layers.values())).attn.wq.weight
        node = os.environ.get("SLURMD_NODENAME", socket.gethostname())  # Slurm's name
        state = {name: full(value) for name, value in stage_module.state_dict().items()}
        me = dict(rank=rank, pp=pp, dp=dp, tp=tp, node=node,
                  sequences=f"{dp * share}-{(dp + 1) * share - 1}",
                  wq=tuple(wq.to_local().shape), gathers=gathers[-1],
                  holds=["embed"] * first + [f"layers.{n}" for n in stage_module.layers]
                  + ["head"] * last,
                  state=state, first_grads=first_grads)
        everyone = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, me)
        if rank == 0:
            print(f"mesh {tuple(mesh.shape)} {mesh.mesh_dim_names}; {MICROBATCHES} "
                  f"micro-batches of {per_micro} sequences; "
                  f"reshard_after_forward={reshard}")
            print("rank  pp  dp  tp  node  sequences  wq on this rank  "
                  "FSDP all-gathers in a step")
            for r in everyone:
                print(f"{r['rank']:>4}  {r['pp']:>2}  {r['dp']:>2}  {r['tp']:>2}  "
                      f"{r['node']:>4}  {r['sequences']:>9}  "
                      f"{r['wq'][0]:>4} x {r['wq'][1]:<8}  {r['gathers']}")
            for s in range(args.pp):
                holds = next(r["holds"] for r in everyone if r["pp"] == s)
                print(f"stage {s} holds: {', '.join(holds)}")
            model, grads = {}, {}
            for r in everyone:  # the stages' pieces make the whole model
                model |= r["state"]
                grads |= r["first_grads"]
            torch.save({"model": model, "first_grads": grads, "losses": history},
                       "hybrid_3d.pt")
            print("saved hybrid_3d.pt")
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
