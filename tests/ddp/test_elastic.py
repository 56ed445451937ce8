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
from tests.compare import assert_same_state, load
from tests.devices import CPU, on_each_device

SNIPPET = "ddp/elastic.py"
ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
CRASH = ("--fail-at-step", "25")  # the last rank crashes after the checkpoint of step 20
RESUMED = "resuming from the checkpoint of step 20"


def elastic(*args, nnodes=1, check=True, workdir=None, env=None, ranks=2):
    """torchrun --max-restarts=1 elastic.py: ``ranks`` ranks (2) on one node, or one on each
    of 2 nodes."""
    base = "torchrun" if nnodes == 1 else "torchrun-c10d"
    return run(SNIPPET, *args, launcher=f"{base}+restarts", max_restarts=1, nnodes=nnodes,
               nproc=ranks // nnodes, env={**ENV, **(env or {})}, timeout=180, check=check,
               workdir=workdir)


def crash_and_resume(nnodes=1, check=True, workdir=None, env=None, ranks=2):
    return elastic(*CRASH, nnodes=nnodes, check=check, workdir=workdir, env=env, ranks=ranks)


def final_state(result):
    return load(result.workdir / "checkpoint.pt", map_location=None)  # where it was saved


def assert_same_training(result, reference):
    state, expected = final_state(result), final_state(reference)
    assert state["step"] == expected["step"] == 40
    for part in ("model", "optimizer"):
        assert_same_state(state[part], expected[part], atol=0, what=f"{part} ")


@shared
def reference(device):
    """On the CPU the page's several-nodes command without the crash: two agents of one
    rank each; on GPUs, the one-node command without the crash (2 ranks, one per GPU); at
    world size 1, one rank on one node."""
    ranks = device.ranks(2)
    return elastic(nnodes=device.pick(2, 1) if ranks > 1 else 1, ranks=ranks)


def test_on_two_nodes_without_failure_it_trains_from_scratch():
    uninterrupted = reference(CPU)
    assert "restart count 0: from scratch" in uninterrupted.stdout  # node 0 holds rank 0
    assert "resuming" not in uninterrupted.text
    assert final_state(uninterrupted)["step"] == 40


@on_each_device(gpus=2, one_gpu=True)
def test_after_a_crash_all_workers_restart_and_resume_bit_identically(device):
    """On GPUs the resumed run matches too, within 1e-6, its state loaded where it was
    saved, on the GPUs. On one GPU the only rank crashes, and restarts alone."""
    ranks = device.ranks(2)
    result = crash_and_resume(env=device.env(), ranks=ranks)
    device.check_output(result)
    if not device.cuda:
        last = ranks - 1  # the rank that crashes
        assert f"RuntimeError: simulated crash of rank {last} at step 25" in result.text
        assert f"failed (exitcode: 1) local_rank: {last}" in result.text  # torchrun's report
    assert "restart count 1: " + RESUMED in result.stdout
    device.assert_ran(2 * ranks, result=result)  # every rank of the first start and the restart
    if device.cuda:
        state, expected = final_state(result), final_state(reference(device))
        assert all(value.is_cuda for value in state["model"].values())  # loaded where saved
        assert_same_state(state["model"], expected["model"], atol=1e-6)
    else:
        assert_same_training(result, reference(device))


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
