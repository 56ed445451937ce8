"""snippets/cheatsheet/debug.sbatch, shown on docs/cheatsheet.md.

Submitted as it is, next to ranks.py: the job exports the debug variables, and
torchrun's processes, which inherit them, run and write their output to files of their
own. With TORCH_DISTRIBUTED_DEBUG=DETAIL the collectives go through PyTorch's checking
wrapper; the run must still succeed. On a GPU cluster, the same test on 2 GPUs of one
node (tests/slurm/clusters.py), where NCCL_DEBUG=INFO makes NCCL report its version in
rank 0's log.
"""

from pathlib import Path

from harness.outputs import check_output
from tests.cheatsheet.log_files import assert_log_files
from tests.slurm.clusters import on_each_cluster
from tests.slurm.jobs import GPUS, PROFILE, job_end

SNIPPET = "cheatsheet/debug.sbatch"
#: The job asks for 2 GPUs; where the profile makes GPU jobs take whole nodes
#: (--exclusive), Slurm gives it every GPU of the node, and torchrun starts one process each.
RANKS = GPUS if PROFILE.exclusive_on(PROFILE.partition) else 2
FILES = ("cheatsheet/ranks.py",)
VARIABLES = ("CUDA_LAUNCH_BLOCKING=1\nNCCL_DEBUG=INFO\nTORCH_DISTRIBUTED_DEBUG=DETAIL\n"
             "TORCH_NCCL_ASYNC_ERROR_HANDLING=1\nTORCH_SHOW_CPP_STACKTRACES=1\n")


def assert_debugged_run(job, ranks: int) -> Path:
    assert job.stdout == VARIABLES  # the processes' output went to their files
    assert job_end(job)["state"] == "COMPLETED"
    return assert_log_files(job.workdir, ranks)


@on_each_cluster()
def test_the_ranks_run_with_every_debug_variable(cluster):
    ranks = cluster.pick(RANKS, 2)
    job = cluster.submit(SNIPPET, files=FILES, world_size=ranks, sbatch_args=cluster.shape(
        tasks_per_gpu=False, nodes=1, gpus_per_node=2))
    if not cluster.real:
        check_output(job)
    logs = assert_debugged_run(job, ranks)
    if cluster.real:
        rank_0 = (logs / "0" / "stdout.log").read_text() + (logs / "0" / "stderr.log").read_text()
        assert "NCCL INFO NCCL version" in rank_0
