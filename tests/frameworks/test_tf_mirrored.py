"""snippets/frameworks/tf_mirrored.py, shown on docs/frameworks/tensorflow.md."""

import numpy as np
import pytest

from harness.outputs import check_output
from tests.frameworks.common import TF_TIMEOUT, needs_tensorflow, run_every_rank_saves, saved

SNIPPET = "frameworks/tf_mirrored.py"

pytestmark = [pytest.mark.extras, needs_tensorflow]


def test_two_replicas_on_one_machine_hold_identical_variables():
    result = run_every_rank_saves(SNIPPET, launcher="tf-python", timeout=TF_TIMEOUT)
    check_output(result)
    assert result.stdout.startswith("2 replicas on CPU:0, CPU:1\n")
    assert "final variables identical on all 2 replicas" in result.stdout
    copies = saved(result, 0)  # kernel and bias of two layers, a copy per replica of each
    assert len(copies) == 8
    for first, second in zip(copies[0::2], copies[1::2]):
        np.testing.assert_array_equal(first, second)
    accuracy = float(result.stdout.split("epoch 3/3")[1].split("accuracy ")[1].split("%")[0])
    assert accuracy > 90  # it learnt
