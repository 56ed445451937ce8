"""What the tests compare, said once: checkpoints read back, state dicts within a
tolerance, outputs without the lines of libraries that are not the snippet's, and what
every rank held at the end of a run (run_every_rank_saves).
"""

import dataclasses
import re
import tempfile
from pathlib import Path

import numpy as np
import torch

from harness.launch import Result, run, snippet


def load(path, map_location="cpu"):
    """A checkpoint a snippet saved, read as plain tensors (``weights_only``), on the CPU;
    ``map_location=None`` reads it where it was saved."""
    return torch.load(path, map_location=map_location, weights_only=True)


def saved_from(path) -> set[str]:
    """Where the tensors of a checkpoint were when it was saved ("cpu", "cuda:0"): read
    on the CPU, so that no GPU is needed to say it."""
    where = set()
    torch.load(path, map_location=lambda storage, location: where.add(location) or storage,
               weights_only=True)
    return where


def assert_same_state(actual: dict, expected: dict, atol: float = 0.0, what: str = "") -> None:
    """The same keys, and every value (a tensor, or a nested state) equal to ``expected``'s
    within ``atol``, with no relative tolerance: at ``atol=0``, bit for bit. ``what``
    names the state in a failure's message."""
    assert actual.keys() == expected.keys(), (what, sorted(actual), sorted(expected))
    for key, value in expected.items():
        torch.testing.assert_close(actual[key], value, rtol=0, atol=atol,
                                   msg=lambda m, key=key: f"{what}{key}: {m}")


#: DeepSpeed's log lines with time stamps, its launcher's, and the CPU-only operator build
#: (a whole line each), which are not the snippet's output.
DS_NOISE = re.compile(r"^(\[\d{4}-\d\d-\d\d [^\]]*\] .*|DeepSpeed .* built successfully)$")
#: Accelerate imports DeepSpeed when it is installed, and DeepSpeed then prints this
#: to stdout; the pages show runs without it.
DEEPSPEED_NOISE = re.compile(r"^\[[^]]*\] \[WARNING\] \[real_accelerator\.py.*\n?", re.M)


def without_deepspeed_logs(result: Result) -> str:
    """A run's stdout without DeepSpeed's time-stamped log lines (DS_NOISE), for check_text."""
    lines = [line for line in result.stdout.splitlines() if not DS_NOISE.match(line)]
    return "\n".join(lines) + "\n"


def without_deepspeed_noise(result: Result) -> Result:
    """The run, every process's stdout without DeepSpeed's warning (DEEPSPEED_NOISE)."""
    outputs = [dataclasses.replace(o, stdout=DEEPSPEED_NOISE.sub("", o.stdout)) for o in result.outputs]
    return dataclasses.replace(result, outputs=outputs)


# Run by the test in place of the snippet: it runs the snippet's main() unchanged and saves
# the parameters that the `model` of the snippet's function that returned last held then
# (main's, or the training function's that main calls) to params-rank<N>.npz in the working
# directory (every replica's copy for TensorFlow's mirrored variables), and notes that rank
# N ended. The tests compare these files. Each rank's standard output also goes to
# stdout-rank<N>.txt: where several processes print, their lines can interleave in the
# launcher's one stream.
EVERY_RANK_SAVES = '''\
import json, os, runpy, sys
import numpy as np

script = sys.argv[1]
sys.argv = sys.argv[1:]
snippet = runpy.run_path(script, run_name="snippet")
code = snippet["main"].__code__.co_filename
held = {}

def watch(frame, event, arg):
    if (event == "return" and frame.f_code.co_filename == code
            and frame.f_locals.get("model") is not None):
        held["model"] = frame.f_locals["model"]

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


def run_every_rank_saves(script: str, *args: str, workdir: Path | None = None,
                         **kwargs) -> Result:
    """Run a snippet through EVERY_RANK_SAVES; the result reads as the snippet's own run."""
    workdir = workdir or Path(tempfile.mkdtemp(prefix="every-rank-saves-"))
    workdir.mkdir(parents=True, exist_ok=True)
    wrapper = workdir / "every_rank_saves.py"
    wrapper.write_text(EVERY_RANK_SAVES)
    result = run(wrapper, str(snippet(script)), *args, workdir=workdir, **kwargs)
    return dataclasses.replace(result, script=snippet(script))


def rank_stdout(result: Result, rank: int) -> str:
    """What one rank printed, from a run through EVERY_RANK_SAVES."""
    return (result.workdir / f"stdout-rank{rank}.txt").read_text()


def saved(result: Result, rank: int) -> list[np.ndarray]:
    """The parameters one rank held at the end, from a run through EVERY_RANK_SAVES."""
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
