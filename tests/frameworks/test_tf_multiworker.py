"""snippets/frameworks/tf_multiworker.py, shown on docs/frameworks/tensorflow.md."""

import ast
import re

import numpy as np
import pytest

from harness.launch import own_gpus, shared, snippet
from tests.compare import assert_every_rank_holds_the_same, run_every_rank_saves, saved
from tests.devices import on_each_device
from tests.frameworks.common import TF_TIMEOUT, needs_tensorflow

SNIPPET = "frameworks/tf_multiworker.py"

pytestmark = [pytest.mark.extras]

#: What TensorFlow logs as it puts a worker on its first GPU (its gpu_device.cc).
ON_GPU_0 = re.compile(r"Created device \S+/device:GPU:0 with \d+ MB memory")


@shared
def two_workers():
    """Two workers, each told the cluster in TF_CONFIG by its job script."""
    return run_every_rank_saves(SNIPPET, launcher="tf-workers", nnodes=2, timeout=TF_TIMEOUT)


def epochs(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("epoch ")]


@needs_tensorflow
@on_each_device(gpus=2, one_gpu=True)
def test_two_workers_end_with_identical_variables(device):
    """On GPUs (needs TensorFlow with CUDA in .venv-tf: pip install 'tensorflow[and-cuda]')
    one worker, ``python tf_multiworker.py``, holds a replica on each GPU: on the CPU a
    worker holds one replica, so two replicas show that the GPUs were used; on one GPU
    TensorFlow's log says so."""
    replicas = device.ranks(2)
    if device.gpus:  # one worker (rehearsed on the CPU, its GPUs hidden)
        workers = 1
        gpus = {"CUDA_VISIBLE_DEVICES": own_gpus(replicas)} if device.cuda else {}
        result = run_every_rank_saves(SNIPPET, launcher="tf-python", timeout=TF_TIMEOUT,
                                      env=gpus)
    else:
        workers = 2
        result = two_workers()
    device.check_output(result)
    batch = 16 * replicas
    assert result.stdout.startswith(
        f"{workers} workers, {replicas} replicas, {batch} samples per step\n"), result.report()
    assert f"final variables identical on all {replicas} replicas" in result.stdout
    assert_every_rank_holds_the_same(result, workers)
    steps = 1024 // batch
    assert [line.endswith(f"({steps} steps)") for line in epochs(result.stdout)] == [True] * 3
    if device.cuda and replicas == 1:
        assert ON_GPU_0.search(result.text), result.report()


@needs_tensorflow
def test_two_workers_end_where_one_worker_with_the_whole_batch_ends():
    one = run_every_rank_saves(SNIPPET, "--batch-size", "32", launcher="tf-python",
                               timeout=TF_TIMEOUT)
    assert one.stdout.startswith("1 workers, 1 replicas, 32 samples per step\n")
    for a, b in zip(saved(one, 0), saved(two_workers(), 0)):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)


@needs_tensorflow
def test_tasks_started_by_srun_build_tf_config_from_slurm_variables():
    result = run_every_rank_saves(SNIPPET, launcher="tf-srun", nproc=2, timeout=TF_TIMEOUT)
    assert epochs(result.stdout) == epochs(two_workers().stdout)
    for a, b in zip(assert_every_rank_holds_the_same(result, 2), saved(two_workers(), 0)):
        np.testing.assert_array_equal(a, b)


def test_expand_hostlist_names_the_hosts_as_scontrol_does():
    source = snippet(SNIPPET).read_text()
    function = next(node for node in ast.parse(source).body
                    if isinstance(node, ast.FunctionDef) and node.name == "expand_hostlist")
    namespace = {"re": __import__("re")}
    exec(compile(ast.Module([function], []), SNIPPET, "exec"), namespace)
    expand = namespace["expand_hostlist"]
    assert expand("localhost") == ["localhost"]
    assert expand("gpu[07-09,12],login1") == ["gpu07", "gpu08", "gpu09", "gpu12", "login1"]
    assert expand("a[1-2],b3,c[10-11]") == ["a1", "a2", "b3", "c10", "c11"]
