"""On a GPU node, the tests not marked multigpu still run their snippets on the CPU.

This machine has no GPU, so the tests pretend to have some (SNIPPET_HARNESS_FAKE_GPUS):
PyTorch in every process the harness starts then answers like a CUDA build on a node
with GPUs, in torch.cuda and in what PyTorch was built for (torch._C._get_accelerator,
torch.accelerator), and a snippet that believed it would ask for NCCL and a CUDA device
and fail. conftest.py marks each test that is not multigpu, and
harness/site/sitecustomize.py hides the GPUs from its runs.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness import frameworks
from harness.launch import DEVICE_ENV, FAKE_GPUS_ENV, ROOT, SNIPPETS, run
from harness.outputs import check_text, split_command

PROBE = """\
import torch
print(torch.cuda.is_available(), torch.cuda.device_count(), torch._C._get_accelerator(),
      torch.accelerator.current_accelerator(), torch.accelerator.is_available(),
      torch.accelerator.device_count())
"""


def probe(tmp_path, device, fake_gpus=""):
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    env = {DEVICE_ENV: device, FAKE_GPUS_ENV: fake_gpus}
    return run(script, env=env, workdir=tmp_path).stdout


def test_the_gpus_a_run_sees(tmp_path):
    # Not hidden: what this machine's PyTorch says without the harness (on this kind of
    # machine "False 0 cpu None False 0": a CPU build; on a GPU node its GPUs)
    plain = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                           timeout=120, check=True).stdout
    assert probe(tmp_path, "") == plain
    assert probe(tmp_path, "", fake_gpus="2") == "True 2 cuda cuda True 2\n"
    # Hidden GPUs: what a CUDA build says where none is visible; it was built for CUDA
    assert probe(tmp_path, "cpu", fake_gpus="2") == "False 0 cuda cuda False 0\n"


def test_this_test_runs_on_the_cpu():
    assert os.environ[DEVICE_ENV] == "cpu"


def test_a_session_with_two_gpus_runs_the_cpu_tests_on_the_cpu(tmp_path):
    env = {**os.environ, FAKE_GPUS_ENV: "2", "UPDATE_OUTPUTS": "0"}
    env.pop(DEVICE_ENV, None)
    session = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:xdist", "-o",
         f"cache_dir={tmp_path / 'cache'}",
         "tests/basics/test_ranks.py::test_two_nodes_of_two_processes[cpu]",  # gloo, cpu
         # fully_shard without mesh= would shard onto the device of the build: cuda
         "tests/memory/test_fsdp2.py::test_bf16_compute_keeps_fp32_shards",
         "tests/model_parallel/test_hybrid_2d.py::"
         "test_four_ranks_give_the_loss_and_gradients_of_one_process[4-gpus]"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    report = session.stdout + session.stderr
    assert re.search(r"^2 passed, 1 skipped in ", session.stdout, re.M), report
    assert "needs 4 CUDA GPUs, this machine has 2" in session.stdout, report


def test_tensorflow_runs_of_a_cpu_test_see_no_gpu(tmp_path, monkeypatch):
    """TensorFlow's launchers hide the GPUs of a job (CUDA_VISIBLE_DEVICES, as Slurm sets
    it) in every CPU test, unless the test names GPUs itself; a multigpu test keeps them.
    This Python stands in for TensorFlow's: what matters is the environment it gets."""
    monkeypatch.setattr(frameworks, "TF_PYTHON", Path(sys.executable))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")  # a job's two GPUs
    script = tmp_path / "gpus.py"
    script.write_text("import os; print(repr(os.environ.get('CUDA_VISIBLE_DEVICES')))\n")

    def seen(launcher, env=None):
        result = run(script, launcher=launcher, nproc=2 if launcher == "tf-srun" else 1,
                     nnodes=2 if launcher == "tf-workers" else 1, world_size=0, env=env,
                     workdir=tmp_path)
        return [o.stdout for o in result.outputs]

    for launcher in ("tf-python", "tf-workers", "tf-srun"):
        processes = 1 if launcher == "tf-python" else 2
        assert seen(launcher) == ["''\n"] * processes, launcher
        assert seen(launcher, {"CUDA_VISIBLE_DEVICES": "1"}) == ["'1'\n"] * processes
        monkeypatch.delenv(DEVICE_ENV)  # as in a multigpu test
        assert seen(launcher) == ["'0,1'\n"] * processes, launcher
        monkeypatch.setenv(DEVICE_ENV, "cpu")


def test_a_test_with_gpus_never_rewrites_an_output_file(monkeypatch):
    monkeypatch.setenv("UPDATE_OUTPUTS", "1")
    monkeypatch.delenv(DEVICE_ENV)  # as in a multigpu test
    with pytest.raises(AssertionError, match="ranks.out: the pages show CPU runs"):
        check_text("world size 2, 2 processes per node\n", "basics/ranks.py",
                   command="torchrun --standalone --nproc_per_node=2 ranks.py")
    assert split_command((SNIPPETS / "basics/ranks.out").read_text())[1].startswith(
        "world size 4")
