"""snippets/memory/ds_config_zero2_offload.json, shown on docs/memory/deepspeed.md."""

from tests.devices import on_each_device
from tests.memory.runs import assert_ds_config_holds, deepspeed_gpu_run, needs_deepspeed

#: Bytes per parameter each rank holds, with N ranks.
BYTES = dict(params=lambda n: 4, grads=lambda n: 4 / n, optimiser=lambda n: 12 / n)
CONFIG = "memory/ds_config_zero2_offload.json"


@needs_deepspeed
@on_each_device(gpus=2)
def test_stage_2_offload_keeps_fp32_gradients_for_the_cpu_step(device):
    # on a CPU-only machine "offloaded" and "on the GPU" are the same memory: the test
    # checks the amounts; tests/tools checks on GPUs that they sit in CPU memory
    runs = {2: deepspeed_gpu_run()} if device.cuda else None  # on the CPU: 1, 2 and 4 ranks
    assert_ds_config_holds(CONFIG.split("/")[1], **BYTES, runs=runs)
