"""What the tests of docs/quickstart.md read in a run of snippets/quickstart/train.py (its
losses, held-out accuracy and saved model), and how they submit its job scripts.
"""

import re

import torch

from harness.launch import Result
from tests.compare import load
from tests.ddp.train_runs import held_out_accuracy as ddp_held_out_accuracy
from tests.slurm.jobs import job_end

FILES = ("quickstart/train.py",)


def epoch_losses(stdout: str) -> list[float]:
    """The loss of every epoch, over all 1536 training images."""
    return [float(loss) for loss in re.findall(r"^epoch \d+: loss ([\d.]+) on 1536 images$",
                                               stdout, re.M)]


def held_out_accuracy(stdout: str) -> float:
    """The percentage of the 261 held-out images the trained model classifies right."""
    return ddp_held_out_accuracy(stdout, images=261)


def saved_model(result: Result) -> dict[str, torch.Tensor]:
    return load(result.workdir / "model.pt")


def submit_quickstart(cluster, script: str, world_size: int, **options) -> Result:
    """The job script on ``cluster`` (tests/slurm/clusters.py) from a folder with train.py
    (and .venv, the tests' environment, as for every job: harness/slurm.py)."""
    return cluster.submit(script, files=FILES, world_size=world_size,
                          workdir=cluster.folder("quickstart"), **options)


def assert_trained(job: Result, processes: int, backend: str) -> None:
    """``processes`` processes trained 5 epochs with ``backend`` (``gloo on cpu``, or on
    a GPU cluster ``nccl on cuda``), learnt, and rank 0 saved the model."""
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
