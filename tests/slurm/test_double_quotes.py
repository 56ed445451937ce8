"""snippets/slurm/double_quotes.sbatch, shown on docs/slurm/pitfalls.md.

Submitted as it is: 2 nodes, 2 tasks each. In double quotes, every task sees the batch
script's SLURM_NODEID and SLURM_PROCID; in single quotes, its own. On a GPU cluster, the
same on the nodes of the job the tests run in (1 or 2), with a GPU each, so that a GPU
partition takes the job.
"""

import re

import pytest

from harness.outputs import check_output
from tests.slurm.jobs import job_nodes, submit
from tests.slurm.real_cluster import on_the_gpu_cluster, real_cluster, submit_real

PATTERN = r"^(\d): node (\d), task (\d), (\S+)$"


def assert_each_quote_expands_where_it_should(result, nodes: list[str]) -> None:
    double, single = result.stdout.split("single quotes")
    tasks = range(2 * len(nodes))
    assert re.findall(PATTERN, double, re.M) == [(str(t), "0", "0", nodes[0]) for t in tasks]
    assert re.findall(PATTERN, single, re.M) == [
        (str(t), str(t // 2), str(t), nodes[t // 2]) for t in tasks]


@pytest.mark.slurm
def test_double_quotes_give_every_task_the_values_of_the_batch_script():
    result = submit("slurm/double_quotes.sbatch", files=())
    check_output(result)
    assert_each_quote_expands_where_it_should(result, ["node1", "node2"])


@on_the_gpu_cluster()
def test_on_a_gpu_cluster(monkeypatch):
    cluster = real_cluster()
    cluster.use(monkeypatch)  # job_nodes asks the cluster's scontrol
    result = submit_real(cluster, "slurm/double_quotes.sbatch", files=(),
                         sbatch_args=[f"--nodes={cluster.nodes}", "--gpus-per-node=1"])
    assert_each_quote_expands_where_it_should(result, job_nodes(result))
