"""snippets/memory/ds_config_zero3_offload.json, shown on docs/memory/deepspeed.md."""

from tests.memory.runs import assert_ds_config_holds, needs_deepspeed

CONFIG = "memory/ds_config_zero3_offload.json"


@needs_deepspeed
def test_stage_3_offload_keeps_a_working_and_an_fp32_gradient_partition():
    assert_ds_config_holds(CONFIG.split("/")[1], params=lambda n: 4 / n, grads=lambda n: 8 / n,
                           optimiser=lambda n: 12 / n)
