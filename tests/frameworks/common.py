"""Helpers of the tests of docs/frameworks: skips when a framework is not installed (`make
test-extras` installs them all), and Horovod's first run. Their launchers are
harness/frameworks.py's; what every worker held at the end, tests/compare.py's
run_every_rank_saves.
"""

from __future__ import annotations

import importlib.util

import pytest

from harness.frameworks import TF_VENV
from harness.launch import Result, shared
from tests.compare import run_every_rank_saves

#: Importing TensorFlow takes seconds per process, minutes on a busy machine.
TF_TIMEOUT = 600


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _needs(ok: bool, what: str):
    return pytest.mark.skipif(not ok, reason=f"needs {what}: run `make test-extras`, which installs it")


needs_horovod = _needs(_installed("horovod"), "Horovod built for this torch (build_horovod.sh)")
needs_accelerate = _needs(_installed("accelerate"), "Hugging Face Accelerate")
needs_tensorflow = _needs((TF_VENV / ".installed").is_file(), "TensorFlow in .venv-tf")


@shared
def horovodrun() -> Result:
    """What docs/frameworks/horovod.md tells readers to run first: horovod_train.py under
    horovodrun with Horovod's Gloo controller (its test, and the DDP translation's, compare
    with it)."""
    return run_every_rank_saves("frameworks/horovod_train.py", launcher="horovodrun", nproc=2)
