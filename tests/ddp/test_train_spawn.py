"""snippets/ddp/train_spawn.py, shown on docs/ddp/launching.md."""

import pytest

from harness.launch import run
from harness.outputs import check_output
from harness.outputs import GPU_ATOL
from tests.compare import assert_same_state, load
from tests.ddp.train_runs import final_parameters, losses, two_ranks

SNIPPET = "ddp/train_spawn.py"


def test_spawned_processes_train_exactly_like_train_py_under_torchrun():
    result = run(SNIPPET, "--nprocs", "2", "--batch-size", "16", world_size=2)
    check_output(result)
    assert result.stdout.startswith("world size 2 (gloo, cpu), started by mp.spawn: 32 ")
    assert losses(result.stdout) == losses(two_ranks().stdout)
    saved = load(result.workdir / "checkpoint.pt")
    assert saved["step"] == 96
    assert_same_state(saved["model"], final_parameters(two_ranks()), atol=0)


@pytest.mark.multigpu(2)
def test_on_two_gpus_spawn_starts_one_process_per_gpu():
    result = run(SNIPPET, "--nprocs", "2", "--batch-size", "16", world_size=2)
    assert result.stdout.startswith("world size 2 (nccl, cuda), started by mp.spawn: 32 ")
    saved = load(result.workdir / "checkpoint.pt")
    assert saved["step"] == 96
    assert_same_state(saved["model"], final_parameters(two_ranks()), GPU_ATOL)
