"""snippets/ddp/topology.py, shown on docs/ddp/topology.md."""

import os
import re

from harness.launch import own_gpus, run
from tests.devices import on_each_device

SNIPPET = "ddp/topology.py"
COLUMNS = ["rank", "host", "local", "device", "gpu", "bus_id", "visible", "cpus"]


def table(stdout):
    """The snippet's table as one dict per rank."""
    rows = []
    for line in stdout.splitlines():
        fields = line.split()
        if fields and fields[0].isdigit():
            *head, cpus, _, total = fields  # "CPUs allowed" is "N of M"
            gpu_end = len(head) - 2  # a GPU name may contain spaces
            row = [*head[:4], " ".join(head[4:gpu_end]), *head[gpu_end:], f"{cpus} of {total}"]
            rows.append(dict(zip(COLUMNS, row)))
    return rows


def topology(nproc=2, **env):
    return run(SNIPPET, launcher="torchrun", nproc=nproc, env=env, timeout=120)


@on_each_device(gpus=2, one_gpu=True)
def test_on_cpu_every_rank_reports_its_place(device):
    """On GPUs each rank drives its own GPU (all_gather_object over NCCL), named with its
    PCI bus ID, and CUDA_VISIBLE_DEVICES renumbers them."""
    ranks = device.ranks(2)
    result = topology(ranks, **device.env())
    device.check_output(result)
    rows = table(result.stdout)
    assert [(r["rank"], r["host"], r["local"], r["device"]) for r in rows] == [
        (str(rank), "0", str(rank), device.pick("cpu", f"cuda:{rank}")) for rank in range(ranks)]
    if device.cuda:
        device.assert_ran(ranks, result=result)  # all_gather_object over NCCL
        assert all(r["gpu"] != "-" and re.fullmatch(r"[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.0",
                                                     r["bus_id"]) for r in rows), result.stdout
    if device.cuda and ranks > 1:
        assert rows[0]["bus_id"] != rows[1]["bus_id"]
        # Reverse the visible GPUs: each rank still uses its cuda:<local rank>, now the other card.
        visible = own_gpus(2).split(",")
        swapped = table(topology(CUDA_VISIBLE_DEVICES=",".join(reversed(visible))).stdout)
        assert [r["device"] for r in swapped] == ["cuda:0", "cuda:1"]
        assert [r["bus_id"] for r in swapped] == [rows[1]["bus_id"], rows[0]["bus_id"]]
    if not device.cuda:
        assert all(r["gpu"] == "-" and r["bus_id"] == "-" and r["visible"] == "(unset)"
                   for r in rows)
        allowed = len(os.sched_getaffinity(0))
        assert all(r["cpus"] == f"{allowed} of {os.cpu_count()}" for r in rows)
