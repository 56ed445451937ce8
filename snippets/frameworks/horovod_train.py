"""Train a small classifier with Horovod on synthetic data.

Start one process per GPU with Horovod's launcher, or with mpirun or srun when
Horovod was built with MPI:
    horovodrun -np 4 -H localhost:4 python horovod_train.py        one node, 4 GPUs
    horovodrun -np 8 -H node1:4,node2:4 python horovod_train.py    two nodes
    mpirun -np 8 python horovod_train.py
Each process uses one GPU; without GPUs, the CPU.
"""

import argparse

import horovod.torch as hvd
import torch
from torch import nn
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
    flat = torch.cat([p.detach().flatten() for p in model.parameters()]).double().cpu()
    checksum = torch.stack([flat.sum(), flat.square().sum()])
    # one row per process
    everyone = hvd.allgather(checksum.unsqueeze(0), name="checksum")
    if not torch.equal(everyone, checksum.expand_as(everyone)):
        raise RuntimeError(f"parameters differ between processes: {everyone.tolist()}")
    if hvd.rank() == 0:
        print(f"final parameters identical on all {hvd.size()} processes")


def main():
    args = parse_args()
    hvd.init()
    if torch.cuda.is_available():
        # pin one GPU per process, by local rank
        torch.cuda.set_device(hvd.local_rank())
        device = torch.device("cuda", hvd.local_rank())
    else:
        device = torch.device("cpu")
    if hvd.rank() == 0:
        controller = "Gloo" if hvd.gloo_enabled() else "MPI"
        print(f"{hvd.size()} processes, {controller} controller, on {device.type}")

    torch.manual_seed(args.seed)
    dataset = make_dataset()
    # each process reads its share
    sampler = DistributedSampler(
        dataset, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=True, seed=args.seed
    )
    loader = DataLoader(
        dataset, batch_size=args.batch_size, sampler=sampler, drop_last=True
    )
    model = make_model().to(device)
    # A step averages the gradients of hvd.size() processes: scale the rate with them.
    optimizer = torch.optim.SGD(
        model.parameters(), lr=args.lr * hvd.size(), momentum=0.9
    )

    # Start every process from rank 0's parameters and optimiser state.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    # Average the gradients of all processes during backward(), before step().
    optimizer = hvd.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters()
    )

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)  # a new shuffle every epoch
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        average = hvd.allreduce(loss.detach(), name="loss")  # the mean over processes
        if hvd.rank() == 0:
            print(
                f"epoch {epoch + 1}/{args.epochs}  last-step loss {average.item():.4f}"
            )

    check_replicas_agree(model)
    if hvd.rank() == 0:
        torch.save(model.state_dict(), args.save)
        print(f"saved {args.save}")


if __name__ == "__main__":
    main()
