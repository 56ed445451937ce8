"""snippets/troubleshooting/uneven.py, shown on docs/troubleshooting/hangs.md.

On every device: on the CPU with gloo, the rank with more batches waits in a collective
that the others never call, until gloo's timeout names it; on GPUs, NCCL pairs rank 0's
gathering at the end with rank 1's gradient all-reduce without any check, but rank 1 calls
two collectives more, so the timeout ends the job there too. Join lets every rank finish.
At world size 1 (one GPU) only the fixed script runs: no other rank can leave it waiting.
"""

from harness.launch import shared
from tests.devices import on_each_device
from tests.troubleshooting.common import bug_and_fix, check_hang

SNIPPET = "troubleshooting/uneven.py"


@shared
def runs(device):
    return bug_and_fix(SNIPPET, device)


@on_each_device(gpus=2)
def test_the_rank_with_more_batches_waits_for_the_others(device):
    check_hang(runs(device)["bug"], device)


@on_each_device(gpus=2, one_gpu=True)
def test_join_lets_every_rank_finish_with_the_same_parameters(device):
    """On one GPU too: join() over NCCL, with the model on CUDA, where rank 0 is alone."""
    ranks = device.ranks(2)
    result = runs(device)["fix"]
    assert result.ok, result.report()
    device.check_output(result, "fix")
    # 64 samples on rank 0, 32 more on each further rank (96 on rank 1), in batches of 16
    steps = [(64 + 32 * rank) // 16 for rank in range(ranks)]
    assert result.stdout.splitlines() == [f"steps per rank: {steps}",
                                          "parameters identical on all ranks: True"]
