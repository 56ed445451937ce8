"""One test for every device: a claim is written once and checked on the CPU with gloo
(where CI runs it) and on GPUs with NCCL (``make test-gpu``).

A test decorated with ``@on_each_device(gpus=N)`` runs once per device, with a ``device``
argument: ``cpu`` always, ``gpus`` marked ``multigpu(N)``, so that it is skipped, with
the reason, where fewer GPUs are visible. What differs between the two runs is asked of
``device``, never written twice:

* ``device.type`` and ``device.backend``: ``cpu``/``gloo`` or ``cuda``/``nccl``, as the
  snippets print them;
* ``device.pick(cpu, gpu)``: a value per device (a timeout, a tolerance);
* ``device.env(name)``: the environment of a run: on GPUs NCCL's logs go to a folder of the
  run's own (tests/on_gpus.NcclLogs), so that ``device.assert_ran`` can read them;
* ``device.assert_ran(processes, name, result)``: on GPUs, NCCL ran in that many processes
  of the run (the GPU path, not the CPU fallback); on the CPU nothing more to check;
* ``device.check_output(result, ...)``: on the CPU, compare with the output the page shows;
  on GPUs nothing (the pages show the CPU runs; the figures differ in their last digits).
"""

from __future__ import annotations

import dataclasses

import pytest

from harness.launch import Result
from harness.outputs import check_output
from tests.on_gpus import NcclLogs


@dataclasses.dataclass(frozen=True)
class Device:
    gpus: int  # 0: the CPU

    @property
    def type(self) -> str:
        return "cuda" if self.gpus else "cpu"

    @property
    def backend(self) -> str:
        return "nccl" if self.gpus else "gloo"

    def pick(self, cpu, gpu):
        return gpu if self.gpus else cpu

    def env(self, name: str = "") -> dict[str, str]:
        if not self.gpus:
            return {}
        logs = _LOGS[name] = NcclLogs()
        return logs.env

    def assert_ran(self, processes: int, name: str = "", result: Result | None = None) -> None:
        if not self.gpus:
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


def on_each_device(gpus: int):
    """Run the test on the CPU, and on ``gpus`` GPUs where there are so many."""
    return pytest.mark.parametrize("device", [
        pytest.param(CPU, id="cpu"),
        pytest.param(Device(gpus), id=f"{gpus}-gpus", marks=pytest.mark.multigpu(gpus)),
    ])
