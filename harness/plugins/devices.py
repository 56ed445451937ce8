"""pytest plugin: which device each test's snippets run on.

Tests marked ``multigpu(n)`` are skipped, with the reason, where fewer than n CUDA GPUs
are visible, and run their snippets on the GPUs otherwise; every other test runs its
snippets on the CPU, on a GPU node too: it sets SNIPPET_HARNESS_DEVICE=cpu in the
environment that the test's launches inherit (harness/launch.py hides the GPUs then).

With SNIPPET_HARNESS_REHEARSE=1 the one-GPU cases of tests/devices.py (marked
``one_gpu``) run too, on the CPU, at world size 1 with gloo.
"""

import os
import shutil
import subprocess
import sys

import pytest

from harness.launch import DEVICE_ENV, FAKE_GPUS_ENV, REHEARSE_ENV


def gpu_count() -> int:
    """CUDA GPUs visible, asked of a subprocess so that pytest never initialises CUDA."""
    if os.environ.get(FAKE_GPUS_ENV):
        return int(os.environ[FAKE_GPUS_ENV])
    if shutil.which("nvidia-smi") is None:
        return 0
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                           capture_output=True, text=True, timeout=120)
    return int(probe.stdout.strip() or 0)


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if item.get_closest_marker("multigpu")]
    if not gpu_items:
        return
    have = gpu_count()
    for item in gpu_items:
        need = item.get_closest_marker("multigpu").args[0]
        if have < need and not rehearsed(item):
            gpus = "1 CUDA GPU" if need == 1 else f"{need} CUDA GPUs"
            item.add_marker(pytest.mark.skip(reason=f"needs {gpus}, this machine has {have}"))


def rehearsed(item) -> bool:
    return bool(os.environ.get(REHEARSE_ENV)) and item.get_closest_marker("one_gpu") is not None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before any fixture of the test starts a run."""
    if item.get_closest_marker("multigpu") and not rehearsed(item):
        os.environ.pop(DEVICE_ENV, None)
    else:
        os.environ[DEVICE_ENV] = "cpu"
