"""snippets/troubleshooting/node_health.sbatch and node_health.py, shown on
docs/troubleshooting/many_nodes.md.

On the local cluster, node2 is made to fail the memory test with the script's own
--simulate-fault-on option (which flips one value of the test on that node's last
process): the report names node2 and no other, and the same job submitted again with
--exclude=node2 runs on node1 alone and passes. Each node runs one process per GPU of
the profile's nodes, as the page shows the job. On a GPU cluster: every node of a job passes, and the same
nodes with a simulated fault on the last one name that one.
"""

import re

import pytest

from harness.outputs import check_output
from tests.slurm.jobs import GPUS, job_end, job_nodes, submit
from tests.slurm.real_cluster import on_the_gpu_cluster, real_cluster, submit_real

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
def test_the_report_names_the_broken_node_and_the_job_without_it_passes():
    broken = submit(JOB, "--simulate-fault-on", "node2", files=(SCRIPT,), check=False)
    check_output(broken, "fault")
    assert job_end(broken)["state"] == "FAILED" and broken.returncode == 1
    assert report(broken) == {"node1": "OK", "node2": "FAIL"}
    assert f"node2: FAIL ({GPUS} processes on cpu, all-reduce, 64 MiB memory test each): " \
           "memory test: 2 wrong values on cpu" in broken.stdout  # one per pattern
    bad = failed(broken)
    assert bad == ["node2"]

    # what the report says to do: the same job, without the bad node (and so on 1 node)
    again = submit(JOB, "--simulate-fault-on", "node2", files=(SCRIPT,), world_size=GPUS,
                   sbatch_args=[f"--exclude={','.join(bad)}", "--nodes=1"])
    check_output(again, "exclude")
    assert job_end(again)["state"] == "COMPLETED"
    assert job_nodes(again) == ["node1"]
    assert report(again) == {"node1": "OK"}
    assert again.stdout.splitlines()[-1] == "all nodes passed: node1"


@on_the_gpu_cluster(jobs=2)
def test_on_a_gpu_cluster(monkeypatch):
    cluster = real_cluster()
    cluster.use(monkeypatch)  # job_nodes asks the cluster
    shape = cluster.shape(tasks_per_gpu=False)
    healthy = submit_real(cluster, JOB, files=(SCRIPT,), sbatch_args=shape,
                          world_size=cluster.gpus_per_node)  # a process group per node
    nodes = job_nodes(healthy)
    assert report(healthy) == {node: "OK" for node in nodes}, healthy.report()
    assert f"{cluster.gpus_per_node} processes on cuda" in healthy.stdout
    last = nodes[-1]
    broken = submit_real(cluster, JOB, "--simulate-fault-on", last, files=(SCRIPT,),
                         sbatch_args=[*shape, f"--nodelist={','.join(nodes)}"], check=False)
    assert report(broken) == {node: "FAIL" if node == last else "OK" for node in nodes}
    assert failed(broken) == [last]
