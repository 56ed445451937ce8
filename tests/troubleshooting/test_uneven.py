"""snippets/troubleshooting/uneven.py, shown on docs/troubleshooting/hangs.md."""

import pytest

from harness.launch import shared
from harness.outputs import check_output
from tests.troubleshooting.common import (bug_and_fix, bug_and_fix_on_gpus, check_failed_by_itself,
                                          check_gloo_hang)

SNIPPET = "troubleshooting/uneven.py"


@pytest.fixture(scope="module")
@shared
def runs():
    return bug_and_fix(SNIPPET)


def test_the_rank_with_more_batches_waits_for_the_others(runs):
    result = runs["bug"]
    check_gloo_hang(result)


def test_join_lets_every_rank_finish_with_the_same_parameters(runs):
    result = runs["fix"]
    assert result.ok, result.report()
    check_output(result, "fix")
    # 64 and 96 samples in batches of 16
    assert result.stdout.splitlines() == ["steps per rank: [4, 6]",
                                          "parameters identical on all ranks: True"]


@pytest.mark.multigpu(2)
def test_on_gpus_uneven_batches_fail_the_job_and_join_does_not():
    """With NCCL, rank 0's gathering at the end is paired with rank 1's gradient all-reduce
    without any check, but rank 1 calls two collectives more: the timeout ends the job."""
    runs = bug_and_fix_on_gpus(SNIPPET)
    check_failed_by_itself(runs["bug"])
    assert runs["fix"].ok, runs["fix"].report()
    assert runs["fix"].stdout.splitlines() == ["steps per rank: [4, 6]",
                                               "parameters identical on all ranks: True"]
