"""Train with checkpoints, so that torchrun can restart the job after a failure.

  export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1   # restarts need it: see the page
  torchrun --standalone --nproc_per_node=4 --max-restarts=3 elastic.py

When a worker fails, torchrun stops all workers and starts them all again, at most
--max-restarts times; every start resumes from the last checkpoint. To watch it
happen, let the last rank crash once, at step 25:

  torchrun --standalone --nproc_per_node=2 --max-restarts=1 elastic.py --fail-at-step 25
"""

import argparse
import itertools
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def check_restarts_are_safe():
    """Refuse to run where a restart would reuse the failed attempt's store.

    With --max-restarts, torchrun 2.13 keeps one store for all attempts unless
    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, and the restarted workers can then
    find the dead workers' addresses in it and fail or hang.
    """
    restarts = int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0"))
    if restarts > 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        raise RuntimeError("restarts need TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 and "
                           "the c10d rendezvous (--standalone or --rdzv-backend=c10d)")


def make_dataset():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(512, 8, generator=g)
    y = x @ torch.randn(8, 1, generator=g) + 0.1 * torch.randn(512, 1, generator=g)
    return TensorDataset(x, y)


def save_atomically(state, path):
    """Write a temporary file, then rename it: a crash never leaves half a file."""
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--checkpoint", type=Path, default=Path("checkpoint.pt"))
    parser.add_argument("--fail-at-step", type=int, default=None,
                        help="the last rank crashes at this step on the first start")
    args = parser.parse_args()
    check_restarts_are_safe()
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
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
        rank, world_size = dist.get_rank(), dist.get_world_size()
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        step = 0
        if args.checkpoint.exists():  # all ranks: DDP copies weights, not the rest
            state = torch.load(args.checkpoint, map_location=device, weights_only=True)
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            step = state["step"]
        if rank == 0:
            how = "from scratch"
            if step:
                how = f"resuming from the checkpoint of step {step}"
            print(f"restart count {restart}: {how}")
        ddp = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
        dataset = make_dataset()
        sampler = DistributedSampler(dataset, shuffle=True, seed=0)
        loader = DataLoader(dataset, batch_size=32, sampler=sampler)
        while step < args.steps:
            epoch, done = divmod(step, len(loader))
            sampler.set_epoch(epoch)
            for x, y in itertools.islice(loader, done, None):  # skip batches done
                crash = step == args.fail_at_step and restart == 0
                if crash and rank == world_size - 1:
                    raise RuntimeError(f"simulated crash of rank {rank} at step {step}")
                x, y = x.to(device), y.to(device)
                loss = F.mse_loss(ddp(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                step += 1
                last = step == args.steps
                if rank == 0 and (step % args.checkpoint_every == 0 or last):
                    state = {"model": model.state_dict(),
                             "optimizer": optimizer.state_dict(), "step": step}
                    save_atomically(state, args.checkpoint)
                    print(f"step {step}: loss {loss.item():.4f}, checkpoint saved")
                if last:
                    break
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
