"""snippets/frameworks/tf_mirrored.py, shown on docs/frameworks/tensorflow.md."""

import numpy as np
import pytest

from harness.frameworks import TF_VENV
from harness.launch import own_gpus, run
from harness.outputs import check_output, check_text
from tests.compare import run_every_rank_saves, saved
from tests.devices import on_each_device
from tests.frameworks.common import TF_TIMEOUT, needs_tensorflow

SNIPPET = "frameworks/tf_mirrored.py"

pytestmark = [pytest.mark.extras, needs_tensorflow]

#: A GPU that no machine has: CUDA finds no device, whatever TensorFlow is installed.
NO_SUCH_GPU = "GPU-00000000-0000-0000-0000-000000000000"


@on_each_device(gpus=2, one_gpu=True)
def test_two_replicas_on_one_machine_hold_identical_variables(device):
    """On GPUs (needs TensorFlow with CUDA in .venv-tf: pip install 'tensorflow[and-cuda]')
    one replica per GPU it is given, --expect-gpus; on one GPU a single replica on GPU:0.
    Without GPUs (the rehearsal too) two replicas on the CPU, as on the page."""
    if device.cuda:
        replicas = device.ranks(2)
        result = run_every_rank_saves(SNIPPET, "--expect-gpus", launcher="tf-python",
                                      timeout=TF_TIMEOUT,
                                      env={"CUDA_VISIBLE_DEVICES": own_gpus(replicas)})
        on = ", ".join(f"GPU:{i}" for i in range(replicas))
    else:
        # The GPUs, if any, are hidden (harness/frameworks.py's tf_gpus), as on a machine
        # without GPUs
        replicas = 2
        result = run_every_rank_saves(SNIPPET, launcher="tf-python", timeout=TF_TIMEOUT)
        on = "CPU:0, CPU:1"
    device.check_output(result)
    assert result.stdout.startswith(f"TensorFlow 2.21.0 sees {device.pick(0, replicas)} GPU(s)\n"
                                    f"{replicas} replicas on {on}\n"), result.report()
    assert f"final variables identical on all {replicas} replicas" in result.stdout
    # kernel and bias of two layers, a copy per replica of each
    copies = saved(result, 0)
    assert len(copies) == 4 * replicas
    for other in range(1, replicas):
        for first, copy in zip(copies[0::replicas], copies[other::replicas]):
            np.testing.assert_array_equal(first, copy)
    accuracy = float(result.stdout.split("epoch 3/3")[1].split("accuracy ")[1].split("%")[0])
    assert accuracy > 90  # it learnt


def failed(result):
    """The run stopped with exit code 1 before training; its last line of stderr."""
    assert result.returncode == 1 and not result.timed_out, result.report()
    assert result.stdout == "TensorFlow 2.21.0 sees 0 GPU(s)\n"  # no replica, no training
    return result.outputs[0].stderr.splitlines()[-1]


#: .venv-tf holds TensorFlow without its CUDA libraries (the packages `tensorflow[and-cuda]`
#: adds), as `make test-extras` installs it: it sees no GPU, even on a machine with GPUs.
CUDA_LIBRARIES = list((TF_VENV / "lib").glob("python*/site-packages/nvidia_cublas_cu12-*"))


@pytest.mark.skipif(bool(CUDA_LIBRARIES), reason="TensorFlow has its CUDA libraries here")
def test_gpus_given_by_slurm_to_a_tensorflow_without_cuda_stop_the_run_with_one_line():
    result = run(SNIPPET, launcher="tf-python", timeout=TF_TIMEOUT, check=False,
                 env={"CUDA_VISIBLE_DEVICES": "0,1"})
    line = failed(result)
    assert line == ("GPUs were expected (CUDA_VISIBLE_DEVICES=0,1) but TensorFlow sees none: "
                    "install it with pip install 'tensorflow[and-cuda]'")
    check_text(result.stdout + line + "\n", result.script, "no-gpu", command=result.command)  # without TF's log lines


def test_gpus_named_but_not_found_stop_the_run_with_any_tensorflow():
    result = run(SNIPPET, launcher="tf-python", timeout=TF_TIMEOUT, check=False,
                 env={"CUDA_VISIBLE_DEVICES": NO_SUCH_GPU})
    assert failed(result).startswith(f"GPUs were expected (CUDA_VISIBLE_DEVICES={NO_SUCH_GPU})")


def test_expect_gpus_stops_the_run_when_tensorflow_sees_none():
    result = run(SNIPPET, "--expect-gpus", launcher="tf-python", timeout=TF_TIMEOUT,
                 check=False)
    assert failed(result).startswith("GPUs were expected (--expect-gpus) but TensorFlow sees none")
