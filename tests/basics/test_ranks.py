"""snippets/basics/ranks.py, shown on docs/basics/introduction.md."""

from harness.launch import run
from tests.devices import on_each_device

SNIPPET = "basics/ranks.py"


def table(stdout):
    rows = [line.split() for line in stdout.splitlines() if line.split()[0].isdigit()]
    return [(int(rank), int(node), int(local), device) for rank, node, local, device in rows]


@on_each_device(gpus=2, one_gpu=True)
def test_two_nodes_of_two_processes(device):
    """On GPUs the page's command at one node, one process per GPU: each process takes
    the GPU of its local rank (on one GPU, rank 0 takes cuda:0) and they gather the table
    over NCCL."""
    per_node = device.ranks(2)
    nodes = 1 if device.gpus else 2  # two nodes on one machine would share its GPUs
    result = run(SNIPPET, launcher="torchrun-static", nnodes=nodes, nproc=per_node,
                 env=device.env())
    device.check_output(result)
    assert result.stdout.startswith(
        f"world size {nodes * per_node}, {per_node} processes per node")
    assert table(result.stdout) == [
        (rank, rank // per_node, rank % per_node, device.pick("cpu", f"cuda:{rank % per_node}"))
        for rank in range(nodes * per_node)]
    if device.cuda:  # each process its own GPU
        assert [row[3] for row in table(result.stdout)] == [
            f"cuda:{rank}" for rank in range(per_node)]
    device.assert_ran(nodes * per_node, result=result)  # all_gather_object over NCCL
