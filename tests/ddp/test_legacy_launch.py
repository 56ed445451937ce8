"""snippets/ddp/legacy_launch.py, the old-style script shown on docs/ddp/migrating.md."""

import re

from harness.launch import DEFAULT_TIMEOUT, run
from harness.outputs import check_text
from tests.ddp.train_runs import stderr_lines
from tests.devices import on_each_device

SNIPPET = "ddp/legacy_launch.py"


def test_torch_distributed_launch_still_exists_and_passes_an_argument_the_script_refuses():
    result = run(SNIPPET, launcher="torch.distributed.launch", nproc=2, check=False, timeout=60)
    assert not result.timed_out and result.returncode != 0
    warning = result.outputs[0].stderr.split("FutureWarning: ")[1].split("\n\n")[0]
    warning = "\n".join(line.rstrip() for line in warning.splitlines())
    assert "torch.distributed.launch is deprecated" in warning
    # Each process prints the usage and its error, unless torch.distributed.launch stopped
    # it first because another one had already failed: show the first.
    usage = stderr_lines(result, r"^usage:")
    errors = sorted(stderr_lines(result, r"error: unrecognized arguments"))
    assert usage == ["usage: legacy_launch.py [-h] [--local_rank LOCAL_RANK]"]
    assert errors and all(re.fullmatch(r"legacy_launch.py: error: unrecognized arguments: "
                                       r"--local-rank=[01]", line) for line in errors)
    check_text(f"FutureWarning: {warning}\n\n{usage[0]}\n{errors[0]}\n", SNIPPET, "launch",
               command=result.command)


@on_each_device(gpus=2, one_gpu=True)
def test_under_torchrun_every_process_thinks_it_is_local_rank_0(device):
    """On the CPU both processes say so; on GPUs both take the first GPU, and NCCL refuses.
    One process on one GPU is right to think so: it trains on cuda:0 over NCCL."""
    ranks = device.ranks(2)
    refused = device.cuda and ranks > 1  # two processes on cuda:0
    result = run(SNIPPET, launcher="torchrun", nproc=ranks, check=not refused,
                 env=None if refused else device.env(), timeout=device.pick(DEFAULT_TIMEOUT, 120))
    if refused:
        assert result.returncode != 0
        assert "Duplicate GPU detected" in result.text
    else:
        device.check_output(result, "torchrun")
        assert f"the processes think their local ranks are {[0] * ranks}" in result.stdout
        device.assert_ran(ranks, result=result)  # DDP on cuda:0 over NCCL
