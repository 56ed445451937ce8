"""snippets/memory/ds_config_zero1.json, shown on docs/memory/deepspeed.md."""

from tests.devices import on_each_device
from tests.memory.runs import assert_ds_config_holds, deepspeed_gpu_run, needs_deepspeed

#: Bytes per parameter each rank holds, with N ranks.
BYTES = dict(params=lambda n: 4, grads=lambda n: 4 / n, optimiser=lambda n: 12 / n)
CONFIG = "memory/ds_config_zero1.json"


@needs_deepspeed
@on_each_device(gpus=2)
def test_stage_1_shards_adam_and_the_fp32_master_copy(device):
    # every rank keeps all weights; read after the backward pass, once stage 1 has
    # reduced the full gradients and kept only its partition of them
    runs = {2: deepspeed_gpu_run()} if device.cuda else None  # on the CPU: 1, 2 and 4 ranks
    assert_ds_config_holds(CONFIG.split("/")[1], **BYTES, runs=runs)
