"""snippets/troubleshooting/crash.py, shown on docs/troubleshooting/crashes.md: rank 1 of
2 dies of SIGSEGV at step 3; torchrun's summary names the rank and the signal, and the
rank's fault handler file holds the Python stack it died in."""

import re
import shutil

import pytest

from harness.launch import run, snippet
from harness.outputs import check_text
from tests.on_gpus import NcclLogs

SNIPPET = "troubleshooting/crash.py"


def root_cause(text: str) -> str:
    """torchrun's "Root Cause" block: the first failure it observed."""
    block = re.search(r"(?ms)^Root Cause \(first observed failure\):\n.*?(?=^=+$)", text)
    assert block, text
    return block[0]


def stack(log: str) -> list[str]:
    """The functions of the crashed thread, innermost first, from faulthandler's output."""
    thread = log.split("\n\n")[1]
    return re.findall(r'(?m)^  File ".*", line \d+ in (\S+)$', thread)


def assert_rank_1_died_of_sigsegv(result) -> tuple[str, str]:
    assert not result.timed_out and result.returncode == 1, result.report()
    steps = re.findall(r"(?m)^step (\d+): loss ", result.stdout)
    assert steps == ["0", "1", "2"], result.stdout  # step 3 never finished
    cause = root_cause(result.text)
    assert re.search(r"(?m)^  rank +: 1 \(local_rank: 1\)$", cause), cause
    assert re.search(r"(?m)^  exitcode +: -11 \(pid: \d+\)\s+\(SIGSEGV\)$", cause), cause
    assert re.search(r"(?m)^  traceback : Signal 11 \(SIGSEGV\) received by PID \d+$", cause)
    log = (result.workdir / "crash-rank1.log").read_text()
    assert log.startswith("Fatal Python error: Segmentation fault\n"), log
    assert stack(log) == ["string_at", "faulty_extension", "main", "<module>"], log
    assert (result.workdir / "crash-rank0.log").read_text() == ""  # rank 0 was stopped
    return cause, log


def run_copy(folder, timeout, env=None):
    """torchrun on a copy of the snippet in ``folder``, as a reader runs their copy: the
    paths in the stack are the copy's."""
    script = shutil.copy(snippet(SNIPPET), folder)
    return run(script, launcher="torchrun", nproc=2, timeout=timeout, check=False,
               workdir=folder, env=env)


def test_torchrun_names_the_rank_and_its_signal_and_the_rank_left_its_stack(tmp_path):
    result = run_copy(tmp_path, 90)
    cause, log = assert_rank_1_died_of_sigsegv(result)
    check_text(result.stdout, SNIPPET)
    check_text(cause, SNIPPET, "summary")
    check_text(log, SNIPPET, "faulthandler")


@pytest.mark.multigpu(2)
def test_on_gpus(tmp_path):
    logs = NcclLogs()
    result = run_copy(tmp_path, 180, env=logs.env)
    assert_rank_1_died_of_sigsegv(result)
    logs.assert_nccl_ran(2)  # steps 0 to 2 all-reduced over NCCL
