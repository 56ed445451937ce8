"""A process that aborts after its work is done, and the pause that prevents it.

Every rank gathers every rank's number, rank 0 prints them, and the process group
is destroyed: the work is done. With the gloo backend, the process can still die
while Python shuts down, with "terminate called without an active exception" and
exit code -6 (SIGABRT), in some runs and not others. With --fix it pauses for a
tenth of a second after destroying the process group, as every script of this
guide does, so that gloo's threads finish while Python still runs.

    torchrun --standalone --nproc_per_node=2 exit_abort.py --fix
"""

import argparse
import os
import time

import torch
import torch.distributed as dist


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fix", action="store_true",
                        help="pause after destroying the process group")
    args = parser.parse_args()
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    try:
        mine = torch.tensor([rank + 1.0], device=device)
        everyone = [torch.empty_like(mine) for _ in range(world_size)]
        dist.all_gather(everyone, mine)  # gloo's threads may hold these tensors
        if rank == 0:                    # a little longer than this function does
            print(f"rank 0 gathered {[t.item() for t in everyone]} "
                  f"with {dist.get_backend()}")
    finally:
        dist.destroy_process_group()
        if args.fix:  # gloo's threads let go of their tensors before Python exits
            time.sleep(0.1)


if __name__ == "__main__":
    main()
