"""snippets/frameworks/horovod_train.py and its job script snippets/frameworks/horovod_train.sbatch,
shown on docs/frameworks/horovod.md."""

import shutil

import numpy as np
import pytest

from harness.launch import shared
from harness.outputs import check_output
from tests.compare import assert_every_rank_holds_the_same, load, run_every_rank_saves
from tests.devices import on_each_device
from tests.frameworks.common import horovodrun, needs_horovod
from tests.slurm.clusters import on_each_cluster
from tests.slurm.jobs import job_end
from tests.slurm.real_cluster import GPU_ATOL

SNIPPET = "frameworks/horovod_train.py"

pytestmark = [pytest.mark.extras, needs_horovod]


def horovod_built_with_mpi() -> bool:
    import horovod.torch as hvd  # only when the tests run: importing it imports torch

    return hvd.mpi_built()


@shared
def mpirun(processes: int):
    """The script under mpirun (Horovod's MPI controller), once per number of processes."""
    return run_every_rank_saves(SNIPPET, launcher="mpirun", nproc=processes, master=False)


@on_each_device(gpus=2, one_gpu=True)
def test_horovodrun_starts_two_processes_that_end_identical(device):
    """On GPUs build_horovod.sh gave a CUDA torch a Horovod with NCCL
    (test_build_horovod.py): each process trains on its own GPU. On one GPU
    ``horovodrun -np 1``: one process on cuda:0."""
    ranks = device.ranks(2)
    if device.gpus:
        result = run_every_rank_saves(SNIPPET, launcher="horovodrun", nproc=ranks, timeout=240,
                                      env=device.env())
    else:
        result = horovodrun()
    device.check_output(result)
    first = result.stdout.splitlines()[0]
    assert first.endswith(f"{ranks} processes, Gloo controller, on {device.type}"), (
        result.report())
    if ranks > 1:  # alone, Horovod's optimiser all-reduces no gradient (size() == 1)
        device.assert_ran(ranks, result=result)  # all-reduces of GPU tensors: NCCL
    assert f"final parameters identical on all {ranks} processes" in result.stdout
    assert_every_rank_holds_the_same(result, ranks)


@pytest.mark.mpi
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs Open MPI's mpirun")
def test_mpirun_ends_with_the_parameters_of_horovodrun():
    if not horovod_built_with_mpi():
        pytest.fail("Horovod was built without MPI: install libopenmpi-dev and rebuild it")
    result = mpirun(2)
    check_output(result, "mpirun")
    assert result.stdout.startswith("2 processes, MPI controller, on cpu")
    params = assert_every_rank_holds_the_same(result, 2)
    for a, b in zip(params, assert_every_rank_holds_the_same(horovodrun(), 2)):
        np.testing.assert_array_equal(a, b)


@on_each_cluster()
def test_the_job_script_starts_one_task_per_gpu_connected_by_mpi(cluster):
    """On a GPU cluster, the one the tests run in (tests/slurm/clusters.py): one task per
    GPU of one node, ending with the model of horovodrun on as many of this node's GPUs."""
    if not horovod_built_with_mpi():
        pytest.fail("Horovod was built without MPI: install libopenmpi-dev and rebuild it")
    gpus = cluster.gpus_per_node
    result = cluster.submit("frameworks/horovod_train.sbatch",
                            files=("frameworks/horovod_train.py",),
                            sbatch_args=cluster.shape(nodes=1))
    if not cluster.real:
        check_output(result, "slurm")
    device = cluster.pick("cpu", "cuda")
    assert result.stdout.startswith(f"{gpus} processes, MPI controller, on {device}")
    assert f"final parameters identical on all {gpus} processes" in result.stdout
    assert job_end(result)["state"] == "COMPLETED"
    saved = load(result.workdir / "model.pt")
    if cluster.real:  # NCCL's sums, within GPU_ATOL of horovodrun's on this node's GPUs
        reference = run_every_rank_saves(SNIPPET, launcher="horovodrun", nproc=gpus)
    else:  # Open MPI adds the gradients up, as under mpirun; Gloo's order (horovodrun)
        reference = mpirun(gpus)  # differs from it in the last bits with 4 processes
    expected = assert_every_rank_holds_the_same(reference, gpus)
    assert len(saved) == len(expected)
    for a, b in zip(saved.values(), expected):
        np.testing.assert_allclose(a.numpy(), b, rtol=0, atol=cluster.pick(0, GPU_ATOL))
