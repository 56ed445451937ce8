"""snippets/frameworks/tf_keras_fit.py, shown on docs/frameworks/tensorflow.md."""

import re

import pytest

from harness.launch import own_gpus
from harness.outputs import check_text
from tests.compare import assert_every_rank_holds_the_same, run_every_rank_saves
from tests.devices import on_each_device
from tests.frameworks.common import TF_TIMEOUT, needs_tensorflow

SNIPPET = "frameworks/tf_keras_fit.py"

pytestmark = [pytest.mark.extras, needs_tensorflow]

#: What TensorFlow logs as it puts a worker on its first GPU (its gpu_device.cc).
ON_GPU_0 = re.compile(r"Created device \S+/device:GPU:0 with \d+ MB memory")


def two_workers(**kwargs):
    return run_every_rank_saves(SNIPPET, launcher="tf-workers", nnodes=2, timeout=TF_TIMEOUT,
                                **kwargs)


@on_each_device(gpus=2, one_gpu=True)
def test_tf_keras_fit_trains_two_workers_to_identical_variables(device):
    """On GPUs (needs TensorFlow with CUDA in .venv-tf: pip install 'tensorflow[and-cuda]')
    one worker fits a replica on each GPU: on the CPU one worker holds one replica, so two
    replicas show that the GPUs were used; on one GPU TensorFlow's log says so."""
    replicas = device.ranks(2)
    if device.gpus:  # one worker (rehearsed on the CPU, its GPUs hidden)
        gpus = {"CUDA_VISIBLE_DEVICES": own_gpus(replicas)} if device.cuda else {}
        result = run_every_rank_saves(SNIPPET, launcher="tf-workers", nnodes=1,
                                      timeout=TF_TIMEOUT, env=gpus)
    else:
        result = two_workers()
    device.check_output(result)
    assert result.stdout.startswith(f"a tf_keras model on {replicas} replicas\n"), (
        result.report())
    assert result.stdout.count("accuracy") == 3
    assert_every_rank_holds_the_same(result, 1 if device.gpus else 2)  # the workers
    if device.cuda and replicas == 1:
        assert ON_GPU_0.search(result.text), result.report()


def test_keras_3_fit_fails_under_multi_worker_mirrored_strategy():
    result = two_workers(env={"TF_USE_LEGACY_KERAS": "0"}, check=False)
    assert result.returncode != 0 and not result.timed_out, result.report()
    assert result.stdout.startswith("a keras model on 2 replicas\n")
    stderr = result.outputs[0].stderr
    assert "history = model.fit(" in stderr, result.report()
    # The error message holds each replica's batch; the page shows its first and last lines.
    lines = stderr[stderr.index("ValueError: Attempt to convert a value (PerReplica:{"):].splitlines()
    last = next(line for line in lines if line.startswith("}) with an unsupported type"))
    check_text("\n".join([lines[0], lines[1], "  ...", last]) + "\n", SNIPPET, "keras3",
               command=result.command)
