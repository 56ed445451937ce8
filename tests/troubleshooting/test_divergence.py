"""snippets/troubleshooting/divergence.py, shown on docs/troubleshooting/results.md."""

import re

import pytest

from harness.launch import shared
from harness.outputs import check_output
from tests.on_gpus import NcclLogs
from tests.troubleshooting.common import run_together

SNIPPET = "troubleshooting/divergence.py"


@pytest.fixture(scope="module")
@shared
def runs():
    common = dict(script=SNIPPET, launcher="torchrun", nproc=2, timeout=90)
    return run_together(right=common, bug=dict(common, args=["--bug"]))


def table(stdout):
    """rank -> (accuracy on its own share, parameter checksum)."""
    rows = re.findall(r"^\s+(\d+)\s+([\d.]+)\s+(-?[\d.]+)$", stdout, re.M)
    return {int(r): (float(a), float(c)) for r, a, c in rows}


def test_ranks_report_different_accuracies_on_identical_replicas(runs):
    result = runs["right"]
    check_output(result)
    rows = table(result.stdout)
    assert sorted(rows) == [0, 1]
    assert rows[0][0] != rows[1][0]  # each rank's share of the data differs...
    assert rows[0][1] == rows[1][1]  # ...but the model is the same
    assert "replicas identical: yes" in result.stdout


def test_training_through_model_module_lets_the_replicas_drift_apart(runs):
    result = runs["bug"]
    check_output(result, "bug")
    rows = table(result.stdout)
    assert rows[0][1] != rows[1][1]
    assert "replicas identical: NO" in result.stdout
    # the checksum of rank 0 also differs from that of the right run: it trained alone
    assert rows[0][1] != pytest.approx(table(runs["right"].stdout)[0][1], abs=1e-4)


@pytest.mark.multigpu(2)
def test_on_gpus_the_replicas_stay_identical_and_model_module_lets_them_drift():
    common = dict(script=SNIPPET, launcher="torchrun", nproc=2, timeout=240)
    logs = {"right": NcclLogs(), "bug": NcclLogs()}
    gpu = run_together(right=dict(common, env=logs["right"].env),
                       bug=dict(common, args=["--bug"], env=logs["bug"].env))
    for name in logs:
        logs[name].assert_nccl_ran(2)
    right, bug = table(gpu["right"].stdout), table(gpu["bug"].stdout)
    assert sorted(right) == [0, 1] and right[0][1] == right[1][1]
    assert "replicas identical: yes" in gpu["right"].stdout
    assert bug[0][1] != bug[1][1]
    assert "replicas identical: NO" in gpu["bug"].stdout
