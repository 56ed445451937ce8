"""snippets/troubleshooting/dump_stacks.sh, shown on docs/troubleshooting/many_nodes.md:
the stack of every rank of the job that hangs on purpose (hang.sbatch, run once for this
file and test_hang.py by tests/troubleshooting/stuck_job.py), collected from a login
node with srun --overlap and py-spy. On a GPU cluster, the same on its nodes.
"""

import pytest

from harness.outputs import check_text
from tests.slurm.jobs import GPUS
from tests.slurm.real_cluster import on_the_gpu_cluster, real_cluster
from tests.troubleshooting import stuck_job
from tests.troubleshooting.stuck_job import SKIPPING_RANK

DUMP = "troubleshooting/dump_stacks.sh"
assert stuck_job.DUMP == DUMP


def assert_every_rank_found_and_one_elsewhere(stuck, nodes: list[str], per_node: int,
                                              gpus: bool = False):
    """Every rank's stack, each from its own node (ranks node by node), in its order; all
    but one rank wait in the all-reduce of average_loss, the skipping rank in the barrier
    of save_checkpoint. With NCCL the all-reduce only queues work on the GPU: those ranks
    wait in average_loss, for the result (.item())."""
    assert sorted(stuck.stacks) == list(range(len(nodes) * per_node)), stuck.dump
    for rank, (node, functions) in stuck.stacks.items():
        assert node == nodes[rank // per_node], stuck.dump
        assert functions[-2:] == ["main", "<module>"], functions
        if rank == SKIPPING_RANK:
            assert functions[:1] == ["barrier"] and "save_checkpoint" in functions, functions
            assert "average_loss" not in functions
        else:
            assert "average_loss" in functions and "save_checkpoint" not in functions
            if not gpus:
                assert functions[0] == "all_reduce", functions
    labels = [line.split(":")[0] for line in stuck.dump.splitlines()]
    assert labels == sorted(labels, key=int), "sorted by node"


@pytest.mark.slurm
def test_every_rank_on_both_nodes_waits_in_the_all_reduce_but_rank_1():
    stuck = stuck_job.on_the_local_cluster()
    assert_every_rank_found_and_one_elsewhere(stuck, ["node1", "node2"], GPUS)
    check_text(stuck.dump, DUMP, job=stuck_job.JOB)  # the job's shape: the profile's


@on_the_gpu_cluster()
def test_on_a_gpu_cluster(monkeypatch):
    cluster = real_cluster()
    cluster.use(monkeypatch)
    stuck = stuck_job.on_a_gpu_cluster(cluster)
    nodes = list(dict.fromkeys(node for node, _ in stuck.stacks.values()))
    assert len(nodes) == cluster.nodes
    assert_every_rank_found_and_one_elsewhere(stuck, nodes, cluster.gpus_per_node, gpus=True)
    stuck.nccl.assert_nccl_ran(cluster.nodes * cluster.gpus_per_node)  # NCCL's all-reduce
