"""Helpers of the tests of docs/frameworks: launchers for Horovod, Accelerate and
TensorFlow workers, a wrapper that saves what every worker held at the end, and skips
when a framework is not installed (`make test-extras` installs them all).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from harness.launch import (BIN, DEVICE_ENV, ROOT, Launch, Proc, Result, free_port, launcher, run,
                            snippet)

#: TensorFlow lives in a venv of its own; `make test-extras` creates it.
TF_VENV = ROOT / ".venv-tf"
TF_PYTHON = TF_VENV / "bin" / "python"
#: Importing TensorFlow takes seconds per process, minutes on a busy machine.
TF_TIMEOUT = 600


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _needs(ok: bool, what: str):
    return pytest.mark.skipif(not ok, reason=f"needs {what}: run `make test-extras`, which installs it")


needs_horovod = _needs(_installed("horovod"), "Horovod built for this torch (build_horovod.sh)")
needs_accelerate = _needs(_installed("accelerate"), "Hugging Face Accelerate")
needs_tensorflow = _needs((TF_VENV / ".installed").is_file(), "TensorFlow in .venv-tf")


@launcher("horovodrun")
def _horovodrun(l: Launch) -> list[Proc]:
    """``horovodrun -np N -H localhost:N --gloo python script.py`` (``--gloo``: without MPI)."""
    n = l.nproc * l.nnodes
    return [Proc("horovodrun", [str(BIN / "horovodrun"), "-np", str(n), "-H", f"localhost:{n}",
                                "--gloo", sys.executable, str(l.script), *l.args])]


@launcher("accelerate")
def _accelerate(l: Launch) -> list[Proc]:
    """``accelerate launch FLAGS script.py``, FLAGS from the option ``flags``; the run's port."""
    return [Proc("accelerate", [str(BIN / "accelerate"), "launch", *l.options["flags"],
                                "--main_process_port", str(l.port), str(l.script), *l.args])]


def tf_gpus(l: Launch) -> dict[str, str]:
    """The environment that hides the GPUs from TensorFlow in the run of a test not marked
    multigpu: CUDA_VISIBLE_DEVICES empty, unless the test names GPUs itself. TensorFlow
    gets no patch like PyTorch's (harness/site/sitecustomize.py); where .venv-tf has CUDA,
    each worker would otherwise take every GPU of the node, and print so."""
    if os.environ.get(DEVICE_ENV) == "cpu" and "CUDA_VISIBLE_DEVICES" not in l.env:
        return {"CUDA_VISIBLE_DEVICES": ""}
    return {}


@launcher("tf-python")
def _tf_python(l: Launch) -> list[Proc]:
    """``python script.py`` with the TensorFlow venv's Python."""
    return [Proc("python", [str(TF_PYTHON), str(l.script), *l.args], tf_gpus(l))]


@launcher("tf-workers")
def _tf_workers(l: Launch) -> list[Proc]:
    """One TensorFlow worker per node, each told the cluster and its place in TF_CONFIG,
    as the job script of docs/frameworks/tensorflow.md does."""
    ports = [l.port] + [free_port() for _ in range(l.nnodes - 1)]
    workers = [f"127.0.0.1:{port}" for port in ports]
    return [Proc(f"worker{i}", [str(TF_PYTHON), str(l.script), *l.args], {
        "TF_CONFIG": json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}}),
        **tf_gpus(l),
    }) for i in range(l.nnodes)]


@launcher("tf-srun")
def _tf_srun(l: Launch) -> list[Proc]:
    """One task per process with the variables srun sets, on one node called localhost;
    ``--port`` gives the first worker's port (the others use the next ones)."""
    world = l.nproc * l.nnodes
    return [Proc(f"task{rank}", [str(TF_PYTHON), str(l.script), *l.args, "--port", str(l.port)], {
        "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(rank), "SLURM_STEP_NUM_TASKS": str(world),
        "SLURM_STEP_NODELIST": "localhost", "SLURM_STEP_TASKS_PER_NODE": str(world),
        **tf_gpus(l),
    }) for rank in range(world)]


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


#: Accelerate imports DeepSpeed when it is installed, and DeepSpeed then prints this
#: to stdout; the pages show runs without it.
DEEPSPEED_NOISE = re.compile(r"^\[[^]]*\] \[WARNING\] \[real_accelerator\.py.*\n?", re.M)


def without_deepspeed_noise(result: Result) -> Result:
    outputs = [dataclasses.replace(o, stdout=DEEPSPEED_NOISE.sub("", o.stdout)) for o in result.outputs]
    return dataclasses.replace(result, outputs=outputs)


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
