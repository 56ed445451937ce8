"""horovod_train.py translated to DistributedDataParallel, line for line.

Start one process per GPU with torchrun (or srun/mpirun setting RANK, LOCAL_RANK...):
    torchrun --standalone --nproc_per_node=4 ddp_from_horovod.py              one node
    torchrun --nnodes=2 --nproc_per_node=4 --rdzv_backend=c10d \\
        --rdzv_endpoint=node1:29500 --rdzv_id=$SLURM_JOB_ID ddp_from_horovod.py
Each process uses one GPU and NCCL; without GPUs, the CPU and gloo.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument(
        "--batch-size", type=int, default=16, help="samples per step and process"
    )
    parser.add_argument(
        "--lr", type=float, default=0.025, help="learning rate of one process"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--save", default="model.pt", help="rank 0 saves the model here"
    )
    return parser.parse_args()


def make_dataset(n=1024, features=20, classes=4):
    """Random points, labelled by a fixed random linear "teacher"."""
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(n, features, generator=g)
    y = (x @ torch.randn(features, classes, generator=g)).argmax(dim=1)
    return TensorDataset(x, y)


def make_model(features=20, classes=4):
    return nn.Sequential(nn.Linear(features, 64), nn.ReLU(), nn.Linear(64, classes))


def check_replicas_agree(model):
    """Fail unless every process holds exactly the same parameters."""
    flat = torch.cat([p.detach().flatten() for p in model.parameters()]).double()
    checksum = torch.stack([flat.sum(), flat.square().sum()])
    everyone = [torch.empty_like(checksum) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, checksum)  # Horovod: hvd.allgather
    if not all(torch.equal(other, checksum) for other in everyone):
        raise RuntimeError(f"parameters differ between processes: {everyone}")
    if dist.get_rank() == 0:
        print(f"final parameters identical on all {dist.get_world_size()} processes")


def main():
    args = parse_args()
    local_rank = int(os.environ["LOCAL_RANK"])  # Horovod: hvd.local_rank()
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)  # pin one GPU per process, by local rank
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    # Horovod: hvd.init()
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    try:
        # Horovod: hvd.rank(), hvd.size()
        rank, world_size = dist.get_rank(), dist.get_world_size()
        if rank == 0:
            print(
                f"{world_size} processes, {dist.get_backend()} backend, "
                f"on {device.type}"
            )

        torch.manual_seed(args.seed)
        dataset = make_dataset()
        # each process reads its share
        sampler = DistributedSampler(
            dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=args.seed
        )
        loader = DataLoader(
            dataset, batch_size=args.batch_size, sampler=sampler, drop_last=True
        )
        model = make_model().to(device)
        optimizer = torch.optim.SGD(
            model.parameters(), lr=args.lr * world_size, momentum=0.9
        )

        # Horovod: broadcast_parameters + DistributedOptimizer. DDP copies rank 0's
        # parameters when it wraps the model, and averages the gradients during
        # backward(). broadcast_optimizer_state has no counterpart: the optimiser state
        # starts empty on every process (to resume, every process loads the checkpoint).
        model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)

        for epoch in range(args.epochs):
            sampler.set_epoch(epoch)  # a new shuffle every epoch
            for x, y in loader:
                x, y = x.to(device), y.to(device)
                loss = nn.functional.cross_entropy(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            average = loss.detach().clone()
            # Horovod: hvd.allreduce (which returns a new tensor; this works in place)
            dist.all_reduce(average)  # the sum over all ranks, on every rank
            average /= world_size  # their mean
            if rank == 0:
                print(
                    f"epoch {epoch + 1}/{args.epochs}  "
                    f"last-step loss {average.item():.4f}"
                )

        check_replicas_agree(model)
        if rank == 0:
            # .module: the model without the DDP wrapper
            torch.save(model.module.state_dict(), args.save)
            print(f"saved {args.save}")
    finally:
        dist.destroy_process_group()  # Horovod shuts down at exit
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
