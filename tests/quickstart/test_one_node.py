"""snippets/quickstart/one_node.sbatch, shown on docs/quickstart.md.

Submitted as it is, from a folder that holds train.py and a link to the tests' virtual
environment as .venv, from a shell where no environment is active: one torchrun starts
one process per GPU of the profile's nodes (4 for the default), which train and save the
model. On a GPU cluster, the same with the GPUs of
one node of the job the tests run in.
"""

import re
import tempfile
from pathlib import Path

import pytest

from harness.launch import BIN, Result
from harness.outputs import check_output
from tests.quickstart.test_train import epoch_losses, held_out_accuracy, saved_model
from tests.slurm.jobs import GPUS, job_end, submit
from tests.slurm.real_cluster import job_folder, on_the_gpu_cluster, real_cluster, submit_real

FILES = ("quickstart/train.py",)


def submit_quickstart(script: str, world_size: int, cluster=None, **options) -> Result:
    """The job script from a folder with train.py and .venv, the tests' environment."""
    folder = job_folder("quickstart") if cluster else Path(tempfile.mkdtemp(prefix="quickstart-"))
    (folder / ".venv").symlink_to(BIN.parent)
    if cluster:
        return submit_real(cluster, script, files=FILES, world_size=world_size,
                           activate=False, workdir=folder, **options)
    return submit(script, files=FILES, world_size=world_size, activate=False, workdir=folder,
                  **options)


def assert_trained(job: Result, processes: int, backend: str = "gloo on cpu") -> None:
    """``processes`` processes trained 5 epochs, learnt, and rank 0 saved the model."""
    assert job.stdout.startswith(
        f"{processes} processes ({backend}), {processes * 32} images per step\n"), job.stdout
    losses = epoch_losses(job.stdout)
    assert len(losses) == 5 and losses == sorted(losses, reverse=True)
    # 5 epochs of 1536 images: up to 8 processes (6 steps per epoch) reach 85%; more
    # processes take fewer, larger steps and learn less in as many epochs
    assert held_out_accuracy(job.stdout) > (85 if processes <= 8 else 50)
    assert re.search(r"^saved model\.pt$", job.stdout, re.M)
    assert saved_model(job).keys() == {"0.weight", "0.bias", "2.weight", "2.bias"}
    assert job_end(job)["state"] == "COMPLETED"


@pytest.mark.slurm
def test_one_torchrun_trains_on_a_process_per_gpu_of_the_node():
    job = submit_quickstart("quickstart/one_node.sbatch", world_size=GPUS)
    check_output(job)
    assert_trained(job, GPUS)


@on_the_gpu_cluster()
def test_on_a_gpu_cluster():
    cluster = real_cluster()
    job = submit_quickstart("quickstart/one_node.sbatch", cluster.gpus_per_node, cluster,
                            sbatch_args=cluster.shape(tasks_per_gpu=False, nodes=1))
    assert_trained(job, cluster.gpus_per_node, "nccl on cuda")
