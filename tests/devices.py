"""One test for every device: a claim is written once and checked on the CPU with gloo
(where CI runs it) and on GPUs with NCCL (``make test-gpu``).

A test decorated with ``@on_each_device(gpus=N)`` runs once per device, with a ``device``
argument: ``cpu`` always, ``N-gpus`` marked ``multigpu(N)``, so that it is skipped, with
the reason, where fewer GPUs are visible. With ``one_gpu=True`` it also runs as ``1-gpu``
(marked ``multigpu(1)``): the same command at world size 1, one process under NCCL on
``cuda:0``, which shows almost every mistake of a script's CUDA path on any one-GPU
machine (``tools/gpu-check``). What differs between the runs is asked of ``device``,
never written twice:

* ``device.ranks(n)``: how many processes the run starts: ``n`` on the CPU, one per GPU
  (at most ``n``) on GPUs;
* ``device.cuda``: whether the run is on GPUs; ``device.type`` and ``device.backend``:
  ``cpu``/``gloo`` or ``cuda``/``nccl``, as the snippets print them;
* ``device.pick(cpu, gpu)``: a value per device (a timeout, a tolerance);
* ``device.env(name)``: the environment of a run: on GPUs NCCL's logs go to a folder of the
  run's own (tests/on_gpus.NcclLogs), so that ``device.assert_ran`` can read them;
* ``device.assert_ran(processes, name, result)``: on GPUs, NCCL ran in that many processes
  of the run (the GPU path, not the CPU fallback); on the CPU nothing more to check;
* ``device.check_output(result, ...)``: on the CPU, compare with the output the page shows;
  on GPUs nothing (the pages show the CPU runs; the figures differ in their last digits).

With SNIPPET_HARNESS_REHEARSE=1 (``make rehearse``) a machine without GPUs runs the
``1-gpu`` cases on its CPU, with gloo at world size 1: everything but the CUDA path
(``device.cuda`` is False), so that a one-GPU test's own logic has run before the short
GPU allocation that runs it for real.
"""

from __future__ import annotations

import dataclasses
import os

import pytest

from harness.launch import REHEARSE_ENV, Result
from harness.outputs import check_output
from tests.on_gpus import NcclLogs


@dataclasses.dataclass(frozen=True)
class Device:
    gpus: int  # 0: the CPU

    @property
    def cuda(self) -> bool:
        """The run is on GPUs (a 1-gpu case rehearsed on the CPU is not)."""
        return bool(self.gpus) and not (self.gpus == 1 and os.environ.get(REHEARSE_ENV))

    @property
    def type(self) -> str:
        return "cuda" if self.cuda else "cpu"

    @property
    def backend(self) -> str:
        return "nccl" if self.cuda else "gloo"

    def ranks(self, n: int) -> int:
        """The processes of a run that starts ``n`` on the CPU: one per GPU on GPUs."""
        return min(n, self.gpus) if self.gpus else n

    def pick(self, cpu, gpu):
        return gpu if self.cuda else cpu

    def env(self, name: str = "") -> dict[str, str]:
        if not self.cuda:
            return {}
        logs = _LOGS[name] = NcclLogs()
        return logs.env

    def assert_ran(self, processes: int, name: str = "", result: Result | None = None) -> None:
        if not self.cuda:
            return
        logs = _LOGS[name]
        assert logs.files(), result.report() if result else "no NCCL logs"  # say why
        logs.assert_nccl_ran(processes)

    def check_output(self, result: Result, *args, **kwargs) -> None:
        if not self.gpus:
            check_output(result, *args, **kwargs)


#: The NCCL logs of the current test's runs, by name (a test's runs on GPUs are its own).
_LOGS: dict[str, NcclLogs] = {}

CPU = Device(0)


def on_each_device(gpus: int, one_gpu: bool = False):
    """Run the test on the CPU, on ``gpus`` GPUs where there are so many, and, with
    ``one_gpu``, at world size 1 on one GPU."""
    counts = [gpus] + ([1] if one_gpu and gpus > 1 else [])
    return pytest.mark.parametrize("device", [pytest.param(CPU, id="cpu")] + [
        pytest.param(Device(n), id=f"{n}-gpu" + "s" * (n > 1), marks=[pytest.mark.multigpu(n)]
                     + [pytest.mark.one_gpu] * (n == 1))
        for n in counts])
