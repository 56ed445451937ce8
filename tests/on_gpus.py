"""What a multigpu test asserts about its run: that it took the GPU path, CUDA with NCCL.

A process that finds no GPU (a CPU-only build of torch, a job given no GPUs, a GPU hidden
by CUDA_VISIBLE_DEVICES) takes every snippet's gloo + CPU path, prints the figures of the
CPU run the pages show, and would pass a test that reads only those. So every multigpu
test asserts the GPU path with one of these (tests/harness/test_on_gpus.py shows that each
rejects a CPU run):

* :func:`assert_gpu_path`: the snippet says so itself, in lines such as
  ``world size 2 (nccl on cuda)`` or ``rank 1 ... cuda:1``;
* :class:`NcclLogs`: NCCL says so, for a snippet that prints neither its backend nor its
  device. With ``NCCL_DEBUG=INFO`` and ``NCCL_DEBUG_FILE``, every process in which NCCL
  ran writes its log to a file of its own (NCCL expands ``%h`` and ``%p`` to the host and
  the process id), and only NCCL writes them: a process that talked over gloo writes none.
  NCCL runs on CUDA devices only; each line names the CUDA device of the process, as
  ``host:pid:tid [device] NCCL INFO ...``;
* :func:`run_seeing_gpus` and :func:`assert_saw_gpus`: for a script that never asks for a
  device, the GPUs its process saw (``torch.cuda.device_count()``), said on standard
  error once the script has ended, so its standard output is the script's alone.
"""

from __future__ import annotations

import collections
import dataclasses
import re
import tempfile
from pathlib import Path

from harness.launch import Result, run, snippet

#: How torch prints a CUDA device: ``cuda`` or ``cuda:1``.
CUDA_DEVICE = re.compile(r"cuda(:\d+)?")


def assert_gpu_path(text: str, pattern: str, count: int | None = None) -> list[re.Match]:
    """Every line of ``text`` that ``pattern`` matches names the GPU path, and at least
    one does (exactly ``count``, when given): the pattern's group ``backend``, where it
    has one, is ``nccl``; its group ``device``, where it has one, a CUDA device. Returns
    the matches."""
    compiled = re.compile(pattern, re.M)
    groups = {"backend", "device"} & compiled.groupindex.keys()
    assert groups, f"{pattern!r} has no group named backend or device"
    matches = list(compiled.finditer(text))
    assert matches, f"no line says how the run went ({pattern!r}):\n{text}"
    if count is not None:
        assert len(matches) == count, f"{len(matches)} lines match {pattern!r}, not {count}"
    for m in matches:
        line = m[0]
        if "backend" in groups:
            assert m["backend"] == "nccl", f"not NCCL: {line}"
        if "device" in groups:
            assert CUDA_DEVICE.fullmatch(m["device"]), f"not a CUDA device: {line}"
    return matches


#: A line NCCL logs at the INFO level: ``host:pid:tid [CUDA device] NCCL INFO ...``.
NCCL_INFO = re.compile(r"^(?:\[[^]]*\] )?\S+:\d+:\d+ \[(\d+)\] NCCL INFO ", re.M)


class NcclLogs:
    """A folder for NCCL's logs: pass :attr:`env` to the run (a job script passes it on to
    its tasks), then :meth:`assert_nccl_ran`. A folder of its own for each run: NCCL
    names a file by host and process id, and a later run could reuse an id."""

    def __init__(self, folder: Path | None = None):
        self.folder = Path(folder or tempfile.mkdtemp(prefix="nccl-logs-"))
        self.folder.mkdir(parents=True, exist_ok=True)  # NCCL makes no folder
        self.env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": str(self.folder / "nccl.%h.%p.log")}

    def files(self) -> list[Path]:
        return sorted(self.folder.glob("nccl.*.log"))

    def assert_nccl_ran(self, processes: int) -> list[int]:
        """NCCL ran in ``processes`` processes, each on a CUDA device: one log each, with
        NCCL's INFO lines. Returns the CUDA device of each process, in the order of the
        files' names: the device most of its lines name (a thread that has not chosen a
        device says 0)."""
        logs = self.files()
        assert len(logs) == processes, (
            f"NCCL ran in {len(logs)} processes, not {processes} (a process on gloo "
            f"writes no log): {[log.name for log in logs]}")
        devices = []
        for log in logs:
            found = collections.Counter(NCCL_INFO.findall(log.read_text(errors="replace")))
            assert found, f"{log.name} has no line of NCCL's"
            devices.append(int(found.most_common(1)[0][0]))
        return devices


#: Runs a script as ``python script.py args`` does, then says how many CUDA GPUs its
#: process saw.
SEES_GPUS = """\
import runpy, sys
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    import torch
    print(f"this process saw {torch.cuda.device_count()} CUDA GPU(s)", file=sys.stderr)
"""


def run_seeing_gpus(script: str, *args: str, **kwargs) -> Result:
    """:func:`harness.launch.run` of a snippet through :data:`SEES_GPUS`; the result reads
    as the snippet's own run."""
    workdir = Path(kwargs.pop("workdir", None) or tempfile.mkdtemp(prefix="sees-gpus-"))
    workdir.mkdir(parents=True, exist_ok=True)
    wrapper = workdir / "sees_gpus.py"
    wrapper.write_text(SEES_GPUS)
    result = run(wrapper, str(snippet(script)), *args, workdir=workdir, **kwargs)
    return dataclasses.replace(result, script=snippet(script))


def assert_saw_gpus(result: Result, gpus: int = 1) -> int:
    """The run's process saw at least ``gpus`` CUDA GPUs; returns how many."""
    said = re.findall(r"^this process saw (\d+) CUDA GPU\(s\)$", result.outputs[0].stderr, re.M)
    assert said, result.report()
    assert int(said[-1]) >= gpus, f"the run saw {said[-1]} CUDA GPUs, not {gpus} or more"
    return int(said[-1])
