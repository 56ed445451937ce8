"""snippets/troubleshooting/allreduce_bw.sbatch and allreduce_bw.py, shown on
docs/troubleshooting/bandwidth.md: the all-reduce bandwidth within a node, between
nodes and over every process of a job, on both nodes of the local cluster as the page
shows it, one task per GPU of the profile's nodes (gloo on localhost: the figures are those of the machine's memory, not of a
network). The test checks what does not depend on the clock: the sizes, the numbers of
processes and nodes, and busbw = algbw x 2(n-1)/n. On a GPU cluster, the same test on
its nodes, with the script's own sizes (tests/slurm/clusters.py).
"""

import re

import pytest

from harness.launch import run
from harness.outputs import check_output
from tests.devices import on_each_device
from tests.on_gpus import assert_gpu_path
from tests.slurm.clusters import on_each_cluster
from tests.slurm.started_by import assert_stopped_with_one_line

JOB = "troubleshooting/allreduce_bw.sbatch"
SCRIPT = "troubleshooting/allreduce_bw.py"
MIB = (1, 4, 16)
ARGS = ("--mib", *map(str, MIB), "--iters", "5", "--warmup", "1")
#: The line above each srun's table: its processes and nodes, backend and device, factor.
HEAD = (r"^all_reduce, (?P<n>\d+) processes on (?P<nodes>\d+) nodes?, "
        r"(?P<backend>\w+) on (?P<device>\w+): busbw = algbw x (?P<factor>\S+)$")


def tables(stdout: str) -> list[dict]:
    """Each srun's table: processes, nodes, factor, and rows (bytes, ms, algbw, busbw)."""
    found = []
    for head, body in re.findall(
            r"(?m)^(all_reduce, .*)\n +bytes +time +algbw +busbw\n((?:^ +\d+ .*\n?)+)", stdout):
        n, nodes, factor = re.match(HEAD, head).group("n", "nodes", "factor")
        rows = [(int(b), float(ms), float(alg), float(bus)) for b, ms, alg, bus in re.findall(
            r"(?m)^ +(\d+) +([\d.]+) ms +([\d.]+) GB/s +([\d.]+) GB/s$", body)]
        found.append({"n": int(n), "nodes": int(nodes), "factor": float(factor), "rows": rows})
    return found


def assert_bus_bandwidth(table: dict, mib=MIB, rounding: bool = False):
    """Sizes as asked; algbw = bytes / time; busbw / algbw = 2(n-1)/n (nccl-tests' factor
    for all_reduce), to the digits printed. With ``rounding``, algbw within what the
    printed time's rounding allows, however short the time: times of some microseconds (a
    GPU, one process) have few digits in three decimals of a millisecond."""
    factor = 2 * (table["n"] - 1) / table["n"]
    assert table["factor"] == pytest.approx(factor, abs=1e-6)
    assert [row[0] for row in table["rows"]] == [m * 2**20 for m in mib]
    for size, ms, algbw, busbw in table["rows"]:
        if rounding:  # the time was within 0.0005 ms of the one printed
            assert size / ((ms + 5e-4) / 1e3) / 1e9 - 1e-4 <= algbw
            assert ms <= 5e-4 or algbw <= size / ((ms - 5e-4) / 1e3) / 1e9 + 1e-4
        else:
            assert algbw == pytest.approx(size / (ms / 1e3) / 1e9, rel=2e-3, abs=2e-4)
        assert busbw == pytest.approx(algbw * factor, rel=1e-3, abs=2e-4)


def test_in_the_job_script_without_srun_it_stops_at_once_with_one_line():
    """The job script has SLURM_PROCID=0 and SLURM_NTASKS too, but no job step
    (harness/slurm_env.py): the script does not wait there for ranks that never come."""
    assert_stopped_with_one_line(run(SCRIPT, launcher="started-by", world_size=0,
                                     check=False, timeout=60))


@on_each_device(gpus=2, one_gpu=True)
def test_under_torchrun_on_one_node(device):
    """The script started by torchrun instead of srun; on GPUs NCCL on each process's own
    GPU, timed with torch.cuda.synchronize (on one GPU, at world size 1: busbw 0, as no
    link carries anything)."""
    ranks = device.ranks(2)
    result = run(SCRIPT, *ARGS, launcher="torchrun", nproc=ranks,
                 timeout=device.pick(60, 180), env=device.env())
    device.assert_ran(ranks, result=result)
    if device.cuda:
        assert_gpu_path(result.stdout, HEAD, count=1)
    found = tables(result.stdout)
    assert [(t["n"], t["nodes"]) for t in found] == [(ranks, 1)]
    assert re.search(HEAD, result.stdout, re.M).group("backend", "device") == (
        device.backend, device.type)
    assert_bus_bandwidth(found[0], rounding=True)


@on_each_cluster()
def test_within_a_node_between_nodes_and_every_process(cluster):
    """On a GPU cluster with the script's own sizes, 1, 16 and 256 MiB."""
    per_node, nodes = cluster.gpus_per_node, cluster.nodes
    result = cluster.submit(JOB, *cluster.pick(ARGS, ()), files=(SCRIPT,),
                            sbatch_args=cluster.shape(), world_size=nodes * per_node)
    if cluster.real:
        assert_gpu_path(result.stdout, HEAD, count=3)  # every srun's processes: NCCL on CUDA
    else:
        check_output(result)
    found = tables(result.stdout)
    assert [(t["n"], t["nodes"]) for t in found] == [
        (per_node, 1), (nodes, nodes), (per_node * nodes, nodes)]
    for table in found:
        assert_bus_bandwidth(table, mib=cluster.pick(MIB, (1, 16, 256)))
