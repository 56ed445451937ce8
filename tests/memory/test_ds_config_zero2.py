"""snippets/memory/ds_config_zero2.json, shown on docs/memory/deepspeed.md."""

from tests.memory.runs import assert_ds_config_holds, needs_deepspeed

CONFIG = "memory/ds_config_zero2.json"


@needs_deepspeed
def test_stage_2_shards_gradients_too():
    assert_ds_config_holds(CONFIG.split("/")[1], params=lambda n: 4, grads=lambda n: 4 / n,
                           optimiser=lambda n: 12 / n)
