"""snippets/ddp/local_rank.py, the fixed script shown on docs/ddp/migrating.md."""

import pytest

from harness.launch import run
from tests.ddp.train_runs import stderr_lines
from tests.devices import on_each_device
from tests.on_gpus import NcclLogs

SNIPPET = "ddp/local_rank.py"


@on_each_device(gpus=2)
@pytest.mark.parametrize("launcher", ["torchrun", "torch.distributed.launch"])
def test_it_gets_the_right_local_rank_under_both_launchers(launcher, device):
    """On GPUs each process takes the GPU of its local rank: NCCL ran on cuda:0 and cuda:1."""
    logs = NcclLogs() if device.gpus else None
    result = run(SNIPPET, launcher=launcher, nproc=2, env=logs.env if logs else None)
    device.check_output(result)
    assert result.stdout == "the processes think their local ranks are [0, 1]\n"
    if device.gpus:
        assert sorted(logs.assert_nccl_ran(2)) == [0, 1]  # NCCL on cuda:0 and cuda:1


def test_started_without_a_launcher_it_fails_with_a_key_error():
    result = run(SNIPPET, check=False, timeout=60)
    assert result.returncode == 1
    assert stderr_lines(result, r"^KeyError") == ["KeyError: 'LOCAL_RANK'"]
