"""snippets/slurm/double_quotes.sbatch, shown on docs/slurm/pitfalls.md.

Submitted as it is: 2 nodes, 2 tasks each. In double quotes, every task sees the batch
script's SLURM_NODEID and SLURM_PROCID; in single quotes, its own.
"""

import re

import pytest

from harness.outputs import check_output
from tests.slurm.jobs import submit

pytestmark = pytest.mark.slurm


def test_double_quotes_give_every_task_the_values_of_the_batch_script():
    result = submit("slurm/double_quotes.sbatch", files=())
    check_output(result)
    double, single = result.stdout.split("single quotes")
    pattern = r"^(\d): node (\d), task (\d), (node\d)$"
    assert re.findall(pattern, double, re.M) == [(str(t), "0", "0", "node1") for t in range(4)]
    assert re.findall(pattern, single, re.M) == [
        ("0", "0", "0", "node1"), ("1", "0", "1", "node1"),
        ("2", "1", "2", "node2"), ("3", "1", "3", "node2")]
