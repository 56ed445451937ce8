"""snippets/slurm/double_quotes.sbatch, shown on docs/slurm/pitfalls.md.

Submitted as it is: 2 nodes, 2 tasks each. In double quotes, every task sees the batch
script's SLURM_NODEID and SLURM_PROCID; in single quotes, its own. On a GPU cluster, the
same test on the nodes of the job the tests run in (1 or 2), with a GPU each, so that a
GPU partition takes the job (tests/slurm/clusters.py).
"""

import re

from harness.outputs import check_output
from tests.slurm.clusters import on_each_cluster
from tests.slurm.jobs import job_nodes

PATTERN = r"^(\d): node (\d), task (\d), (\S+)$"


def assert_each_quote_expands_where_it_should(result, nodes: list[str]) -> None:
    double, single = result.stdout.split("single quotes")
    tasks = range(2 * len(nodes))
    assert re.findall(PATTERN, double, re.M) == [(str(t), "0", "0", nodes[0]) for t in tasks]
    assert re.findall(PATTERN, single, re.M) == [
        (str(t), str(t // 2), str(t), nodes[t // 2]) for t in tasks]


@on_each_cluster()
def test_double_quotes_give_every_task_the_values_of_the_batch_script(cluster, monkeypatch):
    cluster.use(monkeypatch)  # job_nodes asks the cluster's scontrol
    result = cluster.submit("slurm/double_quotes.sbatch", files=(), sbatch_args=cluster.pick(
        [], [f"--nodes={cluster.nodes}", "--gpus-per-node=1"]))
    if not cluster.real:
        check_output(result)
    nodes = job_nodes(result)
    if not cluster.real:
        assert nodes == ["node1", "node2"]
    assert_each_quote_expands_where_it_should(result, nodes)
