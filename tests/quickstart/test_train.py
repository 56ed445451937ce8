"""snippets/quickstart/train.py, shown on docs/quickstart.md.

Two processes with 16 images each per step train exactly as one process with all 32: the
same losses, the same held-out accuracy, the same saved model. On 2 GPUs, the same with
NCCL, within the tolerance of GPU kernels.
"""

import pytest

from harness.launch import Result, run, shared
from harness.outputs import BARRIER_WARNING, GPU_ATOL
from tests.compare import assert_same_state
from tests.devices import on_each_device
from tests.quickstart.runs import epoch_losses, held_out_accuracy, saved_model

SNIPPET = "quickstart/train.py"


@shared
def one_process() -> Result:
    """The reference: one process taking all 32 images of every step, on the CPU."""
    return run(SNIPPET, "--batch-size", "32", launcher="torchrun", nproc=1,
               env={"SNIPPET_HARNESS_DEVICE": "cpu"})


@on_each_device(gpus=2, one_gpu=True)
def test_two_processes_train_like_one_process_on_the_whole_batch(device):
    """On 2 GPUs NCCL trains like the CPU's one process, within the tolerance of GPU kernels;
    so does one process on one GPU."""
    ranks = device.ranks(2)
    result = run(SNIPPET, "--batch-size", str(32 // ranks), launcher="torchrun", nproc=ranks)
    device.check_output(result)
    assert result.stdout.startswith(
        f"{ranks} processes ({device.backend} on {device.type}), 32 images per step\n")
    losses = epoch_losses(result.stdout)
    if not device.cuda:
        assert len(losses) == 5 and losses == sorted(losses, reverse=True)  # it learns
    assert losses == pytest.approx(epoch_losses(one_process().stdout), abs=device.pick(1e-4, 1e-3))
    if device.cuda:
        assert held_out_accuracy(result.stdout) > 90
    else:
        assert held_out_accuracy(result.stdout) == held_out_accuracy(one_process().stdout) > 90
    assert_same_state(saved_model(result), saved_model(one_process()),
                      atol=device.pick(1e-6, GPU_ATOL))
    if device.cuda:
        assert BARRIER_WARNING not in result.text  # it was told its GPU
