"""snippets/troubleshooting/dump_stacks.sh, shown on docs/troubleshooting/many_nodes.md:
the stack of every rank of the job that hangs on purpose (hang.sbatch, run once for this
file and test_hang.py by tests/troubleshooting/stuck_job.py), collected from a login
node with srun --overlap and py-spy. On a GPU cluster, the same test on its nodes
(tests/slurm/clusters.py).
"""

from pathlib import Path

from harness.outputs import check_text
from tests.slurm.clusters import on_each_cluster
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


@on_each_cluster()
def test_every_rank_on_both_nodes_waits_in_the_all_reduce_but_rank_1(cluster, monkeypatch):
    cluster.use(monkeypatch)  # the test's squeue, scontrol and scancel ask the cluster
    stuck = stuck_job.on(cluster)
    nodes = list(dict.fromkeys(node for node, _ in stuck.stacks.values()))
    assert len(nodes) == cluster.nodes
    if not cluster.real:
        assert nodes == ["node1", "node2"]
    assert_every_rank_found_and_one_elsewhere(stuck, nodes, cluster.gpus_per_node,
                                              gpus=cluster.real)
    if cluster.real:
        stuck.nccl.assert_nccl_ran(cluster.nodes * cluster.gpus_per_node)  # NCCL's all-reduce
    else:
        check_text(stuck.dump, DUMP, job=stuck_job.JOB,  # the job's shape: the profile's
                   command=f"bash {Path(DUMP).name} {stuck.job_id}")
