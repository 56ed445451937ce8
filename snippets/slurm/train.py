"""Train a small classifier with DistributedDataParallel, started by Slurm.

One process per GPU, started either by srun (one task per GPU) or by torchrun
(one torchrun per node). The job script exports MASTER_ADDR and MASTER_PORT
for srun; torchrun sets them itself. Each process uses one GPU and NCCL;
without GPUs, the CPU and gloo.

Checkpoints are saved after every epoch and resumed from. On SIGUSR1 every
process stops at the next step, rank 0 saves a checkpoint, and the script
exits: the job script then requeues the job, which resumes where it stopped.
A checkpoint records the model it holds; the script refuses to resume another.
"""

import argparse
import os
import signal
import socket
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


stop_requested = False  # set by SIGUSR1


def request_stop(signum, frame):
    global stop_requested
    stop_requested = True


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32,
                        help="samples per step and process")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hidden", type=int, default=64,
                        help="width of the hidden layers")
    parser.add_argument("--checkpoint", default="checkpoint.pt",
                        help="saved every epoch and on SIGUSR1, loaded if it exists")
    parser.add_argument("--log-every", type=int, default=10,
                        help="print the loss every this many steps")
    return parser.parse_args()


def launcher_env():
    """Rank, world size and local rank, from torchrun's or srun's variables."""
    env = os.environ
    if "RANK" in env:  # torchrun
        names = "RANK", "WORLD_SIZE", "LOCAL_RANK"
    elif "SLURM_STEP_ID" in env:  # a task of srun (srun runs its tasks in a job step)
        names = "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"
    else:  # no launcher, or the job script itself (its SLURM_PROCID is 0, always)
        sys.exit("train.py: no launcher started it; start it with srun or torchrun "
                 "(in a job script: srun python train.py)")
    return [int(env[name]) for name in names]


def setup():
    """Join the other processes; return this process's device."""
    rank, world_size, local_rank = launcher_env()
    missing = [name for name in ("MASTER_ADDR", "MASTER_PORT")
               if name not in os.environ]
    if missing:
        sys.exit(f"train.py: the job script must export {' and '.join(missing)}")
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)  # one GPU per process: the local rank
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    dist.init_process_group(backend, rank=rank, world_size=world_size,
                            timeout=timedelta(minutes=5))
    return device


def describe_placement(device):
    """Rank 0 prints which node each rank runs on."""
    node = os.environ.get("SLURMD_NODENAME", socket.gethostname())  # Slurm's name
    nodes = [None] * dist.get_world_size()
    dist.all_gather_object(nodes, node)
    if dist.get_rank() == 0:
        ranks_of = {}
        for rank, name in enumerate(nodes):
            ranks_of.setdefault(name, []).append(rank)
        where = ", ".join(
            f"ranks {ranks[0]}-{ranks[-1]} on {name}" if len(ranks) > 1
            else f"rank {ranks[0]} on {name}" for name, ranks in ranks_of.items())
        backend = dist.get_backend()
        print(f"world size {len(nodes)} ({backend} on {device.type}): {where}")


def make_dataset(n=1024, features=20, classes=4):
    """Random points, labelled by a fixed random linear "teacher"."""
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(n, features, generator=g)
    y = (x @ torch.randn(features, classes, generator=g)).argmax(dim=1)
    return TensorDataset(x, y)


def model_config(args, features=20, classes=4):
    """What a checkpoint records about the model that made it."""
    return {"script": "train.py", "features": features, "hidden": args.hidden,
            "classes": classes}


def make_model(hidden=64, features=20, classes=4):
    return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(),
                         nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, classes))


def save_checkpoint(path, model, optimizer, step, config, device):
    """Rank 0 writes the checkpoint; every process waits until it is complete."""
    if dist.get_rank() == 0:
        state = {"model": model.module.state_dict(), "config": config,
                 "optimizer": optimizer.state_dict(), "step": step}
        torch.save(state, f"{path}.tmp")
        os.replace(f"{path}.tmp", path)  # atomic: a kill while saving keeps the old one
    # With NCCL, the barrier runs on this process's GPU, not on a guessed one.
    dist.barrier(device_ids=[device.index] if device.type == "cuda" else None)


def describe(config):
    """E.g. "train.py's model (features 20, hidden 64, classes 4)"."""
    if not isinstance(config, dict) or "script" not in config:
        return "a model it does not describe"
    sizes = ", ".join(f"{key} {value}" for key, value in config.items()
                      if key != "script")
    return f"{config['script']}'s model ({sizes})"


def load_checkpoint(path, model, optimizer, config, device):
    """Load the checkpoint if there is one; return the number of steps already done."""
    if not os.path.exists(path):
        return 0
    state = torch.load(path, map_location=device, weights_only=True)
    if state.get("config") != config:  # another job's model: stop, do not train on
        message = (f"train.py: {path} holds {describe(state.get('config'))}, not "
                   f"{describe(config)}: give this job its own --checkpoint file, "
                   f"or delete {path} to start afresh")
        sys.exit(message if dist.get_rank() == 0 else 1)  # one line, from rank 0
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return state["step"]


def everyone_agrees_to_stop(device):
    """True once any process has received SIGUSR1: all stop at the same step."""
    flag = torch.tensor([float(stop_requested)], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return flag.item() > 0


def train(args, device):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    dataset = make_dataset()
    sampler = DistributedSampler(dataset, shuffle=True, seed=args.seed)  # rank's share
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler,
                        drop_last=True)
    model = make_model(args.hidden).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    config = model_config(args)
    step = load_checkpoint(args.checkpoint, model, optimizer, config, device)
    model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)

    steps_per_epoch = len(loader)
    total_steps = args.epochs * steps_per_epoch
    if rank == 0:
        print(f"{args.batch_size} samples per process and step, "
              f"{args.batch_size * world_size} per step, "
              f"{steps_per_epoch} steps per epoch")
        if step:
            print(f"resumed from {args.checkpoint} at step {step}")
    start_epoch, done_in_epoch = divmod(step, steps_per_epoch)
    for epoch in range(start_epoch, args.epochs):
        sampler.set_epoch(epoch)  # a new shuffle every epoch, the same on every rank
        for i, (x, y) in enumerate(loader):
            if epoch == start_epoch and i < done_in_epoch:
                continue  # trained on before the checkpoint was saved
            if everyone_agrees_to_stop(device):
                save_checkpoint(args.checkpoint, model, optimizer, step, config, device)
                if rank == 0:
                    print(f"SIGUSR1: saved {args.checkpoint} at step {step} "
                          "and stopped", flush=True)
                return
            x, y = x.to(device), y.to(device)
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()  # DDP averages the gradients of all processes
            optimizer.step()
            step += 1
            if step % args.log_every == 0:
                average = loss.detach().clone()
                dist.all_reduce(average)  # the sum over all ranks, on every rank
                average /= world_size  # their mean
                if rank == 0:  # flush: the output file shows it now, not at the end
                    print(f"epoch {epoch + 1}/{args.epochs}  "
                          f"step {step}/{total_steps}  loss {average.item():.4f}",
                          flush=True)
        save_checkpoint(args.checkpoint, model, optimizer, step, config, device)
    if rank == 0:
        print(f"done: {step} steps, final model in {args.checkpoint}")


def main():
    signal.signal(signal.SIGUSR1, request_stop)  # first: an early signal is not fatal
    args = parse_args()
    device = setup()
    try:
        describe_placement(device)
        train(args, device)
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
