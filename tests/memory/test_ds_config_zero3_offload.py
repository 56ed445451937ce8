"""snippets/memory/ds_config_zero3_offload.json, shown on docs/memory/deepspeed.md."""

from tests.devices import on_each_device
from tests.memory.runs import assert_ds_config_holds, deepspeed_gpu_run, needs_deepspeed

#: Bytes per parameter each rank holds, with N ranks.
BYTES = dict(params=lambda n: 4 / n, grads=lambda n: 8 / n, optimiser=lambda n: 12 / n)
CONFIG = "memory/ds_config_zero3_offload.json"


@needs_deepspeed
@on_each_device(gpus=2)
def test_stage_3_offload_keeps_a_working_and_an_fp32_gradient_partition(device):
    runs = {2: deepspeed_gpu_run()} if device.cuda else None  # on the CPU: 1, 2 and 4 ranks
    assert_ds_config_holds(CONFIG.split("/")[1], **BYTES, runs=runs)
