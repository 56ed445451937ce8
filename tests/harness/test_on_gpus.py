"""tests/on_gpus.py: the checks every multigpu test makes of its run reject a run that
took the gloo + CPU path, and accept one that took the GPU path. They cannot run on GPUs
here: these tests feed them the CPU runs the pages show, and the same lines as a GPU run
prints them."""

import re
from pathlib import Path

import pytest

from harness.launch import DEVICE_ENV, FAKE_GPUS_ENV, SNIPPETS, run
from harness.outputs import check_output
from tests.on_gpus import NcclLogs, assert_gpu_path, assert_saw_gpus, run_seeing_gpus

#: (captured output, pattern a multigpu test reads it with, the line on GPUs).
PRINTED = [
    ("quickstart/train.out", r"^\d+ processes \((?P<backend>\w+) on (?P<device>\w+)\)",
     "2 processes (nccl on cuda), 32 images per step"),
    ("ddp/train.out", r"^world size \d+ \((?P<backend>\w+), (?P<device>\w+)\): ",
     "world size 2 (nccl, cuda): 2 × 16 = 32 samples per step, 32 steps per epoch"),
    ("troubleshooting/allreduce_bw.out",
     r"^all_reduce, .*, (?P<backend>\w+) on (?P<device>\w+): busbw",
     "all_reduce, 4 processes on 1 node, nccl on cuda: busbw = algbw x 1.5"),
    ("basics/ranks.out", r"^ +\d+ +\d+ +\d+  (?P<device>\S+)$",
     "   0     0           0  cuda:0"),
    ("performance/message_passing.out", r"^\d+ processes, backend (?P<backend>\w+)$",
     "4 processes, backend nccl"),
]


@pytest.mark.parametrize("out, pattern, gpu_line", PRINTED, ids=[p[0] for p in PRINTED])
def test_a_printed_cpu_path_fails_and_the_gpu_path_passes(out, pattern, gpu_line):
    cpu = (SNIPPETS / out).read_text()
    with pytest.raises(AssertionError, match="not NCCL|not a CUDA device"):
        assert_gpu_path(cpu, pattern)
    assert len(assert_gpu_path(gpu_line + "\n", pattern)) == 1


def test_every_matching_line_must_name_the_gpu_path():
    pattern = r"^rank \d+ on (?P<device>\S+)$"
    assert len(assert_gpu_path("rank 0 on cuda:0\nrank 1 on cuda:1\n", pattern, count=2)) == 2
    with pytest.raises(AssertionError, match="not a CUDA device: rank 1 on cpu"):
        assert_gpu_path("rank 0 on cuda:0\nrank 1 on cpu\n", pattern)
    with pytest.raises(AssertionError, match="2 lines match"):
        assert_gpu_path("rank 0 on cuda:0\nrank 1 on cuda:1\n", pattern, count=4)
    with pytest.raises(AssertionError, match="no line says how the run went"):
        assert_gpu_path("something else\n", pattern)
    with pytest.raises(AssertionError, match="no group named backend or device"):
        assert_gpu_path("rank 0 on cuda:0\n", r"^rank \d+ on cuda")


#: Lines of NCCL's log at the INFO level, as NCCL's debug.cc writes them (the time
#: stamp only where NCCL_DEBUG_TIMESTAMP_LEVELS asks for one).
NCCL_LOG = """\
gpu07:81234:81234 [1] NCCL INFO cudaDriverVersion 12080
gpu07:81234:81234 [1] NCCL INFO Bootstrap: Using ib0:10.1.0.7<0>
gpu07:81234:81290 [0] NCCL INFO a thread that has not chosen a device
[2026-11-24 10:01:02] gpu07:81234:81301 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM
"""


def test_nccl_logs_reject_a_gloo_run_and_accept_one_log_per_process(tmp_path):
    # A real run on the CPU, with the variables a multigpu test sets: gloo writes no log.
    logs = NcclLogs(tmp_path / "gloo")
    result = run("troubleshooting/connect.py", launcher="torchrun", nproc=2, env=logs.env)
    assert "using gloo" in result.stdout
    with pytest.raises(AssertionError, match=re.escape("NCCL ran in 0 processes, not 2")):
        logs.assert_nccl_ran(2)
    # What NCCL writes in a run on GPUs: one file per process.
    logs = NcclLogs(tmp_path / "nccl")
    assert logs.env["NCCL_DEBUG"] == "INFO"
    for pid, device in ((81233, 0), (81234, 1)):
        path = logs.env["NCCL_DEBUG_FILE"].replace("%h", "gpu07").replace("%p", str(pid))
        Path(path).write_text(NCCL_LOG.replace("[1] NCCL", f"[{device}] NCCL"))
    assert logs.assert_nccl_ran(2) == [0, 1]
    with pytest.raises(AssertionError, match="NCCL ran in 2 processes, not 4"):
        logs.assert_nccl_ran(4)
    logs.files()[0].write_text("some other program's lines\n")
    with pytest.raises(AssertionError, match="has no line of NCCL's"):
        logs.assert_nccl_ran(2)


def test_a_run_that_saw_no_gpu_fails_and_one_that_saw_them_passes():
    result = run_seeing_gpus("ddp/set_epoch.py")
    check_output(result)  # what the script printed, and nothing else
    with pytest.raises(AssertionError, match="the run saw 0 CUDA GPUs, not 1 or more"):
        assert_saw_gpus(result)
    # The harness's pretended GPUs, not hidden as in a test that is not multigpu:
    # torch.cuda.device_count() says 2.
    result = run_seeing_gpus("ddp/set_epoch.py", env={DEVICE_ENV: "", FAKE_GPUS_ENV: "2"})
    assert assert_saw_gpus(result, 2) == 2
    with pytest.raises(AssertionError, match="not 4 or more"):
        assert_saw_gpus(result, 4)
