"""snippets/slurm/stage_data.sbatch, shown on docs/slurm/data.md: copy a sharded data set
to every node's local disk, once per node, and train from the copies on two nodes.

Submitted as the page shows it, with one task per GPU of the profile's nodes (world size
8 on the two simulated nodes of the default profile), from a folder holding
train_shards.py and the data set it writes (project/shards). The two simulated nodes share this machine's /tmp: the node's name in
the local folder gives each its own, as the script says. On a GPU cluster, the same test
on the nodes of the job the tests run in (1 or 2), 2 GPUs each (tests/slurm/clusters.py).
"""

import re
from pathlib import Path

from harness.outputs import check_output
from tests.on_gpus import NcclLogs
from tests.slurm.clusters import on_each_cluster
from tests.slurm.jobs import GPUS, job_end, job_nodes
from tests.slurm.shards import SHARDS, assert_trained, make_shards, reads

SCRIPT = "slurm/stage_data.sbatch"


def copies(stdout: str) -> list[tuple[str, int, str]]:
    """(node, shards, folder) for every copy the staging step made."""
    return [(node, int(n), folder) for node, n, folder in re.findall(
        r"^(\S+): copied (\d+) shards to (\S+)$", stdout, re.M)]


def assert_staged_once_per_node_and_read_there(job, nodes: list[str], world_size: int):
    made = copies(job.stdout)
    assert sorted(node for node, _, _ in made) == sorted(nodes)  # one copy per node
    assert all(n == len(SHARDS) for _, n, _ in made)
    local = {node: folder for node, _, folder in made}
    assert len(set(local.values())) == len(nodes)  # each node its own folder
    job_id = re.search(r"submitted batch job (\d+)", job.text)[1]
    for node, folder in local.items():
        assert re.fullmatch(rf"/\S+/data-{job_id}-{node}", folder), folder
        assert not Path(folder).exists()  # removed at the end of the job
    for rank, node, _, _, folder in reads(job.stdout):
        assert folder == local[node], (rank, node, folder)  # its own node's copy
    assert_trained(job.stdout, world_size)
    assert (job.workdir / "checkpoint.pt").is_file()  # on the shared file system


@on_each_cluster()
def test_each_node_copies_the_shards_once_and_every_rank_reads_its_nodes_copy(cluster,
                                                                              monkeypatch):
    cluster.use(monkeypatch)  # job_nodes asks the cluster's scontrol
    workdir = cluster.folder("stage_data")
    make_shards(workdir)
    # on a GPU cluster world size 2 or 4: the 16 shards share out evenly
    per_node = cluster.pick(GPUS, 2)
    world_size = cluster.nodes * per_node
    logs = NcclLogs(workdir / "nccl-logs")  # where every node sees it
    job = cluster.submit(SCRIPT, files=("slurm/train_shards.py",), workdir=workdir,
                         world_size=world_size, env=cluster.pick({}, logs.env),
                         sbatch_args=cluster.shape(gpus_per_node=per_node))
    if not cluster.real:
        check_output(job)
    assert job_end(job)["state"] == "COMPLETED"
    nodes = job_nodes(job)
    assert_staged_once_per_node_and_read_there(job, nodes, world_size)
    if cluster.real:
        logs.assert_nccl_ran(world_size)
    else:  # both nodes, their ranks node by node
        assert nodes == ["node1", "node2"]
        assert [r[1] for r in reads(job.stdout)] == ["node1"] * GPUS + ["node2"] * GPUS
