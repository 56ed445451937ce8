"""snippets/ddp/mpirun.sbatch, shown on docs/ddp/launching.md: train.py started by Open
MPI's mpirun inside a Slurm job, one process per task, on 2 GPUs of one node.

Submitted as it is. On the local cluster, every process that mpirun starts has
SLURM_PROCID=0, SLURM_NTASKS=1 and SLURM_STEP_ID, from the job step in which mpirun
started its daemon (harness/slurm_env.py); train.py reads Open MPI's variables
first, so ranks 0 and 1
join a world of 2 and train as torchrun's 2 processes do: the same output, and the same
final parameters to within 1e-6. One node only: Open MPI across the local cluster's two
simulated nodes crashes (PMIx). On a GPU cluster, the same test with NCCL on CUDA, on 2
GPUs of one node (tests/slurm/clusters.py).
"""

import pytest

from harness.outputs import check_output
from tests.compare import assert_same_state
from tests.ddp.train_runs import SNIPPET as TRAIN, final_parameters, needs_mpirun, two_ranks
from tests.on_gpus import assert_gpu_path
from tests.slurm.clusters import on_each_cluster
from tests.slurm.jobs import job_end
from tests.slurm.real_cluster import GPU_ATOL

JOB = "ddp/mpirun.sbatch"


@on_each_cluster()
@pytest.mark.mpi
@needs_mpirun  # on the PATH of the tests, which the job inherits
def test_mpirun_in_a_job_trains_like_torchrun_with_ranks_0_and_1(cluster):
    result = cluster.submit(JOB, files=(TRAIN,), world_size=2,
                            sbatch_args=cluster.shape(nodes=1, gpus_per_node=2))
    if cluster.real:
        assert_gpu_path(result.stdout, r"^world size 2 \((?P<backend>\w+), (?P<device>\w+)\): "
                                       r"2 × 16 = 32 samples per step", count=1)
    else:
        check_output(result)
        assert result.ranks_started == {0, 1}  # the ranks that joined the process group
        assert job_end(result) == {"state": "COMPLETED", "exit code": "0:0", "restarts": 0}
        assert result.stdout.startswith("world size 2 (gloo, cpu): 2 × 16 = 32 samples per step")
        assert result.stdout == two_ranks().stdout
    assert "final parameters identical on all ranks (world size 2)" in result.stdout
    # on the local cluster within 1e-6, not bit for bit: the job's processes compute with
    # OMP_NUM_THREADS=8 threads, torchrun's with 1, which splits the sums of a matrix
    # product otherwise; on GPUs within GPU_ATOL (other kernels)
    assert_same_state(final_parameters(result), final_parameters(two_ranks()),
                      atol=cluster.pick(1e-6, GPU_ATOL))
