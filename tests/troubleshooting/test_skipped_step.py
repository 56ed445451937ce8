"""snippets/troubleshooting/skipped_step.py, shown on docs/troubleshooting/hangs.md."""

import pytest

from harness.outputs import check_output
from tests.troubleshooting.common import bug_and_fix, check_gloo_hang

SNIPPET = "troubleshooting/skipped_step.py"


@pytest.fixture(scope="module")
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
