"""snippets/ddp/inside_ddp.py, shown on docs/ddp/concepts.md."""

import re

import pytest

from harness.launch import run, shared
from harness.outputs import check_output
from tests.on_gpus import NcclLogs

SNIPPET = "ddp/inside_ddp.py"
DIFFERENCE = r"whole-batch gradient: (\S+)"


def fingerprints(block: str) -> list[str]:
    return re.findall(r"rank \d: (.*)", block)


def backward_events(block: str) -> list[str]:
    return [line.strip() for line in block.splitlines()[1:] if line.strip()]


@pytest.fixture(scope="module")
@shared
def result():
    return run(SNIPPET, launcher="torchrun", nproc=2)


def test_output_as_shown(result):
    check_output(result)  # the difference is below 1e-6 here and in the file


def test_ddp_copies_rank_0s_parameters_and_buffers_to_every_process(result):
    before, after = re.split(r"after DDP\(model\).*\n", result.stdout.split("backward pass")[0])
    assert len(set(fingerprints(before))) == 2  # seeded differently: two different models
    assert fingerprints(after) == [fingerprints(before)[0]] * 2  # both now hold rank 0's


def test_buckets_are_reduced_while_the_backward_pass_still_runs(result):
    step1, step2 = result.stdout.split("backward pass of step")[1:]
    first = backward_events(step1)
    assert sum("starts its all-reduce" in e for e in first) == 1 and "starts its all-reduce" in first[-1]
    second = backward_events(step2.split("largest difference")[0])
    buckets = [i for i, e in enumerate(second) if "starts its all-reduce" in e]
    assert len(buckets) == 2
    assert buckets[0] < second.index("gradient ready: layers.0.weight")  # overlap with backward


def test_the_averaged_gradient_is_the_gradient_of_the_whole_batch(result):
    assert float(re.search(DIFFERENCE, result.stdout)[1]) < 1e-6


@pytest.mark.multigpu(2)
def test_on_two_gpus_the_buckets_overlap_and_the_gradient_is_the_whole_batch_s():
    logs = NcclLogs()
    gpus = run(SNIPPET, launcher="torchrun", nproc=2, env=logs.env)
    logs.assert_nccl_ran(2)  # DDP's broadcast and all-reduces
    test_ddp_copies_rank_0s_parameters_and_buffers_to_every_process(gpus)
    test_buckets_are_reduced_while_the_backward_pass_still_runs(gpus)
    assert float(re.search(DIFFERENCE, gpus.stdout)[1]) < 1e-5  # other kernels, other rounding
