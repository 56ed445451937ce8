"""Pipeline parallelism by hand: every rank keeps one slice of the model, a stage.

Run it with one process per stage, for example two:
  torchrun --standalone --nproc_per_node=2 pipeline_manual.py
--split says where stages begin: --split 2 4 makes three stages, starting at
layers 0, 2 and 4, for three processes.
"""

import argparse
import os
import sys
import time

import torch

NEEDS = "2.8"  # before 2.8 a schedule sums the micro-batches' gradients
if torch.__version__ < f"{NEEDS}.0a0":  # NVIDIA's 2.N.0a0 builds count as 2.N
    print(f"this script needs PyTorch >= {NEEDS} (found {torch.__version__})",
          file=sys.stderr)
    sys.exit(2)

import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

MICROBATCHES = 4
STEPS = 3


def build_model():
    torch.manual_seed(0)  # every rank builds the same model, then keeps its own slice
    return nn.Sequential(
        nn.Linear(16, 32), nn.Tanh(),  # layers 0 and 1
        nn.Linear(32, 32), nn.Tanh(),  # layers 2 and 3
        nn.Linear(32, 32), nn.Tanh(),  # layers 4 and 5
        nn.Linear(32, 1),              # layer 6
    )


def make_batch():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(32, 16, generator=g)
    y = torch.sin(x.sum(dim=1, keepdim=True))
    return x, y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--split", type=int, nargs="*", default=[4],
                        help="the first layer of each stage after the first")
    args = parser.parse_args()
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
        rank, world = dist.get_rank(), dist.get_world_size()
        if len(args.split) + 1 != world:
            raise SystemExit(f"{len(args.split) + 1} stages need as many processes")
        bounds = [0, *args.split, None]
        # Slicing an nn.Sequential keeps the layer names: model[4:] has "4.weight"...
        part = build_model()[bounds[rank]:bounds[rank + 1]].to(device)
        stage = PipelineStage(part, stage_index=rank, num_stages=world, device=device)
        # The schedule cuts each batch into micro-batches; the last stage runs the loss.
        schedule = ScheduleGPipe(stage, n_microbatches=MICROBATCHES,
                                 loss_fn=nn.functional.mse_loss)
        optimizer = torch.optim.SGD(part.parameters(), lr=0.1)
        x, y = make_batch()
        x, y = x.to(device), y.to(device)

        history = []
        for step in range(STEPS):
            optimizer.zero_grad()
            losses = []  # filled on the last stage: one loss per micro-batch
            if rank == 0:
                schedule.step(x)  # the first stage feeds the inputs
            elif rank == world - 1:
                schedule.step(target=y, losses=losses)  # the last one gets the targets
            else:
                schedule.step()  # stages in between only pass activations on
            if step == 0:  # keep the first gradients, to compare with one process
                first_grads = {n: p.grad.cpu() for n, p in part.named_parameters()}
            optimizer.step()
            # The loss lives on the last stage: the mean over its micro-batches.
            loss = torch.zeros((), device=device)
            if losses:
                loss = torch.stack(losses).mean()
            dist.broadcast(loss, src=world - 1)
            history.append(loss.item())
            if rank == 0:
                print(f"step {step}: loss {loss.item():.6f}")

        # Gather every stage's slice on rank 0 and save the whole model.
        mine = ({k: v.cpu() for k, v in part.state_dict().items()}, first_grads)
        everyone = [None] * world
        dist.all_gather_object(everyone, mine)
        if rank == 0:
            model, grads = {}, {}
            for r, (state, stage_grads) in enumerate(everyone):
                print(f"stage {r} on rank {r} holds: {', '.join(state)}")
                model.update(state)
                grads.update(stage_grads)
            torch.save({"model": model, "first_grads": grads, "losses": history},
                       "pipeline_manual.pt")
            print("saved pipeline_manual.pt")
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
