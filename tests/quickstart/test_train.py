"""snippets/quickstart/train.py, shown on docs/quickstart.md.

Two processes with 16 images each per step train exactly as one process with all 32: the
same losses, the same held-out accuracy, the same saved model. On 2 GPUs, the same with
NCCL, within the tolerance of GPU kernels.
"""

import pytest

from harness.launch import Result, run, shared
from harness.outputs import BARRIER_WARNING, GPU_ATOL, check_output
from tests.compare import assert_same_state
from tests.quickstart.runs import epoch_losses, held_out_accuracy, saved_model

SNIPPET = "quickstart/train.py"


@shared
def one_process() -> Result:
    """The reference: one process taking all 32 images of every step, on the CPU."""
    return run(SNIPPET, "--batch-size", "32", launcher="torchrun", nproc=1,
               env={"SNIPPET_HARNESS_DEVICE": "cpu"})


def test_two_processes_train_like_one_process_on_the_whole_batch():
    result = run(SNIPPET, "--batch-size", "16", launcher="torchrun", nproc=2)
    check_output(result)
    assert result.stdout.startswith("2 processes (gloo on cpu), 32 images per step\n")
    losses = epoch_losses(result.stdout)
    assert len(losses) == 5 and losses == sorted(losses, reverse=True)  # it learns
    assert losses == pytest.approx(epoch_losses(one_process().stdout), abs=1e-4)
    assert held_out_accuracy(result.stdout) == held_out_accuracy(one_process().stdout) > 90
    assert_same_state(saved_model(result), saved_model(one_process()), atol=1e-6)


@pytest.mark.multigpu(2)
def test_on_two_gpus_nccl_trains_like_the_cpu():
    result = run(SNIPPET, "--batch-size", "16", launcher="torchrun", nproc=2)
    assert result.stdout.startswith("2 processes (nccl on cuda), 32 images per step\n")
    assert epoch_losses(result.stdout) == pytest.approx(epoch_losses(one_process().stdout),
                                                        abs=1e-3)
    assert held_out_accuracy(result.stdout) > 90
    assert_same_state(saved_model(result), saved_model(one_process()), atol=GPU_ATOL)
    assert BARRIER_WARNING not in result.text  # it was told its GPU
