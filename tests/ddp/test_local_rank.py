"""snippets/ddp/local_rank.py, the fixed script shown on docs/ddp/migrating.md."""

import pytest

from harness.launch import run
from tests.ddp.train_runs import stderr_lines
from tests.devices import on_each_device
from tests.on_gpus import NcclLogs

SNIPPET = "ddp/local_rank.py"


@on_each_device(gpus=2, one_gpu=True)
@pytest.mark.parametrize("launcher", ["torchrun", "torch.distributed.launch"])
def test_it_gets_the_right_local_rank_under_both_launchers(launcher, device):
    """On GPUs each process takes the GPU of its local rank: NCCL ran on cuda:0 and cuda:1
    (on one GPU, on cuda:0)."""
    ranks = device.ranks(2)
    logs = NcclLogs() if device.cuda else None
    result = run(SNIPPET, launcher=launcher, nproc=ranks, env=logs.env if logs else None)
    if launcher == "torch.distributed.launch":  # the page shows this run; torchrun's
        device.check_output(result)               # prints the same line (asserted below)
    assert result.stdout == f"the processes think their local ranks are {list(range(ranks))}\n"
    if device.cuda:
        # NCCL on cuda:<local rank> in every process
        assert sorted(logs.assert_nccl_ran(ranks)) == list(range(ranks))


def test_started_without_a_launcher_it_fails_with_a_key_error():
    result = run(SNIPPET, check=False, timeout=60)
    assert result.returncode == 1
    assert stderr_lines(result, r"^KeyError") == ["KeyError: 'LOCAL_RANK'"]
