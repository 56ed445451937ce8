"""Show where every process runs: host, local rank, device, visible GPUs and CPUs.

Start it exactly like your training script, for example on one node:
  torchrun --standalone --nproc_per_node=4 topology.py
and compare the table with `nvidia-smi topo -m` on the same node.
"""

import os
import socket
import time

import torch
import torch.distributed as dist


def describe(device):
    """Name and PCI bus ID of this process's GPU, written as nvidia-smi writes them."""
    if device.type != "cuda":
        return "-", "-"
    p = torch.cuda.get_device_properties(device)
    return p.name, f"{p.pci_domain_id:08X}:{p.pci_bus_id:02X}:{p.pci_device_id:02X}.0"


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)  # counts only the GPUs it can see
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    dist.init_process_group(backend)
    try:
        name, bus_id = describe(device)
        me = {
            "rank": dist.get_rank(),
            "host": socket.gethostname(),
            "local_rank": local_rank,
            "device": str(device),
            "name": name,
            "bus_id": bus_id,
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES", "(unset)"),
            # The CPUs this process may run on, and how many the machine has.
            "cpus": f"{len(os.sched_getaffinity(0))} of {os.cpu_count()}",
        }
        everyone = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, me)
        if dist.get_rank() == 0:
            hosts = list(dict.fromkeys(row["host"] for row in everyone))  # rank order
            plural = "host" if len(hosts) == 1 else "hosts"
            print(f"world size {len(everyone)}, {len(hosts)} {plural}:")
            for i, host in enumerate(hosts):
                print(f"  host {i}: {host}")
            print(f"{'rank':>4}  {'host':>4}  {'local':>5}  {'device':<7}  "
                  f"{'GPU':<22}  {'PCI bus ID':<16}  {'CUDA_VISIBLE_DEVICES':<20}  "
                  "CPUs allowed")
            for r in everyone:
                print(f"{r['rank']:>4}  {hosts.index(r['host']):>4}  "
                      f"{r['local_rank']:>5}  {r['device']:<7}  {r['name']:<22}  "
                      f"{r['bus_id']:<16}  {r['visible']:<20}  {r['cpus']}")
    finally:
        dist.destroy_process_group()
        time.sleep(0.1)  # gloo's threads let go of their tensors before Python exits


if __name__ == "__main__":
    main()
