"""snippets/troubleshooting/divergence.py, shown on docs/troubleshooting/results.md."""

import re

import pytest

from harness.launch import shared
from tests.devices import on_each_device
from tests.troubleshooting.common import run_together

SNIPPET = "troubleshooting/divergence.py"


@shared
def runs(device):
    """The snippet as shown (``right``) and with ``--bug``, at once; on GPUs both runs'
    processes ran NCCL. At world size 1 (the one-GPU case) only ``right``: one replica
    cannot drift from another."""
    ranks = device.ranks(2)
    common = dict(script=SNIPPET, launcher="torchrun", nproc=ranks,
                  timeout=device.pick(90, 240))
    launches = dict(right=dict(common, env=device.env("right")))
    if ranks > 1:
        launches["bug"] = dict(common, args=["--bug"], env=device.env("bug"))
    runs = run_together(**launches)
    for name, result in runs.items():
        device.assert_ran(ranks, name, result)
    return runs


def table(stdout):
    """rank -> (accuracy on its own share, parameter checksum)."""
    rows = re.findall(r"^\s+(\d+)\s+([\d.]+)\s+(-?[\d.]+)$", stdout, re.M)
    return {int(r): (float(a), float(c)) for r, a, c in rows}


def whole_accuracy(stdout):
    return float(re.search(r"^accuracy on the whole validation set: ([\d.]+)$", stdout,
                           re.M)[1])


@on_each_device(gpus=2, one_gpu=True)
def test_ranks_report_different_accuracies_on_identical_replicas(device):
    """On one GPU: DDP on CUDA over NCCL, and rank 0's share is the whole validation set."""
    ranks = device.ranks(2)
    result = runs(device)["right"]
    device.check_output(result)
    rows = table(result.stdout)
    assert sorted(rows) == list(range(ranks))
    if ranks > 1:
        if not device.cuda:
            assert rows[0][0] != rows[1][0]  # each rank's share of the data differs...
        assert rows[0][1] == rows[1][1]  # ...but the model is the same
    else:  # the only rank's share is the whole set
        assert rows[0][0] == whole_accuracy(result.stdout)
    assert "replicas identical: yes" in result.stdout


@on_each_device(gpus=2)
def test_training_through_model_module_lets_the_replicas_drift_apart(device):
    result = runs(device)["bug"]
    device.check_output(result, "bug")
    rows = table(result.stdout)
    assert rows[0][1] != rows[1][1]
    assert "replicas identical: NO" in result.stdout
    if not device.cuda:
        # the checksum of rank 0 also differs from that of the right run: it trained alone
        assert rows[0][1] != pytest.approx(table(runs(device)["right"].stdout)[0][1], abs=1e-4)
