"""snippets/frameworks/tf_keras_fit.py, shown on docs/frameworks/tensorflow.md."""

import pytest

from harness.outputs import check_output, check_text
from tests.frameworks.common import (TF_TIMEOUT, assert_every_rank_holds_the_same, needs_tensorflow,
                                     run_every_rank_saves)

SNIPPET = "frameworks/tf_keras_fit.py"

pytestmark = [pytest.mark.extras, needs_tensorflow]


def two_workers(**kwargs):
    return run_every_rank_saves(SNIPPET, launcher="tf-workers", nnodes=2, timeout=TF_TIMEOUT,
                                **kwargs)


def test_tf_keras_fit_trains_two_workers_to_identical_variables():
    result = two_workers()
    check_output(result)
    assert result.stdout.startswith("a tf_keras model on 2 replicas\n")
    assert result.stdout.count("accuracy") == 3
    assert_every_rank_holds_the_same(result, 2)


def test_keras_3_fit_fails_under_multi_worker_mirrored_strategy():
    result = two_workers(env={"TF_USE_LEGACY_KERAS": "0"}, check=False)
    assert result.returncode != 0 and not result.timed_out, result.report()
    assert result.stdout.startswith("a keras model on 2 replicas\n")
    stderr = result.outputs[0].stderr
    assert "history = model.fit(" in stderr, result.report()
    # The error message holds each replica's batch; the page shows its first and last lines.
    lines = stderr[stderr.index("ValueError: Attempt to convert a value (PerReplica:{"):].splitlines()
    last = next(line for line in lines if line.startswith("}) with an unsupported type"))
    check_text("\n".join([lines[0], lines[1], "  ...", last]) + "\n", SNIPPET, "keras3")


@pytest.mark.multigpu(2)
def test_on_two_gpus_one_worker_fits_a_replica_on_each():
    """Needs TensorFlow with CUDA in .venv-tf (pip install 'tensorflow[and-cuda]'); on the
    CPU one worker holds one replica, so two replicas show that the GPUs were used."""
    result = run_every_rank_saves(SNIPPET, launcher="tf-workers", nnodes=1, timeout=TF_TIMEOUT,
                                  env={"CUDA_VISIBLE_DEVICES": "0,1"})  # worker 0 of 1
    assert result.stdout.startswith("a tf_keras model on 2 replicas\n"), result.report()
    assert result.stdout.count("accuracy") == 3
