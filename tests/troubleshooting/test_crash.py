"""snippets/troubleshooting/crash.py, shown on docs/troubleshooting/crashes.md: rank 1 of
2 dies of SIGSEGV at step 3; torchrun's summary names the rank and the signal, and the
rank's fault handler file holds the Python stack it died in."""

import re
import shutil

from harness.launch import run, snippet
from harness.outputs import check_text
from tests.devices import on_each_device

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


@on_each_device(gpus=2)
def test_torchrun_names_the_rank_and_its_signal_and_the_rank_left_its_stack(tmp_path, device):
    result = run_copy(tmp_path, device.pick(90, 180), env=device.env())
    cause, log = assert_rank_1_died_of_sigsegv(result)
    device.assert_ran(2, result=result)  # on GPUs, steps 0 to 2 all-reduced over NCCL
    if not device.cuda:  # the pages show the CPU run
        check_text(result.stdout, SNIPPET)
        check_text(cause, SNIPPET, "summary")
        check_text(log, SNIPPET, "faulthandler")
