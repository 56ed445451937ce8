"""snippets/slurm/whereami.py, shown on docs/slurm/anatomy.md.

The page's one-line try-out: srun, typed on a login node, starts the script on two
nodes with two tasks each, and each task reports its rank, node and GPUs. On a GPU
cluster, the same test: the same srun, typed in the job the tests run in as on a login
node, on as many nodes as that job has (1 or 2) (tests/slurm/clusters.py).
"""

import pytest

from harness.launch import DEFAULT_TIMEOUT, run
from harness.slurm_env import SRUN_OR_TORCHRUN, STARTED_BY
from tests.slurm.clusters import on_each_cluster
from tests.slurm.jobs import whereami
from tests.slurm.real_cluster import TIMEOUT
from tests.slurm.started_by import assert_stopped_with_one_line


def assert_two_tasks_per_node_with_two_gpus(result, nodes: int) -> list[str]:
    """Ranks 2k and 2k+1 on node k, local ranks 0 and 1, both seeing the same two GPUs of
    their node (which two depends on the other jobs on that node)."""
    rows = sorted(row[:6] for row in whereami(result.stdout))
    names = [row[2] for row in rows[::2]]
    visible = [row[5] for row in rows[::2]]
    assert len(set(names)) == nodes and all(len(v.split(",")) == 2 for v in visible)
    assert rows == [(rank, 2 * nodes, names[rank // 2], rank % 2, rank % 2, visible[rank // 2])
                    for rank in range(2 * nodes)]
    return names


@on_each_cluster()
def test_srun_on_a_login_node_starts_every_task_where_slurm_says(cluster):
    result = run("slurm/whereami.py", launcher=cluster.launcher("srun"), nnodes=cluster.nodes,
                 nproc=2, world_size=0, workdir=cluster.folder("whereami"),
                 timeout=cluster.pick(DEFAULT_TIMEOUT, TIMEOUT),
                 srun_args=[*cluster.options, "--gpus-per-node=2"])
    names = assert_two_tasks_per_node_with_two_gpus(result, cluster.nodes)
    if not cluster.real:
        assert names == ["node1", "node2"]


@pytest.mark.parametrize("started_by", SRUN_OR_TORCHRUN)
def test_it_reports_the_rank_of_srun_or_torchrun_and_stops_in_the_job_script(started_by):
    """In each way of starting it inside a job (harness/slurm_env.py): Slurm's
    variables only in a task of srun, as the job script has SLURM_PROCID=0 too."""
    expected = STARTED_BY[started_by][1]
    result = run("slurm/whereami.py", launcher="started-by", started_by=started_by,
                 world_size=0, check=expected is not None, timeout=60)
    if expected is None:
        assert_stopped_with_one_line(result)
    else:
        assert [(r, w, local, gpu) for r, w, _, local, gpu, *_ in whereami(result.stdout)] == [
            (*expected, expected[2])]
