"""snippets/basics/notebook.ipynb, offered on docs/basics/notebooks.md.

The notebook is executed as a reader runs it in JupyterLab, every cell in order, by
tests/basics/run_notebook.py: in a kernel made with the page's ``ipykernel install``
command, each cell within a time limit, the whole run within the harness's. Its two
working ways to start DDP (``!torchrun`` from a cell, ``mp.spawn`` of a function
imported from a file) must train the same model, and its last cell must fail the way
the page says ``mp.spawn`` of a function defined in the notebook fails.
"""

import re
import sys
from pathlib import Path

import pytest

from harness.launch import ROOT, run, snippet
from harness.outputs import check_text
from tests.devices import on_each_device

NOTEBOOK = "basics/notebook.ipynb"
RUNNER = ROOT / "tests" / "basics" / "run_notebook.py"
CELL_TIMEOUT = 90  # seconds per cell: torch is imported by every process a cell starts
SPAWN_ERROR = "Can't get attribute 'train_here' on <module '__main__' (built-in)>"


def execute() -> tuple[object, dict[int, str]]:
    """Run the notebook; its result and each code cell's output, by cell number."""
    result = run(RUNNER, str(snippet(NOTEBOOK)), str(CELL_TIMEOUT), launcher="python",
                 timeout=6 * CELL_TIMEOUT)
    parts = re.split(r"^--- cell (\d+) ---\n", result.stdout, flags=re.M)
    return result, {int(n): text for n, text in zip(parts[1::2], parts[2::2])}


def training(text: str) -> tuple[int, str, float, list[float]]:
    """(ranks, "backend on device", loss, parameter sum on each rank) that rank 0 printed."""
    head = re.search(r"^(\d+) ranks \((\w+ on \w+)\), loss (\S+)$", text, re.M)
    sums = re.search(r"^parameter sum on each rank: (.*)$", text, re.M)
    assert head and sums, text
    return int(head[1]), head[2], float(head[3]), [float(s) for s in sums[1].split()]


def page_text(cells: dict[int, str]) -> str:
    """What the page shows: every cell's output but the first (whether nvidia-smi exists
    differs from node to node), and of the failing cell only its error lines (the
    tracebacks of the processes interleave, or one is cut short when it is stopped)."""
    shown = [f"[{n}]\n{cells[n]}" for n in sorted(cells) if 1 < n < max(cells)]
    last = cells[max(cells)]
    errors = sorted(set(re.findall(r"^(?:AttributeError: .*|ERROR .*)$", last, re.M)))
    # which process mp.spawn finds dead first is a race: "process N"
    errors = [re.sub(r"process \d+ terminated", "process N terminated", e) for e in errors]
    return "".join(shown) + f"[{max(cells)}]\n" + "\n".join(errors) + "\n"


def assert_the_three_ways(cells: dict[int, str], ranks: int, where: str) -> None:
    """Cells 4 and 5 trained the same model on ``ranks`` ranks; cell 6 failed as the page
    says; the kernel ran the guide's Python."""
    prefix = re.search(r"^Python environment: (.*)$", cells[2], re.M)
    assert prefix and Path(prefix[1]).resolve() == Path(sys.prefix).resolve(), cells[2]
    torchrun, spawn = training(cells[4]), training(cells[5])
    assert torchrun[:2] == spawn[:2] == (ranks, where)
    assert len(set(torchrun[3])) == 1 and len(torchrun[3]) == ranks  # same on every rank
    assert torchrun[2:] == spawn[2:]  # the same loss and weights, whichever way it started
    assert SPAWN_ERROR in cells[6]
    assert re.search(r"^ERROR ProcessExitedException: process \d terminated with exit code 1$",
                     cells[6], re.M), cells[6]


@on_each_device(gpus=2)
@pytest.mark.timeout(900)  # the notebook's run and a one-process run, on a busy machine
def test_torchrun_and_an_imported_worker_work_a_worker_defined_in_the_notebook_fails(device):
    """On GPUs each way uses every GPU, and nvidia-smi -L lists them."""
    result, cells = execute()
    assert sorted(cells) == [1, 2, 3, 4, 5, 6], result.stdout
    if device.cuda:
        import torch

        assert_the_three_ways(cells, torch.cuda.device_count(), "nccl on cuda")
        assert "GPU 0:" in cells[1]  # nvidia-smi -L lists the GPUs
    else:
        assert_the_three_ways(cells, 2, "gloo on cpu")
        check_text(page_text(cells), NOTEBOOK, command=())

        # Both ways match the same training in one process, on all the samples at once.
        alone = run(result.workdir / "ddp_worker.py", launcher="torchrun", nproc=1)
        one = training(alone.stdout)
        assert one[0] == 1
        assert one[2:][1][0] == pytest.approx(training(cells[4])[3][0], rel=1e-5)
