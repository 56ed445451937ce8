"""snippets/ddp/inside_ddp.py, shown on docs/ddp/concepts.md.

On every device: DDP copies rank 0's model to every process, reduces the buckets while
the backward pass still runs, and the averaged gradient is the whole batch's (on GPUs
within 1e-5: other kernels, other rounding); on GPUs over NCCL (its logs show it). On one
GPU the same at world size 1: DDP on cuda:0, its all-reduces over NCCL, one run for the three.
"""

import re

from harness.launch import run, shared
from harness.outputs import check_output
from tests.devices import CPU, on_each_device

SNIPPET = "ddp/inside_ddp.py"
DIFFERENCE = r"whole-batch gradient: (\S+)"


def fingerprints(block: str) -> list[str]:
    return re.findall(r"rank \d: (.*)", block)


def backward_events(block: str) -> list[str]:
    return [line.strip() for line in block.splitlines()[1:] if line.strip()]


@shared
def runs(device):
    ranks = device.ranks(2)
    result = run(SNIPPET, launcher="torchrun", nproc=ranks, env=device.env())
    device.assert_ran(ranks, result=result)  # DDP's broadcast and all-reduces
    return result


def test_output_as_shown():
    check_output(runs(CPU))  # the difference is below 1e-6 here and in the file


@on_each_device(gpus=2, one_gpu=True)
def test_ddp_copies_rank_0s_parameters_and_buffers_to_every_process(device):
    ranks = device.ranks(2)
    result = runs(device)
    before, after = re.split(r"after DDP\(model\).*\n", result.stdout.split("backward pass")[0])
    if ranks > 1:
        assert len(set(fingerprints(before))) == 2  # seeded differently: two different models
    assert fingerprints(after) == [fingerprints(before)[0]] * ranks  # all now hold rank 0's


@on_each_device(gpus=2, one_gpu=True)
def test_buckets_are_reduced_while_the_backward_pass_still_runs(device):
    result = runs(device)
    step1, step2 = result.stdout.split("backward pass of step")[1:]
    first = backward_events(step1)
    assert sum("starts its all-reduce" in e for e in first) == 1 and "starts its all-reduce" in first[-1]
    second = backward_events(step2.split("largest difference")[0])
    buckets = [i for i, e in enumerate(second) if "starts its all-reduce" in e]
    assert len(buckets) == 2
    assert buckets[0] < second.index("gradient ready: layers.0.weight")  # overlap with backward


@on_each_device(gpus=2, one_gpu=True)
def test_the_averaged_gradient_is_the_gradient_of_the_whole_batch(device):
    # on GPUs other kernels, other rounding
    assert float(re.search(DIFFERENCE, runs(device).stdout)[1]) < device.pick(1e-6, 1e-5)
