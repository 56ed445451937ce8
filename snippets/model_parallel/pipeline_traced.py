"""Pipeline parallelism with a traced split: pipeline() cuts the model where you say.

Run it with one process per stage:
  torchrun --standalone --nproc_per_node=2 pipeline_traced.py
"""

import os
import sys
import time

import torch

NEEDS = "2.10"  # 2.8 and older cannot trace this model into stages
if torch.__version__ < f"{NEEDS}.0a0":  # NVIDIA's 2.N.0a0 builds count as 2.N
    print(f"this script needs PyTorch >= {NEEDS} (found {torch.__version__})",
          file=sys.stderr)
    sys.exit(2)

import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import Schedule1F1B, SplitPoint, pipeline

MICROBATCHES = 4
STEPS = 3


def build_model():
    torch.manual_seed(0)
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
        x, y = make_batch()
        # Trace the model with one example micro-batch; a new stage begins at layer 4.
        pipe = pipeline(build_model(), mb_args=(x.chunk(MICROBATCHES)[0],),
                        split_spec={"4": SplitPoint.BEGINNING})
        if pipe.num_stages != world:
            raise SystemExit(f"{pipe.num_stages} stages need as many processes")
        stage = pipe.build_stage(rank, device)  # this rank's slice, on its device
        part = stage.submod
        schedule = Schedule1F1B(stage, n_microbatches=MICROBATCHES,
                                loss_fn=nn.functional.mse_loss)
        optimizer = torch.optim.SGD(part.parameters(), lr=0.1)
        x, y = x.to(device), y.to(device)

        history = []
        for step in range(STEPS):
            optimizer.zero_grad()
            losses = []
            if rank == 0:
                schedule.step(x)
            elif rank == world - 1:
                schedule.step(target=y, losses=losses)
            else:
                schedule.step()
            if step == 0:  # keep the first gradients, to compare with one process
                first_grads = {n: p.grad.cpu() for n, p in part.named_parameters()}
            optimizer.step()
            loss = torch.zeros((), device=device)
            if losses:
                loss = torch.stack(losses).mean()
            dist.broadcast(loss, src=world - 1)
            history.append(loss.item())
            if rank == 0:
                print(f"step {step}: loss {loss.item():.6f}")

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
                       "pipeline_traced.pt")
            print("saved pipeline_traced.pt")
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
