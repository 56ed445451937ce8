"""snippets/troubleshooting/mismatch.py, shown on docs/troubleshooting/hangs.md."""

import os
import pickle
import re
import runpy
import tempfile
from pathlib import Path

import pytest
import torch

from harness import torch_versions
from harness.launch import run, shared, snippet
from harness.outputs import BARRIER_WARNING
from tests.compare import load, saved_from
from tests.devices import CPU, on_each_device
from tests.on_gpus import NcclLogs
from tests.troubleshooting.common import GLOO_ERROR, check_errors, error_lines, run_together

SNIPPET = "troubleshooting/mismatch.py"
TIMEOUT = 5  # seconds, as the page's command says


@shared
def runs(device):
    """At once: the snippet as shown, with the page's collective timeout (on GPUs a longer
    one, as NCCL starts slower) (``bug``), and with ``--fix`` (``fix``), their processes on
    NCCL on GPUs; on the CPU also the fixed script under TORCH_DISTRIBUTED_DEBUG=DETAIL
    (``detail``). At world size 1 (the one-GPU case) only ``fix``: rank 0 alone in a
    collective is no mismatch there, as no other rank exists."""
    ranks = device.ranks(2)
    common = dict(script=SNIPPET, launcher="torchrun", nproc=ranks,
                  timeout=device.pick(90, 240), check=False)
    launches = {}
    if ranks > 1:
        launches["bug"] = dict(common, args=["--timeout", str(device.pick(TIMEOUT, 20))],
                               env=device.env("bug"))
    launches["fix"] = dict(common, args=["--fix"], env=device.env("fix"),
                           workdir=Path(tempfile.mkdtemp(prefix="fix-")))
    if not device.gpus:
        launches["detail"] = dict(common, args=["--fix"],
                                  env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"})
    runs = run_together(**launches)
    for name in ("bug", "fix"):  # training's all-reduces, before the mismatch in bug
        if name in runs:
            device.assert_ran(ranks, name, runs[name])
    return runs


@on_each_device(gpus=2)
def test_rank_0_alone_in_a_collective_fails_both_ranks_after_the_timeout(device):
    """On GPUs, NCCL may pair rank 0's all-reduce with rank 1's barrier (a one-element
    all-reduce) and go on, but rank 0 calls three collectives more than rank 1 in all: the
    job cannot end well, and the timeout ends it."""
    result = runs(device)["bug"]
    assert not result.timed_out and result.returncode != 0, result.report()
    assert BARRIER_WARNING not in result.text
    if not device.cuda:  # what only the CPU run shows
        assert "validation loss" not in result.stdout  # rank 0 never got past evaluate()
        lines = error_lines(result)
        assert {line[:7] for line in lines} == {"[rank0]", "[rank1]"}, result.report()
        # the first rank to give up says why; the other may only see that it left
        assert any(f"Timed out waiting {TIMEOUT * 1000}ms" in line for line in lines), lines
        assert all(re.search(GLOO_ERROR, line) for line in lines), lines
        check_errors(result, "hang", lines)


@on_each_device(gpus=2, one_gpu=True)
def test_when_every_rank_evaluates_the_loss_is_that_of_the_whole_validation_set(device):
    """On GPUs too (on one GPU, at world size 1), and its barrier names its GPU (torch
    does not warn of it)."""
    result = runs(device)["fix"]
    assert result.ok, result.report()
    device.check_output(result, "fix")
    printed = [float(line.split()[-1]) for line in result.stdout.splitlines()
               if "validation loss" in line]
    assert len(printed) == 3 and printed[0] > printed[1] > printed[2]
    assert BARRIER_WARNING not in result.text
    # rank 0 saved its replica from its own device: on GPUs, the first one
    assert saved_from(result.workdir / "checkpoint.pt") == {device.pick("cpu", "cuda:0")}
    if not device.cuda:  # what only the CPU run shows
        # the all-reduced mean over both ranks' shares equals the mean over the whole set
        code = runpy.run_path(str(snippet(SNIPPET)))
        x, y = code["make_data"](64, seed=2).tensors
        model = torch.nn.Linear(8, 1)
        model.load_state_dict(load(result.workdir / "checkpoint.pt"))
        with torch.no_grad():
            whole = torch.nn.functional.mse_loss(model(x), y).item()
        assert printed[-1] == pytest.approx(whole, abs=5e-5)


#: From this release on (2.8.0 to 2.15.0 were tried), TORCH_DISTRIBUTED_DEBUG=DETAIL with
#: gloo kills DDP as it is created; on 2.6.0 the fixed script runs under it.
DETAIL_CRASHES_FROM = (2, 8)


def test_detail_makes_ddp_crash_on_gloo_from_2_8():
    result = runs(CPU)["detail"]
    if torch_versions.key(torch.__version__) >= DETAIL_CRASHES_FROM:
        assert result.returncode != 0 and "Signal 11 (SIGSEGV)" in result.text, result.report()
        assert "validation loss" not in result.stdout
    else:
        assert result.returncode == 0, result.report()
        assert result.stdout.count("validation loss") == 3


@pytest.mark.multigpu(2)
def test_on_gpus_detail_names_the_mismatched_collectives(tmp_path):
    logs = NcclLogs()
    result = run(SNIPPET, "--timeout", "60", launcher="torchrun", nproc=2, check=False,
                 timeout=120, env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL", **logs.env})
    assert result.returncode != 0
    logs.assert_nccl_ran(2)  # training's all-reduces went through NCCL
    assert "Detected mismatch between collectives on ranks" in result.text, result.report()
    assert "OpType=ALLREDUCE" in result.text and "OpType=BARRIER" in result.text
    assert "validation loss" not in result.stdout  # stopped before NCCL ran either


@pytest.mark.multigpu(2)
def test_on_gpus_nccl_debug_logs_and_the_flight_recorder_dumps(tmp_path):
    env = {"NCCL_DEBUG": "INFO", "TORCH_FR_BUFFER_SIZE": "2000",
           "TORCH_NCCL_DUMP_ON_TIMEOUT": "1", "TORCH_FR_DUMP_TEMP_FILE": str(tmp_path / "fr_")}
    result = run(SNIPPET, "--timeout", "20", launcher="torchrun", nproc=2, check=False,
                 timeout=180, env=env)
    assert result.returncode != 0
    assert "NCCL INFO" in result.text, result.report()
    dumps = sorted(tmp_path.glob("fr_*"))
    assert [d.name for d in dumps] == ["fr_0", "fr_1"], os.listdir(tmp_path)
    for dump in dumps:
        entries = pickle.loads(dump.read_bytes())["entries"]
        assert any("all_reduce" in e["profiling_name"] for e in entries)
