"""snippets/troubleshooting/crash.py, shown on docs/troubleshooting/crashes.md: rank 1 of
2 dies of SIGSEGV at step 3; torchrun's summary names the rank and the signal, and the
rank's fault handler file holds the Python stack it died in. At world size 1 (the one-GPU
case) the only rank, rank 0, is the one that crashes (``--crash-rank 0``)."""

import re
import shutil

import torch

from harness import torch_versions
from harness.launch import run, snippet
from harness.outputs import check_text
from tests.devices import on_each_device

SNIPPET = "troubleshooting/crash.py"

#: From this release on torchrun's summary names the signal on its exitcode line too
#: (``exitcode  : -11 (pid: N)  (SIGSEGV)``, as the page shows); 2.11 printed
#: ``exitcode  : -11 (pid: N)`` and named the signal on the traceback line only
#: (docs/_data/gpu_reports/2026-11-26-h200).
SIGNAL_ON_EXITCODE_LINE_FROM = (2, 13)


def root_cause(text: str) -> str:
    """torchrun's "Root Cause" block: the first failure it observed."""
    block = re.search(r"(?ms)^Root Cause \(first observed failure\):\n.*?(?=^=+$)", text)
    assert block, text
    return block[0]


def stack(log: str) -> list[str]:
    """The functions of the crashed thread, innermost first, from faulthandler's output.
    faulthandler lists every thread Python knows, newest first, the one that crashed as
    "Current thread"; on a GPU a library's thread came before it, with no Python frame."""
    thread = next(block for block in log.split("\n\n") if block.startswith("Current thread"))
    return re.findall(r'(?m)^  File ".*", line \d+ in (\S+)$', thread)


def assert_the_rank_died_of_sigsegv(result, ranks: int = 2,
                                    signal_on_exitcode_line: bool = True) -> tuple[str, str]:
    """The last rank (rank 1 of 2, or rank 0 alone) died of SIGSEGV at step 3; with
    ``signal_on_exitcode_line``, torchrun's exitcode line names the signal as well."""
    crashed = ranks - 1
    assert not result.timed_out and result.returncode == 1, result.report()
    steps = re.findall(r"(?m)^step (\d+): loss ", result.stdout)
    assert steps == ["0", "1", "2"], result.stdout  # step 3 never finished
    cause = root_cause(result.text)
    assert re.search(rf"(?m)^  rank +: {crashed} \(local_rank: {crashed}\)$", cause), cause
    named = r"\s+\(SIGSEGV\)" if signal_on_exitcode_line else ""
    assert re.search(rf"(?m)^  exitcode +: -11 \(pid: \d+\){named}$", cause), cause
    assert re.search(r"(?m)^  traceback : Signal 11 \(SIGSEGV\) received by PID \d+$", cause)
    log = (result.workdir / f"crash-rank{crashed}.log").read_text()
    assert log.startswith("Fatal Python error: Segmentation fault\n"), log
    assert stack(log) == ["string_at", "faulty_extension", "main", "<module>"], log
    if ranks > 1:
        assert (result.workdir / "crash-rank0.log").read_text() == ""  # rank 0 was stopped
    return cause, log


def run_copy(folder, timeout, env=None, ranks: int = 2):
    """torchrun on a copy of the snippet in ``folder``, as a reader runs their copy: the
    paths in the stack are the copy's. At world size 1 rank 0 is the one to crash."""
    script = shutil.copy(snippet(SNIPPET), folder)
    args = ["--crash-rank", "0"] if ranks == 1 else []
    return run(script, *args, launcher="torchrun", nproc=ranks, timeout=timeout, check=False,
               workdir=folder, env=env)


@on_each_device(gpus=2, one_gpu=True)
def test_torchrun_names_the_rank_and_its_signal_and_the_rank_left_its_stack(tmp_path, device):
    ranks = device.ranks(2)
    result = run_copy(tmp_path, device.pick(90, 180), env=device.env(), ranks=ranks)
    # The one-GPU case runs on the GPU machine's release: there the exitcode line names
    # the signal from 2.13 on (the traceback line names it on every release).
    on_this_release = torch_versions.key(torch.__version__) >= SIGNAL_ON_EXITCODE_LINE_FROM
    cause, log = assert_the_rank_died_of_sigsegv(
        result, ranks, signal_on_exitcode_line=ranks > 1 or on_this_release)
    device.assert_ran(ranks, result=result)  # on GPUs, steps 0 to 2 all-reduced over NCCL
    if not device.cuda:  # the pages show the CPU run
        if ranks > 1:
            check_text(result.stdout, SNIPPET, command=result.command)
            check_text(cause, SNIPPET, "summary", command=result.command)
            check_text(log, SNIPPET, "faulthandler", command=result.command)
