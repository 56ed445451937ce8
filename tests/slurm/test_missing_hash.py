"""snippets/slurm/missing_hash.sbatch, shown on docs/slurm/pitfalls.md.

Submitted as it is. Bash fails on the line without "#", and sbatch ignores every
directive after it: 1 node, 1 task, the default output file; the job still succeeds.
On a GPU cluster, the same test with one GPU given on sbatch's command line (which the
broken line does not hide), so that a GPU partition takes the job
(tests/slurm/clusters.py).
"""

import re
from pathlib import Path

from harness.outputs import check_output
from tests.slurm.clusters import on_each_cluster
from tests.slurm.jobs import backend, job_end, on_one_node


def assert_the_directives_after_the_broken_line_were_ignored(result) -> None:
    assert re.search(r"slurm_script: line \d+: SBATCH: command not found", result.stdout)
    assert on_one_node(result.stdout) == (1, [0])  # not 2 nodes of 2 tasks
    outputs = [p.name for p in Path(result.workdir).glob("*.out")]
    assert len(outputs) == 1 and re.fullmatch(r"slurm-\d+\.out", outputs[0])  # not missing-hash-*
    assert job_end(result)["state"] == "COMPLETED"


@on_each_cluster()
def test_the_directives_after_the_broken_line_are_ignored(cluster):
    result = cluster.submit("slurm/missing_hash.sbatch", world_size=1,
                            sbatch_args=cluster.pick([], ["--gpus-per-node=1"]))
    if not cluster.real:
        check_output(result)
    assert_the_directives_after_the_broken_line_were_ignored(result)
    assert backend(result.stdout) == cluster.backend
