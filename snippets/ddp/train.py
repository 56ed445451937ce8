"""Train a small classifier with DistributedDataParallel on handwritten digits.

Start one process per GPU with a launcher. The same file runs unchanged under
    torchrun --standalone --nproc_per_node=4 train.py --epochs 3
    srun python train.py               (the job script exports MASTER_ADDR, MASTER_PORT)
    mpirun -np 4 -x MASTER_ADDR -x MASTER_PORT python train.py
Each process uses one GPU and NCCL; without GPUs, the CPU and gloo.
"""

import argparse
import os
import socket
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32,
                        help="samples per step and process (a step uses this times "
                             "the number of processes)")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", default="checkpoint.pt",
                        help="saved after every epoch; resumed from if it exists")
    parser.add_argument("--max-steps", type=int,
                        help="save and stop after this many steps, as if out of time")
    parser.add_argument("--log-every", type=int, default=10,
                        help="print the loss every this many steps")
    parser.add_argument("--timeout", type=float, default=120,
                        help="seconds a process waits for the others, at start-up "
                             "and in every collective, before it fails")
    return parser.parse_args()


def launcher_env():
    """Rank, world size and local rank, from whichever launcher started us."""
    env = os.environ
    if "RANK" in env:  # torchrun (or set by hand)
        names = "RANK", "WORLD_SIZE", "LOCAL_RANK"
    elif "OMPI_COMM_WORLD_RANK" in env:  # Open MPI's mpirun, in a Slurm job or not
        names = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                 "OMPI_COMM_WORLD_LOCAL_RANK")
    elif "SLURM_STEP_ID" in env:  # a task of srun (srun runs its tasks in a job step)
        names = "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"
    elif "SLURM_JOB_ID" in env:  # the job script itself, where SLURM_PROCID is 0
        sys.exit("train.py: the job script ran it without a launcher; start it with "
                 "srun, torchrun or mpirun, for example: srun python train.py")
    else:
        sys.exit("train.py: no launcher set RANK, SLURM_PROCID or "
                 "OMPI_COMM_WORLD_RANK; start it with torchrun, srun or mpirun, for "
                 "one process: torchrun --standalone --nproc_per_node=1 train.py")
    missing = [name for name in names if name not in env]  # RANK set by hand, say
    if missing:
        sys.exit(f"train.py: {names[0]} is set but not {' or '.join(missing)}")
    return [int(env[name]) for name in names]


def setup(timeout):
    """Join the other processes; return this process's device."""
    rank, world_size, local_rank = launcher_env()
    missing = [name for name in ("MASTER_ADDR", "MASTER_PORT")
               if name not in os.environ]
    if missing:
        sys.exit(f"train.py: set {' and '.join(missing)} "
                 "to the host name of rank 0 and a free port")
    address, port = os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]
    try:
        socket.getaddrinfo(address, port)
    except socket.gaierror as error:  # fail now rather than retry until the timeout
        sys.exit(f"train.py: MASTER_ADDR={address} is not a host name "
                 f"this machine knows: {error.strerror}")
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)  # one GPU per process
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    try:
        dist.init_process_group(backend, rank=rank, world_size=world_size,
                                timeout=timedelta(seconds=timeout))
    except dist.DistError as error:  # port in use, a process that never came...
        sys.exit(f"train.py: rank {rank} could not join the others "
                 f"at {address}:{port}: {error}")
    return device


def make_datasets(train_size=1024):
    """scikit-learn's 1797 handwritten digits, 8 × 8 pixels (shipped inside the
    package: nothing to download). 1024 images to train on, the other 773 held out."""
    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16  # pixels 0-16 to 0-1
    y = torch.tensor(digits.target)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(1234))
    x, y = x[order], y[order]
    return (TensorDataset(x[:train_size], y[:train_size]),
            TensorDataset(x[train_size:], y[train_size:]))


def make_model(features=64, classes=10):
    return nn.Sequential(nn.Linear(features, 64), nn.ReLU(), nn.Linear(64, 64),
                         nn.ReLU(), nn.Linear(64, classes))


def accuracy(model, dataset, device):
    """The share of ``dataset`` that ``model`` classifies right."""
    x, y = (t.to(device) for t in dataset.tensors)
    with torch.no_grad():
        return (model(x).argmax(dim=1) == y).float().mean().item()


def save_checkpoint(path, model, optimizer, step):
    """Rank 0 writes the checkpoint; every process waits until it is complete."""
    if dist.get_rank() == 0:
        state = {"model": model.module.state_dict(),
                 "optimizer": optimizer.state_dict(), "step": step}
        torch.save(state, f"{path}.tmp")
        os.replace(f"{path}.tmp", path)  # atomic: never half a file
    # No process goes on, or ends, before the file is complete. With NCCL, the barrier
    # runs on this process's GPU (DDP's device_ids), not on a guessed one.
    dist.barrier(device_ids=model.device_ids)


def load_checkpoint(path, model, optimizer, device):
    """Load the checkpoint if there is one; return the number of steps done."""
    if not os.path.exists(path):
        return 0
    state = torch.load(path, map_location=device, weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return state["step"]


def check_replicas_agree(model):
    """Fail unless every process holds exactly the same parameters."""
    flat = torch.cat([p.detach().flatten() for p in model.parameters()]).double()
    checksum = torch.stack([flat.sum(), flat.square().sum()])
    everyone = [torch.empty_like(checksum) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, checksum)
    differ = [r for r, other in enumerate(everyone) if not torch.equal(other, checksum)]
    if differ:
        raise RuntimeError(f"the parameters of ranks {differ} differ from this rank's")
    if dist.get_rank() == 0:
        print(f"final parameters identical on all ranks (world size {len(everyone)})")


def train(args, device):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    dataset, held_out = make_datasets()  # the whole data set on every process...
    sampler = DistributedSampler(dataset, shuffle=True, seed=args.seed)  # ...a share
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler,
                        drop_last=True)
    model = make_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    step = load_checkpoint(args.checkpoint, model, optimizer, device)
    model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)

    steps_per_epoch = len(loader)
    total_steps = args.epochs * steps_per_epoch
    if rank == 0:
        print(f"world size {world_size} ({dist.get_backend()}, {device.type}): "
              f"{world_size} × {args.batch_size} = {world_size * args.batch_size} "
              f"samples per step, {steps_per_epoch} steps per epoch")
        if step:
            print(f"resumed from {args.checkpoint} at step {step}")
    start_epoch, done_in_epoch = divmod(step, steps_per_epoch)
    for epoch in range(start_epoch, args.epochs):
        sampler.set_epoch(epoch)  # a new shuffle, or every epoch repeats the first
        totals = torch.zeros(3, device=device)  # summed loss, correct answers, samples
        for i, (x, y) in enumerate(loader):
            if epoch == start_epoch and i < done_in_epoch:
                continue  # trained on before the checkpoint was saved
            x, y = x.to(device), y.to(device)
            logits = model(x)
            loss = nn.functional.cross_entropy(logits, y)
            optimizer.zero_grad()
            loss.backward()  # DDP averages the gradients of all processes meanwhile
            optimizer.step()
            step += 1
            totals[0] += loss.detach() * len(y)
            totals[1] += (logits.argmax(dim=1) == y).sum()
            totals[2] += len(y)

            if step % args.log_every == 0:
                average = loss.detach().clone()
                dist.all_reduce(average)  # the sum over all ranks, on every rank
                average /= world_size  # their mean
                if rank == 0:
                    print(f"epoch {epoch + 1}/{args.epochs}  "
                          f"step {step}/{total_steps}  loss {average.item():.4f}")
            if step == args.max_steps:
                save_checkpoint(args.checkpoint, model, optimizer, step)
                if rank == 0:
                    print(f"stopped after step {step} (--max-steps); "
                          "run again to resume")
                return
        dist.all_reduce(totals)  # sums over processes: metrics of all the data
        if rank == 0:
            loss_sum, correct, samples = totals.tolist()
            print(f"epoch {epoch + 1}/{args.epochs} done: "
                  f"loss {loss_sum / samples:.4f}, "
                  f"accuracy {correct / samples:.1%} on {samples:.0f} samples")
        save_checkpoint(args.checkpoint, model, optimizer, step)
    if rank == 0:  # the images no process trained on
        print(f"held-out accuracy {accuracy(model.module, held_out, device):.1%} "
              f"on {len(held_out)} images")
    check_replicas_agree(model)


def main():
    args = parse_args()
    device = setup(args.timeout)
    try:
        train(args, device)
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
