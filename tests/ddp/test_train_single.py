"""snippets/ddp/train_single.py, the single-GPU starting point shown on docs/ddp/code_changes.md."""

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from harness.launch import run, snippet
from harness.outputs import check_text
from tests.compare import load
from tests.ddp.train_runs import SNIPPET as DDP_SNIPPET, held_out_accuracy, losses
from tests.devices import on_each_device

SNIPPET = "ddp/train_single.py"


@on_each_device(gpus=1)
def test_it_learns_and_saves_a_checkpoint_every_epoch(tmp_path, device):
    """On one GPU it learns like on the CPU: the same losses within 1e-3."""
    result = run(SNIPPET, workdir=tmp_path)
    if device.cuda:
        assert result.stdout.startswith("training on cuda:")
        cpu = run(SNIPPET, workdir=tmp_path / "cpu", env={"SNIPPET_HARNESS_DEVICE": "cpu"})
        for (label, loss), (label1, loss1) in zip(losses(result.stdout), losses(cpu.stdout),
                                                  strict=True):
            assert label == label1 and loss == pytest.approx(loss1, abs=1e-3)
    epochs = [loss for label, loss in losses(result.stdout) if label.endswith("done")]
    accuracy = float(re.findall(r"accuracy ([\d.]+)% on 1024 samples", result.stdout)[-1])
    assert len(epochs) == 3 and epochs[0] > epochs[1] > epochs[2] and accuracy > 85
    assert held_out_accuracy(result.stdout) > 85  # the 773 images it never trained on
    assert load(tmp_path / "checkpoint.pt")["step"] == 96


def test_the_page_shows_how_train_py_differs_from_it():
    command = ["diff", "-u", Path(SNIPPET).name, Path(DDP_SNIPPET).name]
    diff = subprocess.run(command, cwd=snippet(SNIPPET).parent, capture_output=True, text=True,
                          timeout=30)
    assert diff.returncode == 1 and diff.stdout.startswith("--- train_single.py"), diff
    check_text(diff.stdout, DDP_SNIPPET, "diff", command=shlex.join(command))
