"""snippets/ddp/elastic.py, shown on docs/ddp/elastic.md.

The page's commands add ``--max-restarts`` to torchrun and set
TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1; the launchers registered here do exactly that.
The crash on two nodes costs too much time for every test run: tools/elastic_loop.py
repeats :func:`crash_and_resume` on one or two nodes to measure how reliable it is.
"""

import runpy

import pytest
import torch

from harness.launch import LAUNCHERS, launcher, run, snippet
from harness.outputs import check_output
from tests.on_gpus import NcclLogs

SNIPPET = "ddp/elastic.py"
ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
CRASH = ("--fail-at-step", "25")  # the last rank crashes after the checkpoint of step 20
RESUMED = "resuming from the checkpoint of step 20"


def _with_restarts(base):
    def build(l):
        procs = LAUNCHERS[base](l)
        for proc in procs:
            proc.argv.insert(1, f"--max-restarts={l.options['max_restarts']}")
        return procs
    return build


for _base in ("torchrun", "torchrun-c10d"):
    launcher(f"{_base}+restarts")(_with_restarts(_base))


def elastic(*args, nnodes=1, check=True, workdir=None, env=None):
    """torchrun --max-restarts=1 elastic.py: 2 ranks on one node, or 1 on each of 2 nodes."""
    base = "torchrun" if nnodes == 1 else "torchrun-c10d"
    return run(SNIPPET, *args, launcher=f"{base}+restarts", max_restarts=1, nnodes=nnodes,
               nproc=2 // nnodes, env={**ENV, **(env or {})}, timeout=180, check=check,
               workdir=workdir)


def crash_and_resume(nnodes=1, check=True, workdir=None, env=None):
    return elastic(*CRASH, nnodes=nnodes, check=check, workdir=workdir, env=env)


def final_state(result):
    return torch.load(result.workdir / "checkpoint.pt", weights_only=True)


def assert_same_training(result, reference):
    state, expected = final_state(result), final_state(reference)
    assert state["step"] == expected["step"] == 40
    for part in ("model", "optimizer"):
        torch.testing.assert_close(state[part], expected[part], rtol=0, atol=0)


@pytest.fixture(scope="module")
def uninterrupted():
    """The page's several-nodes command without the crash: two agents of one rank each."""
    return elastic(nnodes=2)


def test_on_two_nodes_without_failure_it_trains_from_scratch(uninterrupted):
    assert "restart count 0: from scratch" in uninterrupted.stdout  # node 0 holds rank 0
    assert "resuming" not in uninterrupted.text
    assert final_state(uninterrupted)["step"] == 40


def test_after_a_crash_all_workers_restart_and_resume_bit_identically(uninterrupted):
    result = crash_and_resume()
    check_output(result)
    assert "RuntimeError: simulated crash of rank 1 at step 25" in result.text
    assert "failed (exitcode: 1) local_rank: 1" in result.text  # torchrun's report
    assert "restart count 1: " + RESUMED in result.stdout
    assert_same_training(result, uninterrupted)


def test_refuses_restarts_that_would_share_the_store(monkeypatch):
    check = runpy.run_path(str(snippet(SNIPPET)))["check_restarts_are_safe"]
    monkeypatch.setenv("TORCHELASTIC_MAX_RESTARTS", "1")
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    with pytest.raises(RuntimeError, match="TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1"):
        check()
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "False")
    check()
    monkeypatch.setenv("TORCHELASTIC_MAX_RESTARTS", "0")
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    check()


@pytest.mark.multigpu(2)
def test_on_gpus_the_resumed_run_matches_too():
    reference = elastic()
    logs = NcclLogs()
    result = crash_and_resume(env=logs.env)
    assert "restart count 1: " + RESUMED in result.stdout
    logs.assert_nccl_ran(4)  # both ranks of the first start, and of the restart
    state, expected = final_state(result), final_state(reference)
    assert all(value.is_cuda for value in state["model"].values())  # loaded where saved
    for key, value in expected["model"].items():
        torch.testing.assert_close(state["model"][key], value, rtol=0, atol=1e-6)
