"""snippets/troubleshooting/skipped_step.py, shown on docs/troubleshooting/hangs.md.

On every device: a rank that skips a step alone leaves the others waiting (on GPUs, NCCL
pairs the collectives out of step without any check, but rank 0 calls two more than rank
1, so the collective timeout ends the job); deciding together, every rank skips the same.
At world size 1 (one GPU) only the fixed script runs: no other rank can leave it waiting.
"""

from harness.launch import shared
from tests.devices import on_each_device
from tests.troubleshooting.common import bug_and_fix, check_hang

SNIPPET = "troubleshooting/skipped_step.py"


@shared
def runs(device):
    return bug_and_fix(SNIPPET, device)


@on_each_device(gpus=2)
def test_a_rank_that_skips_a_step_alone_leaves_the_others_waiting(device):
    result = runs(device)["bug"]
    check_hang(result, device)
    assert "steps taken" not in result.stdout


@on_each_device(gpus=2, one_gpu=True)
def test_deciding_together_every_rank_skips_the_same_steps(device):
    """On one GPU too: the NaN is found on CUDA, and the ranks agree over NCCL."""
    ranks = device.ranks(2)
    result = runs(device)["fix"]
    assert result.ok, result.report()
    device.check_output(result, "fix")
    # 128 samples in batches of 16: 8 batches an epoch shared by the ranks (4 each with 2
    # ranks), 2 epochs; the corrupt sample is in one batch (of rank 1 with 2 ranks)
    steps = 2 * (128 // 16 // ranks - 1)
    assert result.stdout.splitlines() == [f"rank {rank}: {steps} steps taken, 2 skipped"
                                          for rank in range(ranks)]
