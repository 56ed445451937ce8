"""snippets/ddp/local_rank.py, the fixed script shown on docs/ddp/migrating.md."""

import pytest

from harness.launch import run
from harness.outputs import check_output
from tests.ddp.train_runs import stderr_lines
from tests.on_gpus import NcclLogs

SNIPPET = "ddp/local_rank.py"


@pytest.mark.parametrize("launcher", ["torchrun", "torch.distributed.launch"])
def test_it_gets_the_right_local_rank_under_both_launchers(launcher):
    result = run(SNIPPET, launcher=launcher, nproc=2)
    check_output(result)
    assert result.stdout == "the processes think their local ranks are [0, 1]\n"


def test_started_without_a_launcher_it_fails_with_a_key_error():
    result = run(SNIPPET, check=False, timeout=60)
    assert result.returncode == 1
    assert stderr_lines(result, r"^KeyError") == ["KeyError: 'LOCAL_RANK'"]


@pytest.mark.multigpu(2)
def test_on_two_gpus_each_process_takes_the_gpu_of_its_local_rank():
    logs = NcclLogs()
    result = run(SNIPPET, launcher="torchrun", nproc=2, env=logs.env)
    assert result.stdout == "the processes think their local ranks are [0, 1]\n"
    assert sorted(logs.assert_nccl_ran(2)) == [0, 1]  # NCCL on cuda:0 and cuda:1
