"""snippets/troubleshooting/skipped_step.py, shown on docs/troubleshooting/hangs.md."""

import pytest

from harness.launch import shared
from harness.outputs import check_output
from tests.troubleshooting.common import (bug_and_fix, bug_and_fix_on_gpus, check_failed_by_itself,
                                          check_gloo_hang)

SNIPPET = "troubleshooting/skipped_step.py"


@pytest.fixture(scope="module")
@shared
def runs():
    return bug_and_fix(SNIPPET)


def test_a_rank_that_skips_a_step_alone_leaves_the_others_waiting(runs):
    result = runs["bug"]
    check_gloo_hang(result)
    assert "steps taken" not in result.stdout


def test_deciding_together_every_rank_skips_the_same_steps(runs):
    result = runs["fix"]
    assert result.ok, result.report()
    check_output(result, "fix")
    # 4 batches per rank and epoch, 2 epochs; the corrupt sample is in one batch of rank 1
    assert result.stdout.splitlines() == ["rank 0: 6 steps taken, 2 skipped",
                                          "rank 1: 6 steps taken, 2 skipped"]


@pytest.mark.multigpu(2)
def test_on_gpus_the_skipped_step_fails_the_job_and_deciding_together_does_not():
    """With NCCL the collectives out of step are paired without any check, with no defined
    outcome, but rank 0 calls two more than rank 1: the collective timeout ends the job."""
    runs = bug_and_fix_on_gpus(SNIPPET)
    check_failed_by_itself(runs["bug"])
    assert "steps taken" not in runs["bug"].stdout
    assert runs["fix"].ok, runs["fix"].report()
    assert runs["fix"].stdout.splitlines() == ["rank 0: 6 steps taken, 2 skipped",
                                               "rank 1: 6 steps taken, 2 skipped"]
