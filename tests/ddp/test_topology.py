"""snippets/ddp/topology.py, shown on docs/ddp/topology.md."""

import os

import pytest

from harness.launch import own_gpus, run
from harness.outputs import check_output
from tests.on_gpus import NcclLogs

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


def topology(**env):
    return run(SNIPPET, launcher="torchrun", nproc=2, env=env, timeout=120)


def test_on_cpu_every_rank_reports_its_place():
    result = topology()
    check_output(result)
    rows = table(result.stdout)
    assert [(r["rank"], r["host"], r["local"], r["device"]) for r in rows] == [
        ("0", "0", "0", "cpu"), ("1", "0", "1", "cpu")]
    assert all(r["gpu"] == "-" and r["bus_id"] == "-" and r["visible"] == "(unset)" for r in rows)
    allowed = len(os.sched_getaffinity(0))
    assert all(r["cpus"] == f"{allowed} of {os.cpu_count()}" for r in rows)


@pytest.mark.multigpu(2)
def test_each_rank_drives_its_own_gpu_and_cuda_visible_devices_renumbers_them():
    logs = NcclLogs()
    plain = table(topology(**logs.env).stdout)
    assert [r["device"] for r in plain] == ["cuda:0", "cuda:1"]
    logs.assert_nccl_ran(2)  # all_gather_object over NCCL
    assert plain[0]["bus_id"] != plain[1]["bus_id"]
    # Reverse the visible GPUs: each rank still uses its cuda:<local rank>, now the other card.
    visible = own_gpus(2).split(",")
    swapped = table(topology(CUDA_VISIBLE_DEVICES=",".join(reversed(visible))).stdout)
    assert [r["device"] for r in swapped] == ["cuda:0", "cuda:1"]
    assert [r["bus_id"] for r in swapped] == [plain[1]["bus_id"], plain[0]["bus_id"]]
