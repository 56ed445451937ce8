"""snippets/ddp/elastic.py, shown on docs/ddp/elastic.md.

The page's commands add ``--max-restarts`` to torchrun and set
TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1; so do the runs here, with the launchers
``torchrun+restarts`` and ``torchrun-c10d+restarts`` of harness/launch.py.
The crash on two nodes costs too much time for every test run: tools/elastic_loop.py
repeats :func:`crash_and_resume` on one or two nodes to measure how reliable it is.
"""

import runpy

import pytest

from harness.launch import run, shared, snippet
from harness.outputs import check_output
from tests.compare import assert_same_state, load
from tests.on_gpus import NcclLogs

SNIPPET = "ddp/elastic.py"
ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
CRASH = ("--fail-at-step", "25")  # the last rank crashes after the checkpoint of step 20
RESUMED = "resuming from the checkpoint of step 20"


def elastic(*args, nnodes=1, check=True, workdir=None, env=None):
    """torchrun --max-restarts=1 elastic.py: 2 ranks on one node, or 1 on each of 2 nodes."""
    base = "torchrun" if nnodes == 1 else "torchrun-c10d"
    return run(SNIPPET, *args, launcher=f"{base}+restarts", max_restarts=1, nnodes=nnodes,
               nproc=2 // nnodes, env={**ENV, **(env or {})}, timeout=180, check=check,
               workdir=workdir)


def crash_and_resume(nnodes=1, check=True, workdir=None, env=None):
    return elastic(*CRASH, nnodes=nnodes, check=check, workdir=workdir, env=env)


def final_state(result):
    return load(result.workdir / "checkpoint.pt", map_location=None)  # where it was saved


def assert_same_training(result, reference):
    state, expected = final_state(result), final_state(reference)
    assert state["step"] == expected["step"] == 40
    for part in ("model", "optimizer"):
        assert_same_state(state[part], expected[part], atol=0, what=f"{part} ")


@pytest.fixture(scope="module")
@shared
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
    assert_same_state(state["model"], expected["model"], atol=1e-6)
