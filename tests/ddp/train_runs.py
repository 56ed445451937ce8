"""The runs of snippets/ddp/train.py that the tests of docs/ddp/{concepts,code_changes,
launching,migrating}.md and of docs/quickstart.md compare with, each run once per session
(harness.launch.shared), and what they read in a run: the losses it printed, its
held-out accuracy, its final parameters, lines of its stderr.
"""

import re
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

from harness.launch import Result, run, shared
from tests.compare import load, run_every_rank_saves

SNIPPET = "ddp/train.py"
STEP_BATCH = 32  # samples per step over all processes: --batch-size is STEP_BATCH // world size
needs_mpirun = pytest.mark.skipif(shutil.which("mpirun") is None,
                                  reason="needs Open MPI's mpirun (Debian: apt-get install openmpi-bin)")


def stderr_lines(result: Result, pattern: str) -> list[str]:
    """Lines of every process's stderr that match ``pattern``, each once, in order."""
    lines = [line for o in result.outputs for line in o.stderr.splitlines() if re.search(pattern, line)]
    return list(dict.fromkeys(lines))


def losses(stdout: str) -> list[tuple[str, float]]:
    """(label, loss) of every progress and end-of-epoch line."""
    return [(m[1], float(m[2])) for m in re.finditer(r"^(epoch \S+(?:  step \S+| done)).*?loss ([\d.]+)",
                                                      stdout, re.M)]


def held_out_accuracy(stdout: str, images: int = 773) -> float:
    """The percentage of the held-out digits (773 here, 261 in the quick start's script)
    the trained model classifies right."""
    line = re.search(rf"^held-out accuracy ([\d.]+)% on {images} images$", stdout, re.M)
    assert line, stdout
    return float(line[1])


def final_parameters(result: Result) -> dict[str, torch.Tensor]:
    """The model's parameters in the checkpoint.pt the run left."""
    return load(result.workdir / "checkpoint.pt")["model"]


def train(*args, launcher: str, world: int, nnodes: int = 1, every_rank_saves: bool = False,
          **options) -> Result:
    """Run train.py with --batch-size STEP_BATCH // world on ``world`` processes."""
    batch = ["--batch-size", str(STEP_BATCH // world)]
    start = run_every_rank_saves if every_rank_saves else run
    return start(SNIPPET, *args, *batch, launcher=launcher, nproc=world // nnodes, nnodes=nnodes,
                 workdir=Path(tempfile.mkdtemp(prefix="ddp-train-")), **options)


@shared
def one_process() -> Result:
    """The reference: one process taking the whole batch of every step."""
    return train(launcher="env", world=1)


@shared
def two_ranks() -> Result:
    """What code_changes.md tells readers to run first."""
    return train(launcher="torchrun", world=2)
