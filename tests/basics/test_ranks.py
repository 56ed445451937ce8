"""snippets/basics/ranks.py, shown on docs/basics/introduction.md."""

import pytest

from harness.launch import run
from harness.outputs import check_output
from tests.on_gpus import NcclLogs

SNIPPET = "basics/ranks.py"


def table(stdout):
    rows = [line.split() for line in stdout.splitlines() if line.split()[0].isdigit()]
    return [(int(rank), int(node), int(local), device) for rank, node, local, device in rows]


def test_two_nodes_of_two_processes():
    result = run(SNIPPET, launcher="torchrun-static", nnodes=2, nproc=2)
    check_output(result)
    assert result.stdout.startswith("world size 4, 2 processes per node")
    assert table(result.stdout) == [(0, 0, 0, "cpu"), (1, 0, 1, "cpu"), (2, 1, 0, "cpu"), (3, 1, 1, "cpu")]


@pytest.mark.multigpu(2)
def test_each_process_gets_its_own_gpu():
    logs = NcclLogs()
    result = run(SNIPPET, launcher="torchrun", nproc=2, env=logs.env)
    assert [row[3] for row in table(result.stdout)] == ["cuda:0", "cuda:1"]
    logs.assert_nccl_ran(2)  # all_gather_object over NCCL
