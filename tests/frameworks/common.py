"""Helpers of the tests of docs/frameworks: a wrapper that saves what every worker held at
the end, and skips when a framework is not installed (`make test-extras` installs them
all). Their launchers are harness/frameworks.py's.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import tempfile
from pathlib import Path

import numpy as np
import pytest

from harness.frameworks import TF_VENV
from harness.launch import Result, run, shared, snippet

#: Importing TensorFlow takes seconds per process, minutes on a busy machine.
TF_TIMEOUT = 600


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _needs(ok: bool, what: str):
    return pytest.mark.skipif(not ok, reason=f"needs {what}: run `make test-extras`, which installs it")


needs_horovod = _needs(_installed("horovod"), "Horovod built for this torch (build_horovod.sh)")
needs_accelerate = _needs(_installed("accelerate"), "Hugging Face Accelerate")
needs_tensorflow = _needs((TF_VENV / ".installed").is_file(), "TensorFlow in .venv-tf")


# Run by the test in place of the snippet: it runs the snippet's main() unchanged and,
# when main() returns, saves the parameters its local `model` holds then to
# params-rank<N>.npz in the working directory (every replica's copy for TensorFlow's
# mirrored variables) and notes that rank N ended. The tests compare these files.
# Each rank's standard output also goes to stdout-rank<N>.txt: where several processes
# print, their lines can interleave in the launcher's one stream.
EVERY_RANK_SAVES = '''\
import json, os, runpy, sys
import numpy as np

script = sys.argv[1]
sys.argv = sys.argv[1:]
snippet = runpy.run_path(script, run_name="snippet")
held = {}

def watch(frame, event, arg):
    if event == "return" and frame.f_code is snippet["main"].__code__:
        held["model"] = frame.f_locals.get("model")

def rank():
    for name in ("RANK", "HOROVOD_RANK", "OMPI_COMM_WORLD_RANK"):
        if name in os.environ:
            return int(os.environ[name])
    return json.loads(os.environ.get("TF_CONFIG", '{"task": {"index": 0}}'))["task"]["index"]

def arrays(model):
    if hasattr(model, "parameters"):  # torch
        return [p.detach().cpu().numpy() for p in model.parameters()]
    out = []  # Keras: every replica's copy of every variable
    for v in model.weights:
        copies = getattr(v, "values", None) or getattr(getattr(v, "value", None), "values", None)
        out.extend(np.asarray(c) for c in (copies or [v]))
    return out

class Tee:
    def __init__(self, stream, path):
        self.stream, self.copy = stream, open(path, "w")
    def write(self, text):
        self.copy.write(text)
        self.copy.flush()
        return self.stream.write(text)
    def __getattr__(self, name):
        return getattr(self.stream, name)

sys.stdout = Tee(sys.stdout, f"stdout-rank{rank()}.txt")
sys.setprofile(watch)
try:
    snippet["main"]()
finally:
    sys.setprofile(None)
r = rank()
np.savez(f"params-rank{r}.npz", *arrays(held["model"]))
ranks_dir = os.environ.get("SNIPPET_HARNESS_RANKS_DIR")
if ranks_dir:
    open(os.path.join(ranks_dir, str(r)), "w").close()
'''


def run_every_rank_saves(script: str, *args: str, **kwargs) -> Result:
    """Run a snippet through EVERY_RANK_SAVES; the result reads as the snippet's own run."""
    workdir = Path(tempfile.mkdtemp(prefix="frameworks-"))
    wrapper = workdir / "every_rank_saves.py"
    wrapper.write_text(EVERY_RANK_SAVES)
    result = run(wrapper, str(snippet(script)), *args, workdir=workdir, **kwargs)
    return dataclasses.replace(result, script=snippet(script))


@shared
def horovodrun() -> Result:
    """What docs/frameworks/horovod.md tells readers to run first: horovod_train.py under
    horovodrun with Horovod's Gloo controller (its test, and the DDP translation's, compare
    with it)."""
    return run_every_rank_saves("frameworks/horovod_train.py", launcher="horovodrun", nproc=2)


def rank_stdout(result: Result, rank: int) -> str:
    """What one rank printed, from a run through EVERY_RANK_SAVES."""
    return (result.workdir / f"stdout-rank{rank}.txt").read_text()


def saved(result: Result, rank: int) -> list[np.ndarray]:
    with np.load(result.workdir / f"params-rank{rank}.npz") as f:
        return [f[f"arr_{i}"] for i in range(len(f.files))]


def assert_every_rank_holds_the_same(result: Result, world: int) -> list[np.ndarray]:
    """Every rank's parameters equal rank 0's, bit for bit; return rank 0's."""
    first = saved(result, 0)
    for rank in range(1, world):
        other = saved(result, rank)
        assert len(other) == len(first)
        for a, b in zip(first, other):
            np.testing.assert_array_equal(a, b, err_msg=f"rank {rank} differs from rank 0")
    return first
