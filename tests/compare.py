"""What the tests compare, said once: checkpoints read back, state dicts within a
tolerance, and outputs without the lines of libraries that are not the snippet's.
"""

import dataclasses
import re

import torch

from harness.launch import Result


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
