"""snippets/basics/ranks.py, shown on docs/basics/introduction.md."""

import pytest

from harness.launch import run
from tests.devices import on_each_device
from tests.on_gpus import NcclLogs

SNIPPET = "basics/ranks.py"


def table(stdout):
    rows = [line.split() for line in stdout.splitlines() if line.split()[0].isdigit()]
    return [(int(rank), int(node), int(local), device) for rank, node, local, device in rows]


@on_each_device(gpus=1, one_gpu=True)
def test_two_nodes_of_two_processes(device):
    """On one GPU the page's command at one node of one process: rank 0 takes cuda:0 and
    gathers the table over NCCL."""
    per_node = nodes = device.ranks(2)
    result = run(SNIPPET, launcher="torchrun-static", nnodes=nodes, nproc=per_node,
                 env=device.env())
    device.check_output(result)
    assert result.stdout.startswith(
        f"world size {nodes * per_node}, {per_node} processes per node")
    assert table(result.stdout) == [
        (rank, rank // per_node, rank % per_node, device.pick("cpu", f"cuda:{rank % per_node}"))
        for rank in range(nodes * per_node)]
    device.assert_ran(nodes * per_node, result=result)  # all_gather_object over NCCL


@pytest.mark.multigpu(2)
def test_each_process_gets_its_own_gpu():
    logs = NcclLogs()
    result = run(SNIPPET, launcher="torchrun", nproc=2, env=logs.env)
    assert [row[3] for row in table(result.stdout)] == ["cuda:0", "cuda:1"]
    logs.assert_nccl_ran(2)  # all_gather_object over NCCL
