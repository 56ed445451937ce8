"""snippets/troubleshooting/node_health.sbatch and node_health.py, shown on
docs/troubleshooting/bad_nodes.md.

The local cluster's nodes are given GPUs that PyTorch cannot see (they are declared, not
real): the job as the page shows it fails every node and says why, without testing
anything. A node given more GPUs than it sees fails the same way (on this machine with
pretended GPUs, SNIPPET_HARNESS_FAKE_GPUS, which the script must not use). With --cpu
the checks run on the CPU: node2 is made to fail the memory test with the script's own
--simulate-fault-on option (which flips one value of the test on that node's last
process): the report names node2 and no other, and the same job submitted again with
--exclude=node2 runs on node1 alone and passes. Each node runs one process per GPU of
the profile's nodes, as the page shows the job. On a GPU cluster, the test of the
broken node (tests/slurm/clusters.py): every node of a job passes, and the same nodes
with a simulated fault on the last one name that one; on one GPU, a node given four GPUs
fails.
"""

import re

import pytest

from harness.launch import DEVICE_ENV, FAKE_GPUS_ENV, own_gpus, run
from harness.outputs import check_output
from tests.devices import on_each_device
from tests.slurm.clusters import on_each_cluster
from tests.slurm.jobs import GPUS, job_end, job_nodes, submit

JOB = "troubleshooting/node_health.sbatch"
SCRIPT = "troubleshooting/node_health.py"


def report(result) -> dict[str, str]:
    """Node: "OK" or "FAIL", from the lines the nodes printed."""
    return dict(re.findall(r"(?m)^(\S+): (OK|FAIL) \(", result.stdout))


def failed(result) -> list[str]:
    """The nodes the job script named as failed."""
    line = re.search(r"(?m)^failed: (\S+); resubmit without them: "
                     r"sbatch --exclude=(\S+) \.\.\.$", result.stdout)
    assert line and line[1] == line[2], result.report()
    return line[1].split(",")


@pytest.mark.slurm
def test_nodes_whose_gpus_pytorch_cannot_see_fail_and_say_why():
    result = submit(JOB, files=(SCRIPT,), check=False)
    check_output(result, "no-gpu")
    assert job_end(result)["state"] == "FAILED" and result.returncode == 1
    assert report(result) == {"node1": "FAIL", "node2": "FAIL"}
    for node in ("node1", "node2"):
        assert (f"{node}: FAIL ({GPUS} processes, nothing tested): CUDA unavailable, "
                f"0 of {GPUS} GPUs visible") in result.stdout
    assert failed(result) == ["node1", "node2"]


@on_each_device(gpus=1)
@pytest.mark.parametrize("visible", [0, 1])
def test_a_node_that_sees_fewer_gpus_than_slurm_gave_it_fails(visible, device):
    """Two processes on a node given 4 GPUs that sees none, or 1 (on the CPU a pretended
    GPU: the script must stop before it uses one; on GPUs a real one, which the script
    saw: "1 of 4", not "CUDA unavailable, 0 of 4")."""
    if device.cuda and not visible:
        pytest.skip("on GPUs the node sees its one GPU: the case of visible=1")
    seen = device.pick({DEVICE_ENV: "" if visible else "cpu", FAKE_GPUS_ENV: str(visible)},
                       {"CUDA_VISIBLE_DEVICES": own_gpus(1)})
    result = run(SCRIPT, launcher="torchrun", nproc=2, world_size=0, check=False,
                 env={**seen, "SLURM_GPUS_ON_NODE": "4", "SLURMD_NODENAME": "gpu017"})
    reason = "1 of 4 GPUs visible" if visible else "CUDA unavailable, 0 of 4 GPUs visible"
    assert result.stdout == f"gpu017: FAIL (2 processes, nothing tested): {reason}\n", \
        result.report()
    assert result.returncode == 1


@on_each_cluster(jobs=2)
def test_the_report_names_the_broken_node_and_the_job_without_it_passes(cluster, monkeypatch):
    """On the local cluster, the checks on the CPU, a fault on node2, then the job without
    node2. On a GPU cluster (tests/slurm/clusters.py), the checks on its GPUs: every node
    of a job passes, then the same nodes with a fault on the last one name that one."""
    cluster.use(monkeypatch)  # job_nodes asks the cluster
    shape = cluster.shape(tasks_per_gpu=False)
    if cluster.real:
        healthy = cluster.submit(JOB, files=(SCRIPT,), sbatch_args=shape,
                                 world_size=cluster.gpus_per_node)  # a process group per node
        nodes = job_nodes(healthy)
        assert report(healthy) == {node: "OK" for node in nodes}, healthy.report()
        assert f"{cluster.gpus_per_node} processes on cuda" in healthy.stdout
        same_nodes = [f"--nodelist={','.join(nodes)}"]
    else:  # the page's job as it is, on both nodes
        nodes, same_nodes = ["node1", "node2"], []
    last = nodes[-1]
    broken = cluster.submit(JOB, *cluster.pick(["--cpu"], []), "--simulate-fault-on", last,
                            files=(SCRIPT,), sbatch_args=[*shape, *same_nodes], check=False)
    if not cluster.real:
        check_output(broken, "fault")
    assert job_end(broken)["state"] == "FAILED" and broken.returncode == 1
    assert report(broken) == {node: "FAIL" if node == last else "OK" for node in nodes}
    if not cluster.real:
        assert f"node2: FAIL ({GPUS} processes on cpu, all-reduce, 64 MiB memory test each): " \
               "memory test: 2 wrong values on cpu" in broken.stdout  # one per pattern
    bad = failed(broken)
    assert bad == [last]
    if cluster.real:
        return  # the job without the bad node: on the local cluster, one node is left

    # what the report says to do: the same job, without the bad node (and so on 1 node)
    again = cluster.submit(JOB, "--cpu", "--simulate-fault-on", "node2", files=(SCRIPT,),
                           world_size=GPUS,
                           sbatch_args=[f"--exclude={','.join(bad)}", "--nodes=1"])
    check_output(again, "exclude")
    assert job_end(again)["state"] == "COMPLETED"
    assert job_nodes(again) == ["node1"]
    assert report(again) == {"node1": "OK"}
    assert again.stdout.splitlines()[-1] == "all nodes passed: node1"
